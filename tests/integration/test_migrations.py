"""Alembic migrations on real SQLite and PostgreSQL: up from an older revision with data
in it, down, and up again, keeping every row (migration 0005_layout_states: layout states; 0006_manifest_deltas:
manifests as deltas, small prefix records; a manifest stored before reads back exactly)."""

from __future__ import annotations

import json

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.orm import Session

from app.store import repository as repo
from app.store.migrate import alembic_config, upgrade_head


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
        conn.execute(text("INSERT INTO manifests (session_id, format, last_seq, request_sha256, tokens_total, manifest, "
                          "created_at) VALUES ('s1', 'openai', 2, 'ab', 30, :m, CURRENT_TIMESTAMP)"),
                     {"m": json.dumps(OLD_MANIFEST)})
        conn.execute(text("INSERT INTO prefix_states (session_id, format, state, layout, updated_at) VALUES "
                          "('s1', 'openai', '{\"v\": 2}', '{}', CURRENT_TIMESTAMP)"))
    engine.dispose()


# a manifest as revision 0002's code stored it (no layout version, no ranges)
OLD_MANIFEST = {
    "session_id": "s1", "profile": "qwen3", "format": "openai", "last_seq": 2, "request_sha256": "ab",
    "tokens": {"total": 30, "by_zone": {"root": 10, "trunk": 10, "leaf": 10},
               "by_role": {"system": 5, "tools": 5, "task_state": 10, "observations": 10}},
    "budget": {"window": 32768, "output_reserve": 4096, "headroom": 512, "input_limit": 28160, "low_watermark": 20000,
               "role_limits": {"system": 4224}},
    "cache": {"model": "vllm_blocks", "block_size": 16, "predicted_cached_tokens": 16, "uncached_tokens": 14,
              "previous_tokens": 20, "common_prefix_tokens": 19, "common_prefix_exact": True, "extends_previous": False,
              "first_divergence": {"zone": "leaf", "seq": 2, "token_offset": 19, "reason": "leaf order changed"}},
    "layout": {"root": "messages[0] + tools", "trunk": "messages[1]", "leaf": "messages[2:]", "cut_seq": 0,
               "evicted_now": 0, "elision_index": []},
    "items": [{"seq": 1, "event_id": "e1", "kind": "step", "zone": None, "representation": "superseded",
               "why": "a later step (seq 2) replaced it"},
              {"seq": 2, "event_id": "e2", "kind": "step", "zone": "leaf", "representation": "verbatim",
               "why": "the next bounded step, last in the leaf"}],
    "elided": [], "elided_tokens": 0, "layout_warnings": [],
}


def _rows(url: str, query: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]
    finally:
        engine.dispose()


