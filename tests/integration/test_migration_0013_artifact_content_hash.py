"""Migration 0013_artifact_content_hash (issue 11, "Also") on SQLite and PostgreSQL: the hash
known for each artifact's current revision is backfilled from the stored events with the
ingest's rules (the write that made the revision, else the first whole read at it; a
range's hash never), the sessions keep working, and the migration goes down and up again."""

from __future__ import annotations

import json
from pathlib import Path

from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.main import create_app
from app.settings import Settings
from app.store.migrate import alembic_config
from tests.integration.test_migration_0004_session_model import OLD_ID, seed_old_session

PREVIOUS = "0012_session_parent"
SID = OLD_ID


def _read(artifact: str, revision: int, content_hash: str, rng: str | None = None) -> dict:
    return {"call_id": "c", "handle": "00" * 32, "exit_code": 0,
            "binding": {"artifact": artifact, "kind": "file", "revision": revision, "range": rng,
                        "content_hash": content_hash}}


EVENTS = [
    ("tool_result", _read("a.py", 0, "h-a0")),  # a.py read, then written with a hash: the write's counts
    ("artifact_write", {"artifact": "a.py", "revision": 1, "content_hash": "h-a1"}),
    ("tool_result", _read("b.py", 0, "h-b0")),  # never written: a row at revision 0 holds its hash
    ("artifact_write", {"artifact": "c.py", "revision": 1}),  # unknown text, then a range, then a whole read
    ("tool_result", _read("c.py", 1, "h-range", "1:2")),
    ("tool_result", _read("c.py", 1, "h-c1")),
    ("artifact_write", {"artifact": "d.py", "revision": 1}),  # unknown text, never read: no hash
]


def _seed(url: str) -> None:
    """The session as revision 0002 stored it (a later revision's rows need the later
    columns' defaults: the migrations give them), then the events and artifacts at 0012."""
    seed_old_session(url, "0002", last_seq=len(EVENTS))
    command.upgrade(alembic_config(url), PREVIOUS)
    engine = create_engine(url)
    with engine.begin() as conn:
        for seq, (kind, body) in enumerate(EVENTS, start=1):
            conn.execute(text("INSERT INTO events (session_id, seq, event_id, kind, body, body_sha256, created_at) "
                              "VALUES (:sid, :seq, :eid, :kind, :body, 'x', CURRENT_TIMESTAMP)"),
                         {"sid": SID, "seq": seq, "eid": f"e{seq}", "kind": kind, "body": json.dumps(body)})
        for artifact in ("a.py", "c.py", "d.py"):
            conn.execute(text("INSERT INTO artifacts (session_id, artifact, revision) VALUES (:sid, :a, 1)"),
                         {"sid": SID, "a": artifact})
    engine.dispose()


def _artifacts(url: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT artifact, revision, content_hash FROM artifacts ORDER BY artifact"))]
    finally:
        engine.dispose()


def test_content_hash_backfilled_up_down_up(database_url: str, tmp_path: Path) -> None:
    config = alembic_config(database_url)
    _seed(database_url)
    command.upgrade(config, "head")
    backfilled = [("a.py", 1, "h-a1"), ("b.py", 0, "h-b0"), ("c.py", 1, "h-c1"), ("d.py", 1, None)]
    assert _artifacts(database_url) == backfilled
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    with TestClient(create_app(settings)) as client:
        assert client.get(f"/v1/sessions/{SID}").json()["artifacts"] == {"a.py": 1, "c.py": 1, "d.py": 1}
        check = client.post(f"/v1/sessions/{SID}/preconditions", json={"artifact": "c.py", "content_hash": "h-c1"})
        assert check.status_code == 200 and check.json()["revision"] == 1
    command.downgrade(config, PREVIOUS)
    assert _rows_without_hash(database_url) == [("a.py", 1), ("c.py", 1), ("d.py", 1)]
    command.upgrade(config, "head")
    assert _artifacts(database_url) == backfilled


def _rows_without_hash(url: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text("SELECT artifact, revision FROM artifacts ORDER BY artifact"))]
    finally:
        engine.dispose()
