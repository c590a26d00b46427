"""Issue 12, items 1-3 and 7 on SQLite and PostgreSQL: API keys, tenant scope (another
tenant's session, manifest or handle is a 404 exactly like an absent one), scoped handles
and prefix lookups, session listing and deletion, audit log lines.

Peer faults turned into tests here (their kinds):
* solana-foundation/solana-developer-platform#899 and backenly/backenly#54 (a key of one
  project read and changed another project's objects by id; fixed as 404s that confirm no
  id): every session route and both handle routes are tried with another tenant's ids, and
  must answer exactly as for an absent id and change nothing.
* BerriAI/litellm#18731 (the presented key echoed in an auth error) and BerriAI/litellm#31620
  (raw keys in the audit log): 401 bodies and audit lines never hold a key's secret.
* the issue's own report: an 8-character prefix of another session's handle returned its payload.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.main import create_app
from app.services import tenancy
from app.settings import Settings
from app.store.db import unit_of_work
from tests.api.test_api import SESSION, assert_problem, assistant, result

ABSENT = "0" * 32


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def app_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app with API keys required, on SQLite and on PostgreSQL."""
    data_dir: Path = tmp_path_factory.mktemp("ctxd-tenancy")
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    settings = Settings(data_dir=data_dir, database_url=url, auth="required")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def make_key(client: TestClient, tenant: str) -> str:
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        return tenancy.create_key(db, tenant)[1]


_n = itertools.count()


@pytest.fixture()
def two(app_client: TestClient) -> tuple[dict[str, str], dict[str, str]]:
    """Authorization headers of two fresh tenants."""
    n = next(_n)
    return ({"Authorization": f"Bearer {make_key(app_client, f'a{n}')}"},
            {"Authorization": f"Bearer {make_key(app_client, f'b{n}')}"})


def session_with_output(client: TestClient, headers: dict[str, str], payload: str) -> tuple[str, str]:
    sid = client.post("/v1/sessions", json=SESSION, headers=headers).json()["id"]
    r = client.post(f"/v1/sessions/{sid}/events", headers=headers, json={"events": [
        {"event_id": "u1", "kind": "message", "role": "user", "content": "Look at the repo."},
        assistant("a1", "c1"), result("r1", "c1", payload)]})
    assert r.status_code == 200, r.text
    return sid, hashlib.sha256(payload.encode()).hexdigest()


def _same_problem(r: Any, absent: Any, *, absent_id: str, real_id: str) -> None:
    """``r`` (another tenant's thing) answers exactly as ``absent`` (a thing that does not
    exist), ids aside."""
    assert r.status_code == absent.status_code == 404
    assert r.headers["content-type"] == absent.headers["content-type"] == "application/problem+json"
    mine = {k: v for k, v in r.json().items() if k != "request_id"}
    other = {k: v for k, v in absent.json().items() if k != "request_id"}
    assert mine == json_replace(other, absent_id, real_id)


def json_replace(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: json_replace(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [json_replace(v, old, new) for v in value]
    return value


# --- keys -------------------------------------------------------------------------------

@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer nope", "Basic dXNlcjpwdw==",
                                           "Bearer ctxd_000000000000_" + "0" * 64])
