"""API v1 behaviour on SQLite and PostgreSQL: status codes, problem+json, idempotency,
atomic batches, handles, byte-identical requests."""

from __future__ import annotations

import hashlib
import json

import pytest
from fastapi.testclient import TestClient

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a bash command",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
SESSION = {
    "profile": "qwen3",
    "contract": {"goal": "Make the parser accept empty input.", "contract_version": 1,
                 "constraints": [{"id": "c1", "text": "Do not modify tests."}, {"id": "c2", "text": "Keep the public API."}]},
    "system": "You are a careful engineer.",
    "tools": [BASH],
}


def new_session(client: TestClient, **overrides) -> str:
    r = client.post("/v1/sessions", json=SESSION | overrides)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def assistant(event_id: str, *calls: str, content: str = "Let me look.") -> dict:
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": content,
            "tool_calls": [{"call_id": c, "name": "bash", "arguments": json.dumps({"command": f"cat {c}.py"})} for c in calls]}


def result(event_id: str, call_id: str, payload: str, **extra) -> dict:
    return {"event_id": event_id, "kind": "tool_result", "call_id": call_id, "payload": payload, "exit_code": 0} | extra


def post(client: TestClient, sid: str, *events: dict):
    return client.post(f"/v1/sessions/{sid}/events", json={"events": list(events)})


def assert_problem(r, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def test_create_and_get_session(client: TestClient) -> None:
    sid = new_session(client)
    r = client.get(f"/v1/sessions/{sid}")
    assert r.status_code == 200
    body = r.json()
    assert body["profile"] == "qwen3" and body["contract"]["constraints"][1]["id"] == "c2" and body["events"] == 0


def test_unknown_profile_is_422(client: TestClient) -> None:
    body = assert_problem(client.post("/v1/sessions", json=SESSION | {"profile": "gpt-17"}), 422)
    assert "gpt-17" in body["detail"] and "qwen3" in body["known"]


@pytest.mark.parametrize("bad", [
    {"contract": {"goal": ""}},
    {"contract": {"goal": "x", "constraints": [{"id": "a", "text": "t"}, {"id": "a", "text": "u"}]}},
    {"tools": [{"type": "function", "function": {"name": "has space"}}]},
    {"surprise": 1},
])
def test_bad_session_bodies_are_422(client: TestClient, bad: dict) -> None:
    assert_problem(client.post("/v1/sessions", json=SESSION | bad), 422)


def test_missing_session_is_404(client: TestClient) -> None:
    assert_problem(client.get("/v1/sessions/nope"), 404)
    assert_problem(client.get("/v1/sessions/nope/request"), 404)
    assert_problem(post(client, "nope", assistant("a1")), 404)


def test_events_idempotent_and_conflicting(client: TestClient) -> None:
    sid = new_session(client)
    r = post(client, sid, assistant("a1", "c1"), result("r1", "c1", "print('hi')\n"))
    assert r.status_code == 200
    assert [x["seq"] for x in r.json()["results"]] == [1, 2]
    again = post(client, sid, assistant("a1", "c1"), result("r1", "c1", "print('hi')\n"))
    assert again.status_code == 200
    assert [(x["seq"], x["status"]) for x in again.json()["results"]] == [(1, "duplicate"), (2, "duplicate")]
    assert_problem(post(client, sid, result("r1", "c1", "something else")), 409)
    assert client.get(f"/v1/sessions/{sid}").json()["events"] == 2


def test_unknown_call_id_is_422_and_batch_is_atomic(client: TestClient) -> None:
    sid = new_session(client)
    body = assert_problem(post(client, sid, assistant("a1", "c1"), result("r1", "c1", "ok"), result("r2", "ghost", "??")), 422)
    assert "ghost" in body["detail"] and body["index"] == 2
    state = client.get(f"/v1/sessions/{sid}").json()
    assert state["events"] == 0 and state["last_seq"] == 0, "all or nothing"
    # a result must name an *earlier* call: same batch, call first, is fine
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", "ok")).status_code == 200
    assert_problem(post(client, sid, result("r9", "c1", "second result")), 422)


@pytest.mark.parametrize("bad_event", [
    {"event_id": "x", "kind": "telepathy"},
    {"event_id": "x", "kind": "message", "role": "system", "content": "hi"},
    {"event_id": "", "kind": "step", "text": "go"},
    {"event_id": "x", "kind": "tool_result", "call_id": "c"},
    {"event_id": "x", "kind": "message", "role": "user", "content": "x", "tool_calls": [{"call_id": "c", "name": "bash"}]},
])
def test_malformed_events_are_422(client: TestClient, bad_event: dict) -> None:
    sid = new_session(client)
    assert_problem(post(client, sid, bad_event), 422)
    assert_problem(client.post(f"/v1/sessions/{sid}/events", json={"events": []}), 422)
    # issue 12 item 6: a body that is not JSON is a 400 (it was a 422 before)
    assert_problem(client.post(f"/v1/sessions/{sid}/events", content=b"{not json", headers={"content-type": "application/json"}), 400)


def test_artifact_revisions_and_binding_default(client: TestClient) -> None:
    sid = new_session(client)
    r = post(client, sid, {"event_id": "w1", "kind": "artifact_write", "artifact": "src/a.py"},
             {"event_id": "w2", "kind": "artifact_write", "artifact": "src/a.py", "content_hash": "abc"},
             assistant("a1", "c1"),
             result("r1", "c1", "line1\n", binding={"artifact": "src/a.py", "kind": "file", "range": "1:1"}))
    assert r.status_code == 200
    assert [x["revision"] for x in r.json()["results"]] == [1, 2, None, None]
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"src/a.py": 2}
    dup = post(client, sid, {"event_id": "w2", "kind": "artifact_write", "artifact": "src/a.py", "content_hash": "abc"})
    assert dup.json()["results"][0] == {"event_id": "w2", "seq": 2, "status": "duplicate", "revision": 2}


