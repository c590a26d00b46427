"""Session titles (migration 0015_session_title) on SQLite and PostgreSQL: ``title`` on
session create, ``PATCH /v1/sessions/{id}`` to change or clear it, shown by GET, the
sessions list (with the goal's first line) and the inspector's list page; bad titles are
422 problem+json naming the field; another tenant's or an absent session is the same 404."""

from __future__ import annotations

import html

import pytest
from fastapi.testclient import TestClient

from app.services import sessions as session_service
from app.services import tenancy
from app.store.db import unit_of_work
from tests.api.test_api import SESSION, assert_problem, new_session

ABSENT = "0" * 32


def _listed(client: TestClient, sid: str) -> dict:
    return next(s for s in client.get("/v1/sessions", params={"limit": 500}).json()["sessions"] if s["id"] == sid)


def test_title_on_create_is_shown_by_get_and_the_list(client: TestClient) -> None:
    sid = new_session(client, title="Parser: empty input 🧪")
    assert client.get(f"/v1/sessions/{sid}").json()["title"] == "Parser: empty input 🧪"
    entry = _listed(client, sid)
    assert entry["title"] == "Parser: empty input 🧪"
    assert entry["goal"] == "Make the parser accept empty input."
    untitled = new_session(client)
    assert client.get(f"/v1/sessions/{untitled}").json()["title"] is None
    assert _listed(client, untitled)["title"] is None


def test_the_list_shows_the_goals_first_line_cut_at_120(client: TestClient) -> None:
    contract = {"goal": "\n  Fix the tokenizer.  \nThen run the tests.\nAnd more.", "constraints": []}
    assert _listed(client, new_session(client, contract=contract))["goal"] == "Fix the tokenizer."
    long = "é" * 300
    goal = _listed(client, new_session(client, contract={"goal": long + "\nnext"}))["goal"]
    assert len(goal) == 120 and goal == "é" * 119 + "…"
    exactly = "x" * 120
    assert _listed(client, new_session(client, contract={"goal": exactly}))["goal"] == exactly


def test_patch_sets_changes_and_clears_the_title(client: TestClient) -> None:
    sid = new_session(client)
    before = client.get(f"/v1/sessions/{sid}").json()
    r = client.patch(f"/v1/sessions/{sid}", json={"title": "First name"})
    assert r.status_code == 200, r.text
    assert r.json() == before | {"title": "First name"}  # the session, as GET shows it
    assert client.get(f"/v1/sessions/{sid}").json()["title"] == "First name"
    assert client.patch(f"/v1/sessions/{sid}", json={"title": "t" * 200}).json()["title"] == "t" * 200
    assert _listed(client, sid)["title"] == "t" * 200
    cleared = client.patch(f"/v1/sessions/{sid}", json={"title": None})
    assert cleared.status_code == 200 and cleared.json()["title"] is None
    assert client.get(f"/v1/sessions/{sid}").json()["title"] is None


def test_a_title_changes_no_request(client: TestClient) -> None:
    """The title is a label: the request body and its counts are the same with or without it."""
    sid = new_session(client)
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
        {"event_id": "u1", "kind": "message", "role": "user", "content": "Look at the parser."}]})
    assert r.status_code == 200, r.text
    first = client.get(f"/v1/sessions/{sid}/request").json()
    assert client.patch(f"/v1/sessions/{sid}", json={"title": "Renamed"}).status_code == 200
    again = client.get(f"/v1/sessions/{sid}/request").json()
    assert again["request"] == first["request"] and again["manifest"]["tokens"] == first["manifest"]["tokens"]
    assert again["manifest"]["request_sha256"] == first["manifest"]["request_sha256"]


