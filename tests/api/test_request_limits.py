"""Issue 12 items 4 and 6: malformed JSON is a 400 problem+json; nesting deeper than
CTXD_MAX_JSON_DEPTH, a string longer than CTXD_MAX_STRING_CHARS and more than 1,000 events
in a batch are 422 naming the place; nothing is stored. Event payload fields are bounded by
CTXD_MAX_PAYLOAD_BYTES (413) instead, so a long tool output is not a 422."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.test_api import SESSION, assert_problem, assistant, result

DEPTH = 8
CHARS = 100


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("limits"), max_json_depth=DEPTH, max_string_chars=CHARS,
                        max_payload_bytes=10_000)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def sid(client: TestClient) -> str:
    return client.post("/v1/sessions", json=SESSION).json()["id"]


def _nested(depth: int) -> dict:
    """An object whose ``metadata`` makes the body ``depth`` levels deep."""
    value: object = "leaf"
    for _ in range(depth - 1):  # the body itself is level 1
        value = {"k": value}
    return SESSION | {"metadata": value}  # type: ignore[dict-item]


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/{sid}/events", "/v1/sessions/{sid}/preconditions"])
@pytest.mark.parametrize(("raw", "line", "column"), [(b'{"events": [', 1, 13), (b'{\n  "a": 1,\n}', 3, 1),
                                                     (b"{'single': 'quotes'}", 1, 2), (b"nope", 1, 1)])
def test_malformed_json_is_400(client: TestClient, sid: str, path: str, raw: bytes, line: int, column: int) -> None:
    before = client.get(f"/v1/sessions/{sid}").json()["events"]
    r = client.post(path.format(sid=sid), content=raw, headers={"content-type": "application/json"})
    body = assert_problem(r, 400)
    assert body["title"] == "Malformed JSON" and (body["line"], body["column"]) == (line, column)
    assert client.get(f"/v1/sessions/{sid}").json()["events"] == before


@pytest.mark.parametrize("headers", [{}, {"content-type": "application/x-www-form-urlencoded"},
                                     {"content-type": "text/plain"}])
def test_a_json_body_sent_without_the_json_content_type_says_so(client: TestClient, headers: dict) -> None:
    """``curl -d '{...}'`` without ``-H 'content-type: application/json'`` (a new user's first
    mistake): still a 422 that stores nothing, but the detail names the Content-Type to send
    (before: "body: Input should be a valid dictionary or object to extract fields from")."""
    before = client.get("/v1/sessions").json()
    r = client.post("/v1/sessions", content=json.dumps(SESSION).encode(), headers=headers)
    body = assert_problem(r, 422)
    media = headers.get("content-type", "missing")
    assert body["detail"].startswith(f"body: not read as JSON: the Content-Type is {media}; "
                                     "send 'Content-Type: application/json'"), body["detail"]
    assert client.get("/v1/sessions").json() == before


def test_depth_at_the_limit_is_accepted_one_more_is_422(client: TestClient) -> None:
    assert client.post("/v1/sessions", json=_nested(DEPTH)).status_code == 201
    body = assert_problem(client.post("/v1/sessions", json=_nested(DEPTH + 1)), 422)
    assert body["errors"][0]["type"] == "json_too_deep"
    assert body["errors"][0]["loc"] == ["body", "metadata"] + ["k"] * (DEPTH - 1)


def test_far_too_deep_for_the_parser_is_422_not_500(client: TestClient) -> None:
    raw = b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    body = assert_problem(client.post("/v1/sessions", content=raw, headers={"content-type": "application/json"}), 422)
    assert body["errors"][0]["type"] == "json_too_deep"


def _with(loc: list, n: int) -> dict:
    """SESSION with the string at ``loc`` (below the body) ``n`` characters long."""
    body = json.loads(json.dumps(SESSION))
    target = body
    for part in loc[:-1]:
        target = target[part] if isinstance(target, list) else target.setdefault(part, {})
    target[loc[-1]] = "s" * n
    return body


@pytest.mark.parametrize("loc", [["system"], ["metadata", "note"], ["contract", "goal"],
                                 ["tools", 0, "function", "description"]])
def test_string_over_the_limit_is_422_naming_it(client: TestClient, loc: list) -> None:
    assert client.post("/v1/sessions", json=_with(loc, CHARS)).status_code == 201
    body = assert_problem(client.post("/v1/sessions", json=_with(loc, CHARS + 1)), 422)
    assert body["errors"][0]["loc"] == ["body", *loc] and body["errors"][0]["type"] == "string_too_long"


def test_long_key_is_422(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/sessions", json=SESSION | {"metadata": {"k" * (CHARS + 1): 1}}), 422)
    assert body["errors"][0]["type"] == "string_too_long"


def test_payload_fields_are_bounded_by_the_payload_limit_not_the_string_limit(client: TestClient, sid: str) -> None:
    long_text = "x" * (CHARS * 10)
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
        {"event_id": "u-long", "kind": "message", "role": "user", "content": long_text},
        assistant("a-long", "c-long") | {"reasoning": long_text},
        result("r-long", "c-long", long_text)]})
    assert r.status_code == 200, r.text
    args = json.dumps({"command": long_text})
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
        assistant("a-args", "c-args") | {"tool_calls": [{"call_id": "c-args", "name": "bash", "arguments": args}]}]})
    assert r.status_code == 200, r.text
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [result("r-args", "c-args", "y" * 10_001)]})
    assert_problem(r, 413)
    # a non-payload string of an event is bounded: a binding's range
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
        result("r-args", "c-args", "ok", binding={"artifact": "a.py", "kind": "file", "range": "r" * (CHARS + 1)})]})
    assert assert_problem(r, 422)["errors"][0]["loc"] == ["body", "events", 0, "binding", "range"]


def test_more_than_1000_events_is_422(client: TestClient, sid: str) -> None:
    events = [{"event_id": f"s{i}", "kind": "step", "text": "t"} for i in range(1001)]
    body = assert_problem(client.post(f"/v1/sessions/{sid}/events", json={"events": events}), 422)
    assert body["errors"][0]["loc"] == ["body", "events"]
