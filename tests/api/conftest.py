from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A real app over real HTTP semantics (ASGI), on SQLite and on PostgreSQL."""
    data_dir: Path = tmp_path_factory.mktemp("ctxd-data")
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        settings = Settings(data_dir=data_dir, database_url=url)
    else:
        settings = Settings(data_dir=data_dir)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
