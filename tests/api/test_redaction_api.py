"""Secret redaction end to end (issue 12 item 5), SQLite and PostgreSQL: the fake-secret
corpus posted as tool outputs, assistant text and tool-call arguments is absent from every
served request (openai, anthropic, tokens) and manifest, each redacted item carries the
``redact_secrets`` transform, tool-call arguments in the bodies are valid JSON, the
contract is never redacted, and every raw payload is byte-exact behind its scoped handle."""

from __future__ import annotations

import hashlib
import json

from fastapi.testclient import TestClient

from app.domain.layout import canonical_json
from tests.api.test_api import SESSION
from tests.secret_corpus import ARGUMENTS, ASSISTANT_TEXT, AWS_SECRET, CORPUS, GH_CLASSIC

FORMATS = ("openai", "anthropic", "tokens")


def _post_corpus(client: TestClient) -> tuple[str, list[str], list[tuple[str, bytes]]]:
    """A session holding the whole corpus; returns (session id, every secret, (handle, raw bytes))."""
    contract = {"goal": f"Rotate the leaked key {AWS_SECRET} everywhere.", "constraints": [
        {"id": "c1", "text": f"Never push {GH_CLASSIC} again."}]}
    sid = client.post("/v1/sessions", json=SESSION | {"contract": contract}).json()["id"]
    events: list[dict] = [{"event_id": "u1", "kind": "message", "role": "user", "content": "Audit the machine."}]
    secrets: list[str] = []
    raw: list[tuple[str, bytes]] = []
    for n, (name, text, found) in enumerate(CORPUS):
        events += [{"event_id": f"a{n}", "kind": "message", "role": "assistant", "content": f"Checking {name}.",
                    "tool_calls": [{"call_id": f"c{n}", "name": "bash", "arguments": json.dumps({"command": "cat x"})}]},
                   {"event_id": f"r{n}", "kind": "tool_result", "call_id": f"c{n}", "payload": text}]
        secrets += found
        raw.append((hashlib.sha256(text.encode()).hexdigest(), text.encode()))
    calls = [{"call_id": f"k{i}", "name": "bash", "arguments": args} for i, (args, _) in enumerate(ARGUMENTS)]
    message = {"event_id": "a-args", "kind": "message", "role": "assistant", "content": ASSISTANT_TEXT[0],
               "tool_calls": calls}
    events.append(message)
    events += [{"event_id": f"rk{i}", "kind": "tool_result", "call_id": f"k{i}", "payload": "done\n"}
               for i in range(len(ARGUMENTS))]
    secrets += ASSISTANT_TEXT[1] + [s for _, found in ARGUMENTS for s in found]
    canonical = {"role": "assistant", "content": ASSISTANT_TEXT[0], "reasoning": None, "tool_calls": calls}
    raw.append((hashlib.sha256(canonical_json(canonical).encode()).hexdigest(), canonical_json(canonical).encode()))
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": events})
    assert r.status_code == 200, r.text
    return sid, secrets, raw


def test_corpus_is_redacted_in_requests_and_whole_behind_handles(client: TestClient) -> None:
    sid, secrets, raw = _post_corpus(client)
    for fmt in FORMATS:
        body = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt}).json()
        served = json.dumps(body["request"], ensure_ascii=False)
        # the contract is protected: copied verbatim even when it names a secret
        assert AWS_SECRET in served and GH_CLASSIC in served
        without_contract = served.replace(AWS_SECRET + " everywhere", "").replace(f"Never push {GH_CLASSIC}", "")
        leaked = sorted({s[:10] for s in secrets if s in without_contract})
        assert leaked == [], f"{fmt}: {leaked}"
        manifest = json.dumps(body["manifest"], ensure_ascii=False)
        assert not [s for s in secrets if s in manifest]
        redacted = [i for i in body["manifest"]["items"] if any(t["name"] == "redact_secrets" for t in i.get("transforms", ()))]
        assert len(redacted) == len(CORPUS) + 1, [i["event_id"] for i in redacted]
        if fmt == "openai":
            for message in body["request"]["messages"]:
                for call in message.get("tool_calls") or []:
                    json.loads(call["function"]["arguments"])  # valid JSON
            assert "[REDACTED:" in served
        if fmt == "anthropic":
            inputs = [b["input"] for m in body["request"]["messages"] if isinstance(m["content"], list)
                      for b in m["content"] if b.get("type") == "tool_use"]
            assert len(inputs) >= len(ARGUMENTS) and all(isinstance(i, dict) for i in inputs)
    for handle, data in raw:  # byte-exact behind the scoped handles
        assert client.get(f"/v1/sessions/{sid}/handles/{handle}").content == data
        assert client.get(f"/v1/handles/{handle}").content == data


def test_redaction_can_be_read_back_in_the_manifest(client: TestClient) -> None:
    sid, _, _ = _post_corpus(client)
    body = client.get(f"/v1/sessions/{sid}/request").json()
    item = next(i for i in body["manifest"]["items"] if i["event_id"] == "r0")
    transform = next(t for t in item["transforms"] if t["name"] == "redact_secrets")
    assert transform["count"] == 5 and "github-token" in transform["note"] and "handle keeps" in transform["note"]
    stored = client.get(f"/v1/sessions/{sid}/manifests/{body['manifest']['id']}").json()
    assert stored["items"] == body["manifest"]["items"]
