"""The session list and a session's detail say the same thing (found by a fresh-user check):
the list gave ``model: null`` for a session without its own model while the detail gave
the profile's (and the inspector's sessions table showed an empty model column), and on
SQLite every ``created_at`` came without its UTC offset (stored in UTC; PostgreSQL's had
``+00:00``)."""

from __future__ import annotations

from datetime import datetime

from fastapi.testclient import TestClient

from tests.api.test_api import new_session


def test_list_and_detail_agree_on_model_and_created_at(client: TestClient) -> None:
    plain = new_session(client)  # the profile's model
    own = new_session(client, model="my-served-name")
    listed = {s["id"]: s for s in client.get("/v1/sessions", params={"limit": 500}).json()["sessions"]}
    for sid in (plain, own):
        detail = client.get(f"/v1/sessions/{sid}").json()
        assert listed[sid]["model"] == detail["model"] is not None
        assert listed[sid]["created_at"] == detail["created_at"]
        assert datetime.fromisoformat(detail["created_at"]).utcoffset().total_seconds() == 0
    assert listed[own]["model"] == "my-served-name"
    profile = client.get(f"/v1/sessions/{plain}").json()["profile"]
    models = {p["name"]: p["model"] for p in client.get("/v1/profiles").json()["profiles"]}
    assert listed[plain]["model"] == models[profile]
    page = client.get("/ui").text
    assert "my-served-name" in page and listed[plain]["model"] in page
