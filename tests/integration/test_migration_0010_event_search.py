"""Migration 0010_event_search on SQLite and PostgreSQL: events stored before it are
backfilled into the search index (a tool output's redacted view, not its secret; a
message's content, reasoning and tool calls; a step; NUL characters) and found by
``GET .../search``; it goes down (table, FTS5 table and triggers gone) and up again (the one
head: test_migration_0004_session_model)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.store.migrate import alembic_config
from tests.api.test_api import SESSION, assistant, result
from tests.secret_corpus import GH_CLASSIC

PREVIOUS = "0009_progress_record"


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_events_before_the_index_are_backfilled_and_found(database_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
            assistant("a1", "c1", content="check old_function_name"),
            result("r1", "c1", f"x\nkey={GH_CLASSIC}\nold_function_name()\nbin\x00old_function_name\n"),
            {"event_id": "s1", "kind": "step", "text": "then old_function_name again"}]})
        assert r.status_code == 200, r.text
        before = client.get(f"/v1/sessions/{sid}/search", params={"q": "old_function_name"}).json()
    command.downgrade(alembic_config(database_url), PREVIOUS)  # as if stored before the index
    assert "event_texts" not in _tables(database_url) and "event_texts_fts" not in _tables(database_url)
    with TestClient(create_app(settings)) as client:  # the lifespan upgrades to head: the backfill runs
        after = client.get(f"/v1/sessions/{sid}/search", params={"q": "old_function_name"}).json()
        assert after["hits"] == before["hits"]
        assert [(h["seq"], sorted(m["field"] for m in h["matches"])) for h in after["hits"]] == [
            (3, ["text"]), (2, ["payload", "payload"]), (1, ["content"])]
        assert [m["lines"] for m in after["hits"][1]["matches"]] == ["3:3", "4:4"]
        assert client.get(f"/v1/sessions/{sid}/search", params={"q": GH_CLASSIC}).json()["hits"] == []
        # new events are indexed beside the backfilled ones
        client.post(f"/v1/sessions/{sid}/events", json={"events": [
            {"event_id": "s2", "kind": "step", "text": "old_function_name once more"}]})
        assert client.get(f"/v1/sessions/{sid}/search",
                          params={"q": "old_function_name"}).json()["hits"][0]["seq"] == 4