def test_layout_states_are_backfilled_from_cut_seq_and_back(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0002")
    _seed_at_0002(database_url)

    upgrade_head(database_url)
    assert _rows(database_url, "SELECT session_id, version, cut_seq FROM layout_states ORDER BY session_id") == [
        ("s1", 0, 7), ("s2", 0, 0)]
    assert _rows(database_url, "SELECT count(*) FROM prefix_states") == [(0,)], "old prefix records dropped"
    engine = create_engine(database_url)
    with Session(engine) as db:
        (manifest_id,) = _rows(database_url, "SELECT id FROM manifests")[0]
        stored = repo.get_manifest(db, "s1", manifest_id)
        assert stored is not None and stored.to_json() == OLD_MANIFEST | {"id": manifest_id}, "read back exactly"
    engine.dispose()
    assert _rows(database_url, "SELECT count(*) FROM events") == [(4,)], "recreating sessions kept every event"
    engine = create_engine(database_url)
    assert "cut_seq" not in {c["name"] for c in inspect(engine).get_columns("sessions")}
    engine.dispose()

    command.downgrade(config, "0002")
    assert _rows(database_url, "SELECT id, cut_seq FROM sessions ORDER BY id") == [("s1", 7), ("s2", 0)]
    assert _rows(database_url, "SELECT count(*) FROM events") == [(4,)]

    upgrade_head(database_url)
    assert _rows(database_url, "SELECT session_id, cut_seq FROM layout_states ORDER BY session_id") == [("s1", 7), ("s2", 0)]


def test_layout_deferral_columns_up_down_up(database_url: str) -> None:
    """Migration 0007_layout_deferral: layout states stored at 0006 read back with nothing
    deferred and nothing shown; a deferral written by compare-and-set survives reading;
    down drops the columns keeping the rows, up restores them empty."""
    from app.domain.state import LayoutState

    config = alembic_config(database_url)
    command.upgrade(config, "0002")
    _seed_at_0002(database_url)
    command.upgrade(config, "0006_manifest_deltas")
    upgrade_head(database_url)
    engine = create_engine(database_url)
    try:
        with Session(engine) as db:
            found = repo.load_session_state(db, "s1")
            assert found is not None
            loaded = found[0].layout
            assert loaded == LayoutState(version=0, cut_seq=7, deferred=(), shown_upto=0)
            moved = loaded.advanced(deferred=(12, 9), shown_upto=5)
            assert moved == LayoutState(version=1, cut_seq=7, deferred=(9, 12), shown_upto=5)
            assert repo.compare_and_set_layout(db, "s1", loaded, moved)
            assert not repo.compare_and_set_layout(db, "s1", loaded, moved), "version 0 is gone"
            db.commit()
        with Session(engine) as db:
            found = repo.load_session_state(db, "s1")
            assert found is not None and found[0].layout == moved
    finally:
        engine.dispose()
    command.downgrade(config, "0006_manifest_deltas")
    engine = create_engine(database_url)
    assert {"deferred", "shown_upto"}.isdisjoint(c["name"] for c in inspect(engine).get_columns("layout_states"))
    engine.dispose()
    assert _rows(database_url, "SELECT session_id, version, cut_seq FROM layout_states ORDER BY session_id") == [
        ("s1", 1, 7), ("s2", 0, 0)]
    upgrade_head(database_url)
    assert _rows(database_url, "SELECT session_id, shown_upto FROM layout_states ORDER BY session_id") == [
        ("s1", 0), ("s2", 0)]


def test_session_parent_up_down_up(database_url: str) -> None:
    """Migration 0012_session_parent (issue 16): sessions stored at 0011 read back with no
    parent; a child's link to its parent is stored and enforced (a parent that does not
    exist is refused by the foreign key); down drops the column keeping the sessions, up
    restores it empty."""
    config = alembic_config(database_url)
    command.upgrade(config, "0002")
    _seed_at_0002(database_url)
    command.upgrade(config, "0011_message_positions")
    upgrade_head(database_url)
    assert _rows(database_url, "SELECT id, parent_id FROM sessions ORDER BY id") == [("s1", None), ("s2", None)]
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE sessions SET parent_id = 's1' WHERE id = 's2'"))
        with Session(engine) as db:
            assert repo.child_ids(db, "s1") == ["s2"] and repo.child_ids(db, "s2") == []
        if engine.dialect.name == "postgresql":  # SQLite enforces foreign keys only with PRAGMA foreign_keys
            with pytest.raises(Exception, match="fk_sessions_parent_id"), engine.begin() as conn:
                conn.execute(text("UPDATE sessions SET parent_id = 'nope' WHERE id = 's1'"))
    finally:
        engine.dispose()
    command.downgrade(config, "0011_message_positions")
    engine = create_engine(database_url)
    assert "parent_id" not in {c["name"] for c in inspect(engine).get_columns("sessions")}
    engine.dispose()
    assert _rows(database_url, "SELECT id FROM sessions ORDER BY id") == [("s1",), ("s2",)]
    upgrade_head(database_url)
    assert _rows(database_url, "SELECT id, parent_id FROM sessions ORDER BY id") == [("s1", None), ("s2", None)]


def test_ui_session_ends_up_down_up(database_url: str) -> None:
    """Migration 0014_ui_session_ends (issue 15, logout on the server): the table of ended
    inspector sessions is created empty, keeps what is stored, and down drops it."""
    from datetime import UTC, datetime, timedelta

    from app.store import tenancy as store

    config = alembic_config(database_url)
    command.upgrade(config, "0013_artifact_content_hash")
    upgrade_head(database_url)
    engine = create_engine(database_url)
    try:
        assert "ui_session_ends" in inspect(engine).get_table_names()
        soon, gone = datetime.now(UTC) + timedelta(minutes=15), datetime.now(UTC) - timedelta(minutes=1)
        with Session(engine) as db, db.begin():
            store.end_ui_session(db, "old", gone)
        with Session(engine) as db, db.begin():
            store.end_ui_session(db, "n1", soon)  # deletes the expired one
            store.end_ui_session(db, "n1", soon)  # again: a no-op
        with Session(engine) as db:
            assert store.ui_session_ended(db, "n1") and not store.ui_session_ended(db, "old")
    finally:
        engine.dispose()
    command.downgrade(config, "0013_artifact_content_hash")
    engine = create_engine(database_url)
    try:
        assert "ui_session_ends" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    upgrade_head(database_url)


def test_session_title_up_down_up(database_url: str) -> None:
    """Migration 0015_session_title: sessions stored at 0014 read back untitled (GET's and the
    list's ``title`` null); a title is stored, read back and listed; down drops the column
    keeping the sessions and their events, up restores it empty."""
    from app.domain.tenancy import Principal
    from app.services import tenancy as tenancy_service

    config = alembic_config(database_url)
    command.upgrade(config, "0002")
    _seed_at_0002(database_url)
    command.upgrade(config, "0014_ui_session_ends")
    upgrade_head(database_url)
    assert _rows(database_url, "SELECT id, title FROM sessions ORDER BY id") == [("s1", None), ("s2", None)]
    engine = create_engine(database_url)
    try:
        with Session(engine) as db, db.begin():
            row = repo.get_session_row(db, "s1")
            assert row is not None and row.title is None
            row.title = "A title, é 🧪 " + "x" * 186  # 200 characters: the column's width
        with Session(engine) as db:
            listed = tenancy_service.list_sessions(db, Principal("default"), limit=10, cursor=None)["sessions"]
            assert {s["id"]: (s["title"], s["goal"]) for s in listed} == {
                "s1": ("A title, é 🧪 " + "x" * 186, "g"), "s2": (None, "g")}
    finally:
        engine.dispose()
    command.downgrade(config, "0014_ui_session_ends")
    engine = create_engine(database_url)
    try:
        assert "title" not in {c["name"] for c in inspect(engine).get_columns("sessions")}
    finally:
        engine.dispose()
    assert _rows(database_url, "SELECT id FROM sessions ORDER BY id") == [("s1",), ("s2",)]
    assert _rows(database_url, "SELECT count(*) FROM events") == [(4,)]
    upgrade_head(database_url)
    assert _rows(database_url, "SELECT id, title FROM sessions ORDER BY id") == [("s1", None), ("s2", None)]
