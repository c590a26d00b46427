"""Alembic migrations on real SQLite and PostgreSQL: up from an older revision with data
in it, down, and up again, keeping every row (migration 0003: layout states)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text

from app.store.migrate import alembic_config, upgrade_head


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        factory: Callable[[], str] = request.getfixturevalue("postgres_database_factory")
        return factory()
    return f"sqlite:///{tmp_path / 'migrate.sqlite3'}"


def _seed_at_0002(url: str) -> None:
    """Two sessions as revision 0002 stored them (one with a moved cut), with events."""
    engine = create_engine(url)
    with engine.begin() as conn:
        for sid, cut in (("s1", 7), ("s2", 0)):
            conn.execute(text("INSERT INTO sessions (id, profile, contract, system, tools, metadata, last_seq, cut_seq, "
                              "created_at) VALUES (:id, 'qwen3', '{\"goal\": \"g\"}', '', '[]', '{}', 2, :cut, "
                              "CURRENT_TIMESTAMP)"), {"id": sid, "cut": cut})
            for seq in (1, 2):
                conn.execute(text("INSERT INTO events (session_id, seq, event_id, kind, body, body_sha256, created_at) "
                                  "VALUES (:sid, :seq, :eid, 'step', '{\"text\": \"t\"}', 'x', CURRENT_TIMESTAMP)"),
                             {"sid": sid, "seq": seq, "eid": f"e{seq}"})
    engine.dispose()


def _rows(url: str, query: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]
    finally:
        engine.dispose()


def test_layout_states_are_backfilled_from_cut_seq_and_back(empty_url: str) -> None:
    config = alembic_config(empty_url)
    command.upgrade(config, "0002")
    _seed_at_0002(empty_url)

    upgrade_head(empty_url)
    assert _rows(empty_url, "SELECT session_id, version, cut_seq FROM layout_states ORDER BY session_id") == [
        ("s1", 0, 7), ("s2", 0, 0)]
    assert _rows(empty_url, "SELECT count(*) FROM events") == [(4,)], "recreating sessions kept every event"
    engine = create_engine(empty_url)
    assert "cut_seq" not in {c["name"] for c in inspect(engine).get_columns("sessions")}
    engine.dispose()

    command.downgrade(config, "0002")
    assert _rows(empty_url, "SELECT id, cut_seq FROM sessions ORDER BY id") == [("s1", 7), ("s2", 0)]
    assert _rows(empty_url, "SELECT count(*) FROM events") == [(4,)]

    upgrade_head(empty_url)
    assert _rows(empty_url, "SELECT session_id, cut_seq FROM layout_states ORDER BY session_id") == [("s1", 7), ("s2", 0)]