@pytest.mark.parametrize(("bad", "says"), [
    ("line one\nline two", "U+000A at character 8"),
    ("tab\there", "U+0009 at character 3"),
    ("nul\x00", "U+0000 at character 3"),
    ("del\x7f", "U+007F at character 3"),
    ("c1\x85", "U+0085 at character 2"),
    ("x" * 201, "at most 200 characters"),
    ("", "at least 1 character"),
    ("   ", "not only blanks"),  # found by a fresh-user trial: it was stored, and /ui showed an empty cell
    ("a\u2028b", "U+2028 at character 1"),  # a line separator: a title is one line
    ("abc\u202etxt.exe", "U+202E at character 3"),  # a right-to-left override reorders what a list shows
    (17, "valid string"),
    (["a"], "valid string"),
])
def test_bad_titles_are_422_naming_the_field(client: TestClient, bad: object, says: str) -> None:
    created = assert_problem(client.post("/v1/sessions", json=SESSION | {"title": bad}), 422)
    assert created["errors"][0]["loc"] == ["body", "title"], created
    assert created["detail"].startswith("body.title: ") and says in created["detail"], created
    sid = new_session(client, title="kept")
    patched = assert_problem(client.patch(f"/v1/sessions/{sid}", json={"title": bad}), 422)
    assert patched["errors"][0]["loc"] == ["body", "title"] and says in patched["detail"], patched
    assert client.get(f"/v1/sessions/{sid}").json()["title"] == "kept", "a refused PATCH changes nothing"


def test_patch_needs_a_title_and_nothing_else(client: TestClient) -> None:
    sid = new_session(client, title="kept")
    assert assert_problem(client.patch(f"/v1/sessions/{sid}", json={}), 422)["errors"][0]["loc"] == ["body", "title"]
    extra = assert_problem(client.patch(f"/v1/sessions/{sid}", json={"title": "x", "profile": "qwen3"}), 422)
    assert extra["errors"][0]["loc"] == ["body", "profile"]
    surrogate = client.patch(f"/v1/sessions/{sid}", content=b'{"title": "half \\ud83d"}',
                             headers={"content-type": "application/json"})
    assert assert_problem(surrogate, 422)["errors"][0]["loc"] == ["body", "title"]
    assert client.get(f"/v1/sessions/{sid}").json()["title"] == "kept"


def test_patch_of_an_absent_or_another_tenants_session_is_the_same_404(client: TestClient) -> None:
    """Another tenant's session answers word for word as one that does not exist, and keeps its title."""
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        tenancy.create_key(db, "title-owner")
        from app.store import tenancy as store

        owner = store.tenant_by_name(db, "title-owner")
        assert owner is not None
        theirs = session_service.create_session(
            db, client.app.state.ctxd.profiles, profile="qwen3", contract={"goal": "Theirs."},  # type: ignore[attr-defined]
            system="", tools=[], metadata={}, tenant_id=owner.id, title="their title")
    for sid in (theirs, ABSENT, "nope"):
        body = assert_problem(client.patch(f"/v1/sessions/{sid}", json={"title": "mine now"}), 404)
        assert body["detail"] == f"no session {sid!r}" and body["title"] == "Session not found", body
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        assert session_service.require_session_row(db, theirs).title == "their title"
    assert theirs not in [s["id"] for s in client.get("/v1/sessions", params={"limit": 500}).json()["sessions"]]


def test_the_inspector_list_shows_title_or_untitled_and_the_goal(client: TestClient) -> None:
    titled = new_session(client, title="<b>Bold</b> & title", contract={"goal": "First goal line.\nSecond line."})
    untitled = new_session(client, contract={"goal": "Another goal."})
    page = client.get("/ui")
    assert page.status_code == 200
    rows = {sid: page.text.split(f'href="/ui/sessions/{sid}"', 1)[1].split("</tr>", 1)[0] for sid in (titled, untitled)}
    assert html.escape("<b>Bold</b> & title", quote=False) in rows[titled] and "<b>Bold</b>" not in rows[titled]
    assert "First goal line." in rows[titled] and "Second line." not in rows[titled]
    assert "untitled" in rows[untitled] and "Another goal." in rows[untitled]
    assert "untitled" not in rows[titled]