def test_request_layout_manifest_and_identity(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, assistant("a1", "c1", "c2"), result("r2", "c2", "two\n"), result("r1", "c1", "one\n"),
         {"event_id": "s1", "kind": "step", "text": "Write the fix."})
    first = client.get(f"/v1/sessions/{sid}/request?format=openai")
    second = client.get(f"/v1/sessions/{sid}/request")
    assert first.status_code == 200
    assert json.dumps(first.json()["request"]).encode() == json.dumps(second.json()["request"]).encode()
    body, manifest = first.json()["request"], first.json()["manifest"]
    assert body["model"] and body["max_tokens"] == 4096 and body["tools"][0]["function"]["name"] == "bash"
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": SESSION["system"]}
    assert messages[1]["role"] == "user" and "Do not modify tests." in messages[1]["content"]
    assert [m["role"] for m in messages[2:]] == ["assistant", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in messages[3:5]] == ["c1", "c2"], "results follow their calls' order"
    assert messages[-1]["content"] == "Next step: Write the fix."
    tokens = manifest["tokens"]
    assert sum(tokens["by_zone"].values()) == tokens["total"] == sum(tokens["by_role"].values())
    assert tokens["by_role"]["tools"] > 0 and tokens["by_role"]["task_state"] == tokens["by_zone"]["trunk"]
    assert manifest["budget"] == manifest["budget"] | {"window": 32768, "output_reserve": 4096, "headroom": 512, "input_limit": 28160}
    assert {i["seq"] for i in manifest["items"]} == {1, 2, 3, 4}
    assert all(i["why"] and i["representation"] for i in manifest["items"])


def test_unknown_format_is_422(client: TestClient) -> None:
    sid = new_session(client)
    assert_problem(client.get(f"/v1/sessions/{sid}/request?format=smoke-signals"), 422)


def test_handles_whole_and_sliced(client: TestClient) -> None:
    sid = new_session(client)
    payload = "alpha\nbeta\r\ngamma é\n" + "x" * 100
    post(client, sid, assistant("a1", "c1"), result("r1", "c1", payload))
    handle = hashlib.sha256(payload.encode()).hexdigest()
    whole = client.get(f"/v1/handles/{handle}")
    assert whole.status_code == 200 and whole.content == payload.encode()
    assert client.get(f"/v1/handles/{handle[:16]}").content == payload.encode()
    assert client.get(f"/v1/handles/{handle}?offset=6&length=4").content == b"beta"
    assert client.get(f"/v1/handles/{handle}?lines=2:3").content == "beta\r\ngamma é\n".encode()
    assert_problem(client.get(f"/v1/handles/{handle}?lines=9:10"), 416)
    assert_problem(client.get(f"/v1/handles/{handle}?offset=100000"), 416)
    assert_problem(client.get(f"/v1/handles/{handle}?lines=3-1"), 422)
    assert_problem(client.get("/v1/handles/" + "0" * 64), 404)
    assert_problem(client.get("/v1/handles/not-hex"), 404)


