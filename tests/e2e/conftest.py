from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


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
