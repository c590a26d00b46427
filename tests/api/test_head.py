"""HEAD wherever GET is served (RFC 9110 section 9.3.2: a general-purpose server supports
HEAD and GET). Before: FastAPI's routes accept only the methods they declare, so ``HEAD
/healthz`` (what uptime monitors and some load balancers send), ``HEAD /ui`` and every
other GET route were 405 Method Not Allowed. Now a HEAD runs as the GET (auth and limits
included) and answers its status and headers without the body."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_api import new_session


def test_head_answers_the_get_status_and_headers_without_the_body(client: TestClient) -> None:
    sid = new_session(client)
    for path in ("/healthz", "/metrics", "/v1/profiles", "/ui", f"/v1/sessions/{sid}", "/openapi.json"):
        get, head = client.get(path), client.head(path)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b"" and get.content, path
        assert head.headers["content-type"] == get.headers["content-type"], path
        if "metrics" not in path:  # its body counts the requests themselves
            assert head.headers["content-length"] == str(len(get.content)), path
    # an absent session is a 404 for HEAD as for GET; a POST-only route is still 405
    absent = client.head(f"/v1/sessions/{'0' * 32}")
    assert absent.status_code == 404 and absent.content == b""
    assert client.head(f"/v1/sessions/{sid}/preconditions").status_code == 405


def test_head_of_the_request_route_stores_nothing(client: TestClient) -> None:
    """GET /request stores the manifest of what it serves; HEAD is a safe method, so it is
    405 there (Allow: GET) and stores no manifest (found by a fresh-user check: each HEAD
    added a manifest row)."""
    sid = new_session(client)
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
    before = client.get(f"/v1/sessions/{sid}/manifests").json()["manifests"]
    head = client.head(f"/v1/sessions/{sid}/request")
    assert head.status_code == 405 and head.headers["allow"] == "GET" and head.content == b""
    assert client.get(f"/v1/sessions/{sid}/manifests").json()["manifests"] == before


def test_get_request_says_where_its_time_went(client: TestClient) -> None:
    """``Server-Timing`` (W3C) on GET /request: the load, plan and save steps in ms, what
    ``ctxd bench`` prints per band, for telling the planner's time from the HTTP path's."""
    import re

    sid = new_session(client)
    r = client.get(f"/v1/sessions/{sid}/request")
    assert r.status_code == 200
    steps = dict(re.findall(r"(\w+);dur=([0-9.]+)", r.headers["server-timing"]))
    assert list(steps) == ["load", "plan", "save"] and all(float(v) > 0 for v in steps.values())