def test_pinned_over_budget_is_422_naming_role(client: TestClient) -> None:
    huge = " ".join(f"rule{i}" for i in range(40_000))
    sid = new_session(client, contract={"goal": huge, "constraints": []})
    body = assert_problem(client.get(f"/v1/sessions/{sid}/request"), 422)
    assert body["over_by"] > 0 and "task_state" in body["over_roles"]


def test_ops_endpoints(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code in (200, 503)
    sid = new_session(client)
    client.get(f"/v1/sessions/{sid}/request")
    text = client.get("/metrics").text
    assert "ctxd_http_requests_total" in text and 'ctxd_assembled_tokens_total{profile="qwen3",role="tools"}' in text
    spec = client.get("/openapi.json").json()
    assert "/v1/sessions/{session_id}/request" in spec["paths"]


def test_pending_call_and_suspicious_calls_are_reported(client: TestClient) -> None:
    sid = new_session(client)
    bad = {"event_id": "a1", "kind": "message", "role": "assistant", "content": "",
           "tool_calls": [{"call_id": "c1", "name": "rm_rf", "arguments": "not json"}]}
    assert post(client, sid, bad).status_code == 200
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    item = next(i for i in manifest["items"] if i["event_id"] == "a1")
    assert item["representation"] == "pending" and item["pending_calls"] == ["c1"] and item["zone"] is None
    post(client, sid, result("r1", "c1", "ok\n"))
    warnings = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]["layout_warnings"]
    assert any("undeclared tool 'rm_rf'" in w for w in warnings)
    assert any("not a JSON object" in w for w in warnings)


def test_reversed_line_range_says_so(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, assistant("a1", "c1"), result("r1", "c1", "a\nb\nc\n"))
    handle = hashlib.sha256(b"a\nb\nc\n").hexdigest()
    assert "a <= b" in assert_problem(client.get(f"/v1/handles/{handle}?lines=3:2"), 416)["detail"]
    assert client.get(f"/v1/handles/{handle}?lines=2:99").content == b"b\nc\n"  # clamped like sed -n


def test_manifests_are_persisted_and_read_back(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, assistant("a1", "c1"), result("r1", "c1", "print('hi')\n"))
    served = [client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()["manifest"]
              for fmt in ("openai", "anthropic", "tokens")]
    listing = client.get(f"/v1/sessions/{sid}/manifests").json()
    assert [m["id"] for m in listing["manifests"]] == [m["id"] for m in reversed(served)]
    assert listing["manifests"][0]["format"] == "tokens" and listing["next_before_id"] is None
    for manifest in served:
        assert client.get(f"/v1/sessions/{sid}/manifests/{manifest['id']}").json() == manifest
    page = client.get(f"/v1/sessions/{sid}/manifests?limit=2").json()
    assert len(page["manifests"]) == 2 and page["next_before_id"] == served[1]["id"]
    rest = client.get(f"/v1/sessions/{sid}/manifests?limit=2&before_id={page['next_before_id']}").json()
    assert [m["id"] for m in rest["manifests"]] == [served[0]["id"]] and rest["next_before_id"] is None


def test_manifest_errors_are_problems(client: TestClient) -> None:
    sid = new_session(client)
    other = new_session(client)
    post(client, other, assistant("a1", "c1"), result("r1", "c1", "ok"))
    foreign = client.get(f"/v1/sessions/{other}/request").json()["manifest"]["id"]
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests/{foreign}"), 404)  # another session's
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests/999999"), 404)
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests/0"), 422)
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests/x"), 422)
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests?limit=0"), 422)
    assert_problem(client.get("/v1/sessions/nope/manifests"), 404)
    assert client.get(f"/v1/sessions/{sid}/manifests").json()["manifests"] == []
