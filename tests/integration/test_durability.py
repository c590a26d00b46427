"""Commit durability per kind of write (app/store/db.py ``make_engine``, ``core_write``).

An acknowledged event must survive a power loss: every transaction commits with SQLite's
``synchronous=FULL`` (PostgreSQL: ``synchronous_commit`` on) except a GET's save (manifest,
layout and prefix state, derived from the events and planned again if lost), which commits
with ``NORMAL`` (PostgreSQL: ``SET LOCAL synchronous_commit = off``). Before, every SQLite
connection ran ``NORMAL``, event POSTs included.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from app.store.db import core_write, make_engine, make_session_factory, unit_of_work

FULL, NORMAL = 2, 1  # PRAGMA synchronous values


def _sqlite_mode(db: object) -> int:
    return int(db.execute(text("PRAGMA synchronous")).scalar_one())  # type: ignore[attr-defined]


def test_sqlite_event_writes_are_full_and_a_gets_save_is_normal(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'ctxd.db'}", pool_size=1, max_overflow=0)
    factory = make_session_factory(engine)
    try:
        with unit_of_work(factory) as db:  # POST events, session create, delete
            assert _sqlite_mode(db) == FULL
        with core_write(factory) as db:  # a Core write, durable by default
            assert _sqlite_mode(db) == FULL
        with core_write(factory, durable=False) as db:  # the GET's save, on the same pooled connection
            assert _sqlite_mode(db) == NORMAL
        with unit_of_work(factory) as db:  # the next durable write on that connection is FULL again
            assert _sqlite_mode(db) == FULL
    finally:
        engine.dispose()


def test_a_get_request_saves_with_normal_and_events_stay_full(tmp_path: Path) -> None:
    """Through the service: the PRAGMA each transaction ran with, seen by the engine."""
    from fastapi.testclient import TestClient
    from sqlalchemy import event

    from app.main import create_app
    from app.settings import Settings

    seen: list[tuple[str, int]] = []
    app = create_app(Settings(data_dir=tmp_path))
    with TestClient(app) as client:
        engine = app.state.ctxd.engine

        @event.listens_for(engine, "commit")
        def _commit(conn: object) -> None:
            mode = conn.connection.dbapi_connection.execute("PRAGMA synchronous").fetchone()[0]  # type: ignore[attr-defined]
            seen.append(("relaxed" if conn.get_execution_options().get("ctxd_relaxed_durability") else "durable", mode))  # type: ignore[attr-defined]

        sid = client.post("/v1/sessions", json={"profile": "qwen3", "system": "s", "contract": {"goal": "g", "constraints": []}}).json()["id"]
        assert client.post(f"/v1/sessions/{sid}/events", json={"events": [
            {"event_id": "e1", "kind": "message", "role": "user", "content": "hello"}]}).status_code in (200, 201)
        durable = list(seen)
        assert durable and all(mode == FULL for _, mode in durable), durable
        seen.clear()
        assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
        assert ("relaxed", NORMAL) in seen, seen
        assert all(mode == NORMAL for kind, mode in seen if kind == "relaxed"), seen


@pytest.mark.postgres
def test_postgres_gets_save_does_not_wait_for_the_wal_flush(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    factory = make_session_factory(engine)
    try:
        with core_write(factory) as db:  # the server's own setting (a test server may run with off)
            server_default = db.execute(text("SHOW synchronous_commit")).scalar_one()
            db.execute(text("SET LOCAL synchronous_commit = on"))
        with core_write(factory, durable=False) as db:
            assert db.execute(text("SHOW synchronous_commit")).scalar_one() == "off"
        with core_write(factory) as db:  # SET LOCAL ended with its transaction
            assert db.execute(text("SHOW synchronous_commit")).scalar_one() == server_default
    finally:
        engine.dispose()
