"""A database outage is a 503 with Retry-After, never a 500 (issue 13 item 5; the native
PostgreSQL restart test is tests/load/test_faults.py)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import exc as sa

from app.api.problems import database_unavailable
from app.main import create_app
from app.settings import Settings
from app.store.db import make_engine, make_read_factory, make_session_factory
from ctxd_tools.native_stack import free_port

SESSION = {"profile": "qwen3", "contract": {"goal": "fix the bug"}}


def test_requests_answer_503_with_retry_after_while_the_database_is_unreachable(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path))) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        # the database goes away: nothing listens on this port
        dead = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/ctxd", connect_args={"connect_timeout": 2})
        state = client.app.state.ctxd  # type: ignore[attr-defined]
        live = state.session_factory, state.read_factory
        state.session_factory, state.read_factory = make_session_factory(dead), make_read_factory(dead)
        try:
            answers = [client.post(f"/v1/sessions/{sid}/events",
                                   json={"events": [{"event_id": "u1", "kind": "message", "role": "user",
                                                     "content": "hello"}]}),
                       client.get(f"/v1/sessions/{sid}/request"), client.post("/v1/sessions", json=SESSION)]
        finally:
            state.session_factory, state.read_factory = live
            dead.dispose()
        for r in answers:
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["title"] == "Database unavailable"
            assert r.json()["retry_after"] == 1
        # back: the retried batch is stored once
        r = client.post(f"/v1/sessions/{sid}/events",
                        json={"events": [{"event_id": "u1", "kind": "message", "role": "user", "content": "hello"}]})
        assert r.status_code == 200 and r.json()["results"][0]["seq"] == 1


def test_only_outages_are_unavailable() -> None:
    import sqlite3

    import psycopg

    assert database_unavailable(sa.TimeoutError("QueuePool limit of size 10 overflow 10 reached")) is not None
    assert database_unavailable(sa.OperationalError("SELECT 1", {}, psycopg.OperationalError(
        "connection failed: Connection refused"))) == "connection failed: Connection refused"
    # a query in flight when the server stops (SQLSTATE 57P01), or a connect while it starts (57P03):
    # the kinds peers answered 500 (Gitlawb/node#256, superseriousbusiness/gotosocial#2738)
    assert database_unavailable(sa.OperationalError("SELECT 1", {}, psycopg.errors.AdminShutdown(
        "terminating connection due to administrator command"))) is not None
    assert database_unavailable(sa.OperationalError("SELECT 1", {}, psycopg.errors.CannotConnectNow(
        "the database system is starting up"))) is not None
    lost = sa.InterfaceError("SELECT 1", {}, psycopg.InterfaceError("the connection is closed"),
                             connection_invalidated=True)
    assert database_unavailable(lost) is not None
    assert database_unavailable(sa.OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "database is locked"))) == "database is locked"
    # faults stay faults (500)
    assert database_unavailable(sa.OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "no such table: events"))) is None
    assert database_unavailable(sa.IntegrityError("INSERT", {}, psycopg.IntegrityError("duplicate key"))) is None
    assert database_unavailable(ValueError("x")) is None