def test_missing_or_bad_key_is_401_problem(app_client: TestClient, authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    r = app_client.post("/v1/sessions", json=SESSION, headers=headers)
    body = assert_problem(r, 401)
    assert r.headers["www-authenticate"].startswith("Bearer")
    presented = (authorization or "").partition(" ")[2]
    assert not presented or presented not in r.text  # never echoes what was presented (litellm#18731)
    assert body["detail"]


def test_unauthenticated_body_is_never_parsed(app_client: TestClient) -> None:
    """No key: 401 before the body is read (a malformed body is not a 400/422)."""
    r = app_client.post("/v1/sessions", content=b"{not json", headers={"content-type": "application/json"})
    assert_problem(r, 401)
    assert_problem(app_client.get(f"/v1/sessions/{ABSENT}/nowhere"), 401)  # no route existence leak either


def test_key_works_then_revoked_is_401(app_client: TestClient) -> None:
    key = make_key(app_client, "revocable")
    headers = {"Authorization": f"Bearer {key}"}
    assert app_client.post("/v1/sessions", json=SESSION, headers=headers).status_code == 201
    with unit_of_work(app_client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        assert tenancy.revoke_key(db, key) is True
        assert tenancy.revoke_key(db, key) is False
    assert_problem(app_client.post("/v1/sessions", json=SESSION, headers=headers), 401)
    wrong_secret = key[:-1] + ("0" if key[-1] != "0" else "1")
    assert_problem(app_client.get("/v1/sessions", headers={"Authorization": f"Bearer {wrong_secret}"}), 401)


def test_keys_are_stored_as_sha256_only(app_client: TestClient) -> None:
    key = make_key(app_client, "hashed")
    key_id, secret = key.split("_")[1], key.split("_")[2]
    assert len(secret) == 64  # 256 bits
    engine = app_client.app.state.ctxd.engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT digest FROM api_keys WHERE id = :id"), {"id": key_id}).one()
        dump = " ".join(str(v) for r in conn.execute(sa.text("SELECT * FROM api_keys")) for v in r)
    assert row[0] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in dump


# --- cross-tenant 404s ------------------------------------------------------------------

def test_another_tenants_session_is_404_like_an_absent_one(app_client: TestClient, two: Any) -> None:
    a, b = two
    sid, handle = session_with_output(app_client, a, "secret sauce\n")
    assert app_client.get(f"/v1/sessions/{sid}/request", headers=a).status_code == 200
    manifest_id = app_client.get(f"/v1/sessions/{sid}/manifests", headers=a).json()["manifests"][0]["id"]
    probes = [("GET", "", None), ("GET", "/request", None), ("GET", "/manifests", None),
              ("GET", f"/manifests/{manifest_id}", None), ("DELETE", "", None), ("PATCH", "", {"title": "b's"}),
              ("POST", "/events", {"events": [{"event_id": "x", "kind": "step", "text": "next"}]}),
              ("POST", "/preconditions", {"artifact": "a.py", "revision": 0}),
              ("GET", f"/handles/{handle}", None), ("GET", f"/handles/{handle[:8]}", None)]
    for method, tail, body in probes:
        theirs = app_client.request(method, f"/v1/sessions/{sid}{tail}", json=body, headers=b)
        absent = app_client.request(method, f"/v1/sessions/{ABSENT}{tail}", json=body, headers=b)
        _same_problem(theirs, absent, absent_id=ABSENT, real_id=sid)
    # nothing changed for the owner: no event stored by B's POST, the session not deleted
    assert app_client.get(f"/v1/sessions/{sid}", headers=a).json()["events"] == 3
    assert app_client.get(f"/v1/sessions/{sid}", headers=a).json()["title"] is None  # B's PATCH changed nothing
    assert sid not in [s["id"] for s in app_client.get("/v1/sessions", headers=b).json()["sessions"]]


def test_handles_are_scoped_to_the_tenant_and_session(app_client: TestClient, two: Any) -> None:
    a, b = two
    sid, handle = session_with_output(app_client, a, "only for a\n")
    other_sid, _ = session_with_output(app_client, a, "another session of a\n")
    b_sid, _ = session_with_output(app_client, b, "b's own\n")
    assert app_client.get(f"/v1/handles/{handle}", headers=a).content == b"only for a\n"
    assert app_client.get(f"/v1/handles/{handle[:8]}", headers=a).content == b"only for a\n"
    assert app_client.get(f"/v1/sessions/{sid}/handles/{handle[:8]}", headers=a).content == b"only for a\n"
    # the tenant's other session did not post it: 404 through that session
    assert_problem(app_client.get(f"/v1/sessions/{other_sid}/handles/{handle}", headers=a), 404)
    # another tenant: 404 by full handle, by prefix, through its own session, like an absent handle
    absent_handle = "f" * 64
    for path in ("/v1/handles/{h}", f"/v1/sessions/{b_sid}/handles/{{h}}"):
        theirs = app_client.get(path.format(h=handle), headers=b)
        absent = app_client.get(path.format(h=absent_handle), headers=b)
        _same_problem(theirs, absent, absent_id=absent_handle, real_id=handle)
        theirs = app_client.get(path.format(h=handle[:8]), headers=b)
        absent = app_client.get(path.format(h=absent_handle[:8]), headers=b)
        _same_problem(theirs, absent, absent_id=absent_handle[:8], real_id=handle[:8])


def _colliding_payloads() -> tuple[str, str]:
    """Two payloads whose handles share their first 8 hex characters (a birthday search)."""
    seen: dict[str, str] = {}
    for i in itertools.count():
        text = f"payload {i}\n"
        prefix = hashlib.sha256(text.encode()).hexdigest()[:8]
        if prefix in seen:
            return seen[prefix], text
        seen[prefix] = text
    raise AssertionError  # pragma: no cover


COLLIDING = _colliding_payloads()


def test_prefix_lookups_resolve_only_within_the_callers_scope(app_client: TestClient, two: Any) -> None:
    """Before: a prefix was looked up among every payload (another tenant's resolved, and a
    prefix shared with another tenant's payload was "ambiguous": its existence leaked).
    After: each tenant's 8-character prefix resolves to its own payload."""
    a, b = two
    x, y = COLLIDING
    _a_sid, hx = session_with_output(app_client, a, x)
    b_sid, hy = session_with_output(app_client, b, y)
    assert hx[:8] == hy[:8] and hx != hy
    assert app_client.get(f"/v1/handles/{hx[:8]}", headers=a).content == x.encode()
    assert app_client.get(f"/v1/handles/{hy[:8]}", headers=b).content == y.encode()
    assert app_client.get(f"/v1/sessions/{b_sid}/handles/{hx[:8]}", headers=b).content == y.encode()


def test_same_content_in_two_tenants_is_stored_once_and_readable_by_both(app_client: TestClient, two: Any) -> None:
    a, b = two
    a_sid, handle = session_with_output(app_client, a, "shared bytes\n")
    b_sid, handle_b = session_with_output(app_client, b, "shared bytes\n")
    assert handle == handle_b
    engine = app_client.app.state.ctxd.engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM payloads WHERE sha256 = :h"), {"h": handle}).scalar() == 1
    for headers in (a, b):
        assert app_client.get(f"/v1/handles/{handle}", headers=headers).content == b"shared bytes\n"
    # B deletes its session: the payload stays (A references it), A still reads it, B does not
    assert app_client.delete(f"/v1/sessions/{b_sid}", headers=b).json()["payloads_kept"] >= 1
    assert app_client.get(f"/v1/handles/{handle}", headers=a).content == b"shared bytes\n"
    assert_problem(app_client.get(f"/v1/handles/{handle}", headers=b), 404)
    # A deletes its session: the payload is gone from storage
    out = app_client.delete(f"/v1/sessions/{a_sid}", headers=a).json()
    assert out["payloads_deleted"] >= 1
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM payloads WHERE sha256 = :h"), {"h": handle}).scalar() == 0


def test_same_events_give_the_same_tokens_in_any_tenant(app_client: TestClient, two: Any) -> None:
    """Elision notes and handles name content, not sessions: identical events in sessions of
    two tenants give identical token ids."""
    a, b = two
    ids = []
    for headers in (a, b):
        sid, _ = session_with_output(app_client, headers, "x\n" * 50)
        ids.append(app_client.get(f"/v1/sessions/{sid}/request", params={"format": "tokens"},
                                  headers=headers).json()["request"]["prompt"])
    assert ids[0] == ids[1] and len(ids[0]) > 50


# --- lifecycle ----------------------------------------------------------------------------

def test_list_sessions_keyset_pages_only_the_tenants_own(app_client: TestClient, two: Any) -> None:
    a, b = two
    mine = [app_client.post("/v1/sessions", json=SESSION, headers=a).json()["id"] for _ in range(5)]
    theirs = [app_client.post("/v1/sessions", json=SESSION, headers=b).json()["id"] for _ in range(2)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        r = app_client.get("/v1/sessions", params=params, headers=a)
        assert r.status_code == 200, r.text
        seen += [s["id"] for s in r.json()["sessions"]]
        pages += 1
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == list(reversed(mine)) and not set(theirs) & set(seen)
    assert_problem(app_client.get("/v1/sessions", params={"cursor": "garbage!"}, headers=a), 422)


def test_delete_removes_everything_of_the_session(app_client: TestClient, two: Any) -> None:
    a, _ = two
    sid, handle = session_with_output(app_client, a, "to be deleted\n")
    app_client.post(f"/v1/sessions/{sid}/events", headers=a,
                    json={"events": [{"event_id": "w", "kind": "artifact_write", "artifact": "a.py"}]})
    for fmt in ("openai", "anthropic", "tokens"):
        assert app_client.get(f"/v1/sessions/{sid}/request", params={"format": fmt}, headers=a).status_code == 200
    r = app_client.delete(f"/v1/sessions/{sid}", headers=a)
    assert r.status_code == 200 and r.json()["id"] == sid
    engine = app_client.app.state.ctxd.engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        tables = [t for t in sa.inspect(conn).get_table_names() if t not in ("alembic_version",)]
        for table in tables:
            if "session_id" in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
                n = conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE session_id = :s"), {"s": sid}).scalar()
                assert n == 0, f"{table} keeps {n} row(s) of the deleted session"
        assert conn.execute(sa.text("SELECT count(*) FROM sessions WHERE id = :s"), {"s": sid}).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM payloads WHERE sha256 = :h"), {"h": handle}).scalar() == 0
    assert_problem(app_client.get(f"/v1/sessions/{sid}", headers=a), 404)
    assert_problem(app_client.get(f"/v1/handles/{handle}", headers=a), 404)
    assert_problem(app_client.delete(f"/v1/sessions/{sid}", headers=a), 404)
    assert sid not in app_client.app.state.ctxd.memo._sessions  # type: ignore[attr-defined]


def test_profiles_are_listed(app_client: TestClient, two: Any) -> None:
    a, _ = two
    body = app_client.get("/v1/profiles", headers=a).json()
    qwen3 = next(p for p in body["profiles"] if p["name"] == "qwen3")
    assert body["default"] == "qwen3" and {"qwen3", "mistral-tekken"} <= {p["name"] for p in body["profiles"]}
    assert qwen3["input_limit"] == qwen3["window"] - qwen3["output_reserve"] - qwen3["headroom"]


# --- audit --------------------------------------------------------------------------------

def test_handle_reads_and_key_use_are_audited(app_client: TestClient, two: Any, caplog: pytest.LogCaptureFixture) -> None:
    a, _ = two
    sid, handle = session_with_output(app_client, a, "audited\n")
    caplog.set_level(logging.INFO, logger="ctxd.audit")
    r = app_client.get(f"/v1/sessions/{sid}/handles/{handle}", headers=a | {"X-Request-ID": "audit-req-1"})
    assert r.status_code == 200
    lines = [(rec.getMessage(), getattr(rec, "request_id", None)) for rec in caplog.records if rec.name == "ctxd.audit"]
    key_id = a["Authorization"].split("_")[1]
    assert any("key used" in m and f"key_id={key_id}" in m and f"session={sid}" in m and rid == "audit-req-1"
               for m, rid in lines), lines
    assert any("handle read" in m and f"session={sid}" in m and f"handle={handle}" in m and "tenant=" in m
               and rid == "audit-req-1" for m, rid in lines), lines
    assert not any(a["Authorization"].split("_")[2] in m for m, _ in lines), "a key's secret was logged"


def test_derived_elision_index_is_readable_only_by_its_tenant(app_client: TestClient, two: Any) -> None:
    """A payload ctxd derived for a request (the elision index of evicted turns) is linked
    to the session: its tenant reads it by the handle the trunk names, another tenant gets 404."""
    a, b = two
    sid = app_client.post("/v1/sessions", json=SESSION, headers=a).json()["id"]
    events = []
    for i in range(60):
        events += [assistant(f"a{i}", f"c{i}"), result(f"r{i}", f"c{i}", f"line {i} " * 300)]
    assert app_client.post(f"/v1/sessions/{sid}/events", json={"events": events}, headers=a).status_code == 200
    body = app_client.get(f"/v1/sessions/{sid}/request", headers=a).json()
    (index,) = body["manifest"]["layout"]["elision_index"]
    assert index[:12] in body["request"]["messages"][1]["content"]
    assert app_client.get(f"/v1/sessions/{sid}/handles/{index[:12]}", headers=a).status_code == 200
    assert app_client.get(f"/v1/handles/{index}", headers=a).status_code == 200
    assert_problem(app_client.get(f"/v1/handles/{index}", headers=b), 404)
    # a second GET (index stored before) keeps it readable; deleting the session removes it
    assert app_client.get(f"/v1/sessions/{sid}/request", headers=a).status_code == 200
    assert app_client.delete(f"/v1/sessions/{sid}", headers=a).status_code == 200
    assert_problem(app_client.get(f"/v1/handles/{index}", headers=a), 404)
