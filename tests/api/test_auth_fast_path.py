"""The authentication middleware's fixed cost (issue 9 item 8): a session's owner, once
found, is kept (``SessionOwners``), and with keys not required and the rate limiter in
process a request for a known session is admitted on the event loop, with no thread hop
and no read transaction. What must not change: a deleted session answers 404 exactly as an
absent one, on every session route, even in a worker whose owner entry is stale (another
worker deleted it); the rate limit still counts every request; with keys required the key
is checked every time (a revoked key stops working at once).

Peer reports behind it (their kinds): fastapi/fastapi#2696 and vectorize-io/hindsight#4235
(per-request middleware machinery, scheduling rather than compute, costing more than a cheap
endpoint, and worse on a contended event loop): ctxd's middlewares were already pure ASGI; the
thread hop and read transaction of the authentication middleware were its scheduling cost, now
skipped only where the answer cannot differ. ``limits``' ``memory://`` storage starts a
``threading.Timer`` thread on most hits (read in its source, limits 5.8): the in-process limiter
creates none.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api import auth
from app.main import create_app
from app.services.ratelimits import TenantRateLimiter
from app.settings import Settings
from tests.api.test_api import SESSION, assert_problem
from tests.api.test_tenancy import ABSENT, _same_problem, session_with_output


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """Two app instances (workers) on one SQLite database, keys not required."""
    settings = Settings(data_dir=tmp_path, auth="off")
    with TestClient(create_app(settings), raise_server_exceptions=False) as a, \
            TestClient(create_app(settings), raise_server_exceptions=False) as b:
        yield a, b


def _count_authorize(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = auth._authorize

    def counting(app: Any, scope: Any) -> Any:
        calls.append(str(scope.get("path")))
        return real(app, scope)

    monkeypatch.setattr(auth, "_authorize", counting)
    return calls


def test_known_session_is_admitted_without_the_database(pair: tuple[TestClient, TestClient],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = pair
    sid, _ = session_with_output(a, {}, "hello\n")
    calls = _count_authorize(monkeypatch)
    statements: list[str] = []
    from sqlalchemy import event

    engine = a.app.state.ctxd.engine  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(str(args[2])))
    assert a.get(f"/v1/sessions/{sid}").status_code == 200
    assert calls == [], "the owner was found by the POSTs before: no thread, no read"
    assert not any("api_keys" in s for s in statements)
    # an absent session is read every time (negative answers are not kept)
    assert_problem(a.get(f"/v1/sessions/{ABSENT}"), 404)
    assert_problem(a.get(f"/v1/sessions/{ABSENT}"), 404)
    assert calls == [f"/v1/sessions/{ABSENT}"] * 2


def test_session_deleted_by_another_worker_is_404_like_an_absent_one(pair: tuple[TestClient, TestClient]) -> None:
    """Worker A keeps the owner of a session worker B deletes: every session route on A
    still answers exactly as for an absent session, and changes nothing."""
    a, b = pair
    sid, handle = session_with_output(a, {}, "soon gone\n")
    assert a.get(f"/v1/sessions/{sid}/request").status_code == 200
    manifest_id = a.get(f"/v1/sessions/{sid}/manifests").json()["manifests"][0]["id"]
    assert auth.session_owners(a.app).known("default", sid)
    assert b.delete(f"/v1/sessions/{sid}").status_code == 200
    assert auth.session_owners(a.app).known("default", sid), "A's entry is stale: the case under test"
    probes = [("GET", "", None), ("GET", "/request", None), ("GET", "/record", None), ("GET", "/manifests", None),
              ("GET", f"/manifests/{manifest_id}", None), ("GET", "/events", None),
              ("GET", "/search?q=gone", None), ("DELETE", "", None),
              ("POST", "/events", {"events": [{"event_id": "x", "kind": "step", "text": "next"}]}),
              ("POST", "/messages", {"messages": [{"role": "user", "content": "hi"}]}),
              ("POST", "/children", {"goal": "a sub-task"}),
              ("POST", "/preconditions", {"artifact": "a.py", "revision": 0}),
              ("GET", f"/handles/{handle}", None)]
    for method, tail, body in probes:
        gone = a.request(method, f"/v1/sessions/{sid}{tail}", json=body)
        absent = a.request(method, f"/v1/sessions/{ABSENT}{tail}", json=body)
        assert gone.status_code == 404, (method, tail, gone.status_code, gone.text)
        _same_problem(gone, absent, absent_id=ABSENT, real_id=sid)
    engine = a.app.state.ctxd.engine  # type: ignore[attr-defined]
    import sqlalchemy as sa

    with engine.connect() as conn:
        for table in ("events", "sessions", "manifests"):
            column = "id" if table == "sessions" else "session_id"
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :s"), {"s": sid}).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM sessions WHERE parent_id = :s"), {"s": sid}).scalar() == 0


def test_delete_in_this_worker_forgets_the_owner(pair: tuple[TestClient, TestClient]) -> None:
    a, _ = pair
    sid, _ = session_with_output(a, {}, "x\n")
    assert auth.session_owners(a.app).known("default", sid)
    assert a.delete(f"/v1/sessions/{sid}").status_code == 200
    assert not auth.session_owners(a.app).known("default", sid)
    assert_problem(a.get(f"/v1/sessions/{sid}"), 404)


def test_rate_limit_counts_requests_admitted_on_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With auth off the known-session path still counts: the 4th request in a minute on a
    3/minute limit is 429 with Retry-After, and none of them took the thread path."""
    with TestClient(create_app(Settings(data_dir=tmp_path, auth="off", rate_limit="1000/minute")),
                    raise_server_exceptions=False) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        assert client.get(f"/v1/sessions/{sid}").status_code == 200  # the owner is known from here on
        client.app.state.ctxd.rate_limiter = TenantRateLimiter("3/minute")  # type: ignore[attr-defined]
        calls = _count_authorize(monkeypatch)
        assert [client.get(f"/v1/sessions/{sid}").status_code for _ in range(3)] == [200, 200, 200]
        r = client.get(f"/v1/sessions/{sid}")
        body = assert_problem(r, 429)
        assert 1 <= int(r.headers["retry-after"]) <= 60 and body["retry_after"] == int(r.headers["retry-after"])
        assert calls == []


