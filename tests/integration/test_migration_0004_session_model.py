"""Migration 0004_session_model (sessions.model) on SQLite and PostgreSQL: a session created before it
keeps working (its bodies name the profile's model), a session created after stores its
own, and the migration goes down and up again."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.store.migrate import alembic_config

#: The revision before sessions.model.
PREVIOUS = "0003_ingest"

#: A session as the early revisions stored it (the columns of 0002; later ones have defaults).
OLD_ID = "0123456789abcdef0123456789abcdef"
OLD_SESSION = sa.text(
    "INSERT INTO sessions (id, profile, contract, system, tools, metadata, last_seq, cut_seq, created_at) "
    "VALUES (:id, 'qwen3', '{\"goal\": \"g\", \"constraints\": []}', 's', '[]', '{}', :last_seq, 0, "
    "CURRENT_TIMESTAMP)")


def seed_old_session(url: str, revision: str, *, last_seq: int = 0) -> None:
    """Upgrade the database at ``url`` to ``revision`` and store the session ``OLD_ID`` as it
    stood then (``last_seq``: the seq of the events a test adds later)."""
    command.upgrade(alembic_config(url), revision)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(OLD_SESSION, {"id": OLD_ID, "last_seq": last_seq})
    finally:
        engine.dispose()


def _columns(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return {c["name"] for c in sa.inspect(engine).get_columns("sessions")}
    finally:
        engine.dispose()


def test_sessions_model_migrates_up_and_down(database_url: str, tmp_path: Path) -> None:
    config = alembic_config(database_url)
    seed_old_session(database_url, PREVIOUS)
    assert "model" not in _columns(database_url)

    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    with TestClient(create_app(settings)) as client:  # the lifespan upgrades to head
        assert "model" in _columns(database_url)
        old = OLD_ID
        assert client.get(f"/v1/sessions/{old}").json()["model"] == "Qwen/Qwen3-8B"
        assert client.get(f"/v1/sessions/{old}/request").json()["request"]["model"] == "Qwen/Qwen3-8B"
        r = client.post("/v1/sessions", json={"contract": {"goal": "g"}, "model": "qwen3-8b-awq"})
        assert r.status_code == 201, r.text
        assert client.get(f"/v1/sessions/{r.json()['id']}/request").json()["request"]["model"] == "qwen3-8b-awq"

    command.downgrade(config, PREVIOUS)
    assert "model" not in _columns(database_url)
    command.upgrade(config, "head")
    assert "model" in _columns(database_url)


def test_the_migrations_have_one_head_and_one_line() -> None:
    """Branches merged with their own migrations keep one line of revisions (the renumbering of
    0003_session_model to 0004 after 0003_ingest, and of the request path's 0003 / 0004 to
    0005_layout_states / 0006_manifest_deltas after it, then 0007_layout_deferral,
    0008_tenancy, 0009_progress_record and 0010_event_search, 0011_message_positions, 0012_session_parent,
    0013_artifact_content_hash, 0014_ui_session_ends, 0015_session_title): one head, one
    base, every revision reached."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert scripts.get_heads() == ["0015_session_title"]
    assert scripts.get_bases() == ["0001"]
    line = [s.revision for s in scripts.walk_revisions()]
    assert line == ["0015_session_title", "0014_ui_session_ends", "0013_artifact_content_hash", "0012_session_parent", "0011_message_positions", "0010_event_search", "0009_progress_record", "0008_tenancy", "0007_layout_deferral", "0006_manifest_deltas", "0005_layout_states", "0004_session_model", "0003_ingest", "0002", "0001"]
