from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.tokenizers.hf import openai_to_template_messages
from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir


@pytest.fixture(scope="session")
def sqlite_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("ctxd-e2e"))
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="session")
def postgres_client(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("ctxd-e2e-pg"), database_url=postgres_url)
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="session")
def qwen3_ids() -> Callable[[dict[str, Any]], list[int]]:
    """Ids of an OpenAI body, independently: the official Qwen3 tokenizer's apply_chat_template."""
    tokenizer = load_hf_tokenizer(qwen3_tokenizer_dir())

    def ids(body: dict[str, Any]) -> list[int]:
        return list(tokenizer.apply_chat_template(openai_to_template_messages(body["messages"]), tools=body.get("tools"),
                                                  add_generation_prompt=True, tokenize=True, return_dict=False))

    return ids
