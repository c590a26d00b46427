"""Manifest retention (issue 12 item 3) on SQLite and PostgreSQL: manifests older than the
retention go, the newest of each session and format and every row a kept manifest is
rebuilt from stay, kept manifests read back whole, and the next request still works."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.tenancy import prune_manifests
from app.settings import Settings
from app.store.db import unit_of_work
from tests.api.test_api import SESSION


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    url = request.getfixturevalue("postgres_database_factory")() if request.param == "postgres" else ""
    return Settings(data_dir=tmp_path, database_url=url)


def _manifests(client: TestClient, sid: str, n: int, fmt: str = "openai") -> list[int]:
    ids = []
    for i in range(n):
        client.post(f"/v1/sessions/{sid}/events", json={"events": [
            {"event_id": f"{fmt}{i}", "kind": "message", "role": "user", "content": f"step {i} in {fmt}"}]})
        ids.append(client.get(f"/v1/sessions/{sid}/request", params={"format": fmt}).json()["manifest"]["id"])
    return ids


def test_retention_keeps_chains_and_the_newest(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        old = _manifests(client, sid, 20)  # a keyframe at 1 and 17 (every 16), deltas between
        recent = _manifests(client, sid, 3)
        other = client.post("/v1/sessions", json=SESSION).json()["id"]
        only_old = _manifests(client, other, 2, "anthropic")
        engine = client.app.state.ctxd.engine  # type: ignore[attr-defined]
        long_ago = datetime.now(UTC) - timedelta(days=40)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE manifests SET created_at = :t WHERE id IN :ids")
                         .bindparams(sa.bindparam("ids", expanding=True)), {"t": long_ago, "ids": old + only_old})
            chain = {r[0]: r[1] for r in conn.execute(sa.text("SELECT id, keyframe_id FROM manifests"))}
        with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
            assert prune_manifests(db, retention_days=0) == 0
            deleted = prune_manifests(db, retention_days=30)
        keep_from = min(chain[i] or i for i in recent)
        other_from = chain[only_old[-1]] or only_old[-1]  # the newest is a delta: its keyframe stays too
        expected_gone = [i for i in old if i < keep_from] + [i for i in only_old if i < other_from]
        assert deleted == len(expected_gone) == 16
        for i in expected_gone:
            assert client.get(f"/v1/sessions/{sid if i in old else other}/manifests/{i}").status_code == 404
        for i in [i for i in old if i >= keep_from] + recent:  # kept deltas still rebuild from their chain
            r = client.get(f"/v1/sessions/{sid}/manifests/{i}")
            assert r.status_code == 200 and r.json()["id"] == i
        for i in only_old:  # the newest stays, and its keyframe
            assert client.get(f"/v1/sessions/{other}/manifests/{i}").status_code == 200
        assert _manifests(client, other, 1, "anthropic")  # the next request deltas on it
        assert _manifests(client, sid, 1)