def test_keys_required_still_checks_the_key_every_time(tmp_path: Path) -> None:
    """The owner is kept, but with keys required every request reads its key: a key revoked
    after the owner was found is refused on the next request."""
    from app.services import tenancy
    from app.store.db import unit_of_work

    with TestClient(create_app(Settings(data_dir=tmp_path, auth="required")), raise_server_exceptions=False) as client:
        with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
            key = tenancy.create_key(db, "t1")[1]
        headers = {"Authorization": f"Bearer {key}"}
        sid, _ = session_with_output(client, headers, "y\n")
        assert client.get(f"/v1/sessions/{sid}", headers=headers).status_code == 200
        with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
            from app.store import tenancy as store

            tenant_id = store.session_tenant(db, sid)
        assert tenant_id is not None and auth.session_owners(client.app).known(tenant_id, sid)
        with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
            assert tenancy.revoke_key(db, key)
        assert_problem(client.get(f"/v1/sessions/{sid}", headers=headers), 401)
        assert_problem(client.get(f"/v1/sessions/{sid}"), 401)


def test_in_process_limiter_starts_no_thread_and_counts_only_admissions() -> None:
    limiter = TenantRateLimiter("5/minute;2/second")
    before = threading.active_count()
    limiter.check("t")
    limiter.check("t")
    with pytest.raises(Exception) as refused:
        limiter.check("t")  # the per-second limit is full
    assert refused.value.extra["limit"] == "2 per 1 second"
    assert threading.active_count() == before, "no timer thread per request (limits' memory storage starts one)"
    # each limit counts in turn up to the first that is full (as limits' strategies do): the
    # per-minute window holds the three requests, the per-second one the two it admitted
    assert limiter.local is not None
    times = limiter.local._times
    assert len(times[(0, "t")]) == 3 and len(times[(1, "t")]) == 2
    limiter.check("u")  # another tenant has its own windows
    limiter.reset()
    limiter.check("t")
