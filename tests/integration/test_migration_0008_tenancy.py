"""Migration 0008_tenancy on SQLite and PostgreSQL: sessions made before tenancy are
backfilled to the default tenant with ownership links to every payload their events name
and their stored bytes; it goes down and up again (the one head: test_migration_0004_session_model)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.store.migrate import alembic_config
from tests.api.test_api import SESSION, assistant, result

PREVIOUS = "0007_layout_deferral"


def test_sessions_before_tenancy_are_backfilled(database_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
            assistant("a1", "c1"), result("r1", "c1", "old output\n")]})
        assert r.status_code == 200
    command.downgrade(alembic_config(database_url), PREVIOUS)  # as if made before tenancy
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        assert "tenant_id" not in {c["name"] for c in sa.inspect(conn).get_columns("sessions")}
        assert "payload_owners" not in sa.inspect(conn).get_table_names()
    with TestClient(create_app(settings)) as client:  # the lifespan upgrades to head: the backfill runs
        with engine.connect() as conn:
            tenant, stored = conn.execute(sa.text("SELECT tenant_id, stored_bytes FROM sessions WHERE id = :s"),
                                          {"s": sid}).one()
            links = conn.execute(sa.text("SELECT count(*) FROM payload_owners WHERE session_id = :s AND "
                                         "tenant_id = 'default'"), {"s": sid}).scalar_one()
            sizes = conn.execute(sa.text("SELECT sum(size) FROM payloads")).scalar_one()
        assert tenant == "default" and links == 2 and stored == sizes  # the message and the output
        handle = hashlib.sha256(b"old output\n").hexdigest()
        assert client.get(f"/v1/handles/{handle[:8]}").content == b"old output\n"
        assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
        assert [s["id"] for s in client.get("/v1/sessions").json()["sessions"]] == [sid]
    engine.dispose()
