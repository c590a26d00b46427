"""Bounded memory at the door (issue 9, item 7): the maximum payload size and the maximum
request body are settings, both answered 413 problem+json that stores nothing, on SQLite
and PostgreSQL; the events-per-batch limit stays 422; the defaults admit every real trace."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.limits import BodyLimitMiddleware
from app.main import create_app
from app.settings import Settings
from tests.api.test_api import assert_problem, assistant, new_session, post, result
from tests.traces import TRACE_FILES

MAX_PAYLOAD = 1_000
MAX_BODY = 20_000


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app with small limits: payloads up to 1,000 bytes, bodies up to 20,000 bytes."""
    data_dir: Path = tmp_path_factory.mktemp("ctxd-limits")
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else ""
    settings = Settings(data_dir=data_dir, database_url=url, max_payload_bytes=MAX_PAYLOAD, max_body_bytes=MAX_BODY)
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


def state(client: TestClient, sid: str) -> tuple[int, int]:
    body = client.get(f"/v1/sessions/{sid}").json()
    return body["events"], body["last_seq"]


def handle_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_payload_over_the_limit_is_413_and_stores_nothing(client: TestClient) -> None:
    sid = new_session(client)
    big = "é" * 501  # 1,002 bytes in UTF-8, 501 characters: the limit counts bytes
    r = post(client, sid, assistant("a1", "c1"), result("r1", "c1", big))
    body = assert_problem(r, 413)
    assert body["title"] == "Payload too large" and "CTXD_MAX_PAYLOAD_BYTES" in body["detail"]
    assert {k: body[k] for k in ("index", "event_id", "field", "size_bytes", "max_bytes")} == \
        {"index": 1, "event_id": "r1", "field": "payload", "size_bytes": 1_002, "max_bytes": MAX_PAYLOAD}
    assert state(client, sid) == (0, 0), "the batch is refused whole"
    assert client.get(f"/v1/handles/{handle_of(big)}").status_code == 404, "the payload is not stored"
    # the call was not recorded either: the same call id is free, and exactly the limit is accepted
    at_limit = "é" * 500
    ok = post(client, sid, assistant("a1", "c1"), result("r1", "c1", at_limit))
    assert ok.status_code == 200, ok.text
    assert client.get(f"/v1/handles/{handle_of(at_limit)}").content == at_limit.encode("utf-8")


def test_message_over_the_limit_is_413(client: TestClient) -> None:
    sid = new_session(client)
    huge = {"event_id": "u1", "kind": "message", "role": "user", "content": "x" * MAX_PAYLOAD}
    body = assert_problem(post(client, sid, {"event_id": "s1", "kind": "step", "text": "go"}, huge), 413)
    assert body["event_id"] == "u1" and body["index"] == 1 and body["field"] == "message"
    assert body["size_bytes"] > MAX_PAYLOAD
    assert state(client, sid) == (0, 0)


def test_body_over_the_limit_is_413_before_the_app_runs(client: TestClient) -> None:
    sid = new_session(client)
    events = [assistant("a1", "c1")] + [{"event_id": f"s{i}", "kind": "step", "text": "y" * 900} for i in range(25)]
    raw = json.dumps({"events": events}).encode()
    assert len(raw) > MAX_BODY
    r = client.post(f"/v1/sessions/{sid}/events", content=raw, headers={"content-type": "application/json"})
    body = assert_problem(r, 413)
    assert body["title"] == "Request body too large" and "CTXD_MAX_BODY_BYTES" in body["detail"]
    assert body["size_bytes"] == len(raw) and body["max_bytes"] == MAX_BODY
    assert state(client, sid) == (0, 0)
    # session create is bounded too
    assert_problem(client.post("/v1/sessions", content=json.dumps({"system": "z" * MAX_BODY}).encode(),
                               headers={"content-type": "application/json"}), 413)


def test_streamed_body_is_cut_off_at_the_limit(client: TestClient) -> None:
    sid = new_session(client)
    events = [{"event_id": f"s{i}", "kind": "step", "text": "y" * 900} for i in range(25)]
    raw = json.dumps({"events": events}).encode()

    def chunks(data: bytes) -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for start in range(0, len(data), 4096):
            yield data[start:start + 4096]

    r = client.post(f"/v1/sessions/{sid}/events", content=chunks(raw), headers={"content-type": "application/json"})
    body = assert_problem(r, 413)
    assert body["max_bytes"] == MAX_BODY and "size_bytes" not in body
    # before: "request body of more exceeds the limit ..." (found by a fresh user)
    assert body["detail"] == f"request body (streamed) exceeds the limit of {MAX_BODY:,} bytes (setting CTXD_MAX_BODY_BYTES)"
    assert state(client, sid) == (0, 0)
    small = json.dumps({"events": events[:3]}).encode()
    ok = client.post(f"/v1/sessions/{sid}/events", content=chunks(small), headers={"content-type": "application/json"})
    assert ok.status_code == 200, ok.text
    assert state(client, sid) == (3, 3)


def test_events_per_batch_limit_stays_422(client: TestClient) -> None:
    sid = new_session(client)
    steps = [{"event_id": f"s{i}", "kind": "step", "text": "y"} for i in range(1001)]
    assert len(json.dumps({"events": steps})) > MAX_BODY  # so: the same database, the default body limit
    app = create_app(Settings(data_dir=client.app.state.ctxd.settings.data_dir,
                              database_url=client.app.state.ctxd.settings.database_url))
    with TestClient(app, raise_server_exceptions=False) as default:
        body = assert_problem(default.post(f"/v1/sessions/{sid}/events", json={"events": steps}), 422)
        assert "1000" in body["detail"]
        assert state(default, sid) == (0, 0)


def test_the_middleware_reads_no_body_byte_when_content_length_is_over() -> None:
    """The 413 for a declared length is sent before ``receive`` is ever called, so a
    client announcing 1 GB costs nothing; the wrapped app never runs."""
    calls: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        calls.append("app")

    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/sessions/x/events", "headers": [(b"content-length", b"1000000000")]}
    asyncio.run(BodyLimitMiddleware(app, max_bytes=MAX_BODY)(scope, receive, send))
    assert calls == []
    assert sent[0]["status"] == 413
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"application/problem+json" and headers[b"connection"] == b"close"
    problem = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert problem["size_bytes"] == 1_000_000_000 and problem["max_bytes"] == MAX_BODY


def test_defaults_admit_every_real_trace() -> None:
    """The largest payload and the largest POST body of the shared traces (as ``ctxd
    replay`` posts them) are within the default limits; they are 110,817 and 114,098 bytes."""
    if not TRACE_FILES:
        pytest.skip("shared traces not found")
    from ctxd_tools.miniswe import PostEvents, load_trajectory, replay_plan, session_create_body

    defaults = Settings()
    largest_payload = largest_body = 0
    for path in TRACE_FILES:
        traj = load_trajectory(path)
        largest_body = max(largest_body, len(json.dumps(session_create_body(traj, profile="qwen3")).encode()))
        for step in replay_plan(traj):
            if isinstance(step, PostEvents):
                largest_body = max(largest_body, len(json.dumps({"events": step.events}).encode()))
                for e in step.events:
                    if e["kind"] == "tool_result":
                        largest_payload = max(largest_payload, len(e["payload"].encode()))
    assert largest_payload >= 100_000, "the traces hold payloads of ~110 kB"
    assert largest_payload <= defaults.max_payload_bytes and largest_body <= defaults.max_body_bytes
    assert defaults.max_payload_bytes >= 2 * 1024 * 1024, "a 2 MB tool output is admitted"
