"""Profiles with the ``recall`` tool for the recall tests (issue 14 item 3): variants of the
shipped qwen3 profile, and an app over SQLite or PostgreSQL that loads them."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value) if isinstance(value, str) else str(value)


def qwen3_variant(name: str, **changes: Any) -> str:
    """A TOML profile ``name``: the shipped ``qwen3`` with ``changes`` (e.g. ``recall=True``)."""
    shipped = tomllib.loads(resources.files("app.profiles").joinpath("profiles.toml").read_text(encoding="utf-8"))
    body = shipped["qwen3"] | changes
    return f"[{name}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in body.items())


def recall_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
               profiles: str) -> Iterator[TestClient]:
    """The app with ``profiles`` (TOML) added, on ``request.param`` (sqlite or postgres)."""
    data_dir = tmp_path_factory.mktemp("ctxd-recall")
    (data_dir / "profiles.toml").write_text(profiles, encoding="utf-8")
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    settings = Settings(data_dir=data_dir, database_url=url, profiles_path=data_dir / "profiles.toml")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client
