"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of its own, on SQLite and on PostgreSQL (skipped without
    CTXD_TEST_POSTGRES_URL): what the migration tests upgrade and downgrade."""
    if request.param == "postgres":
        factory: Callable[[], str] = request.getfixturevalue("postgres_database_factory")
        return factory()
    return f"sqlite:///{tmp_path / 'ctxd.sqlite3'}"
