"""Message items' ``tokens`` in the manifest (GET /v1/sessions/{id}/request, on SQLite and
PostgreSQL): each user or assistant message in the leaf carries the tokens it adds to the
rendered request, its chat framing included, read off the request's own measurement.

The relation, per profile, for a leaf of messages only:

* qwen3 (native render): every message has tokens, each equal to its ChatML turn
  ``<|im_start|>role\\n...<|im_end|>\\n`` tokenized alone, and
  ``total = root + trunk + sum(message tokens) + 3`` (the generation prompt
  ``<|im_start|>assistant\\n``; qwen3-nothink: + its empty think block, 7).
* mistral-tekken: mistral-common merges a user message that follows a user message into one
  [INST] block; the first leaf message (a user message right after the trunk's) is merged
  into the trunk's block, so it has no tokens of its own (they count in ``by_zone.trunk``),
  and ``total = root + trunk + sum(message tokens)`` exactly (no generation prompt: the last
  [INST] block ends the request). An assistant message is its text and ``</s>``.

Before, message items had no ``tokens`` at all."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import assistant, new_session, post, result

SHORT = "Thanks."
LONG = "Thanks. Now also handle a header that is present but empty, and write down why it failed before."


def _messages(u1: str) -> list[dict[str, Any]]:
    return [{"event_id": "u0", "kind": "message", "role": "user", "content": "Please fix the parser."},
            {"event_id": "a0", "kind": "message", "role": "assistant", "content": "I will look at it first."},
            {"event_id": "u1", "kind": "message", "role": "user", "content": u1},
            {"event_id": "a1", "kind": "message", "role": "assistant", "content": "Understood."},
            {"event_id": "u2", "kind": "message", "role": "user", "content": "Go ahead."}]


def _manifest(client: TestClient, profile: str, u1: str, fmt: str = "openai") -> dict[str, Any]:
    sid = new_session(client, profile=profile, tools=[])
    r = post(client, sid, *_messages(u1))
    assert r.status_code == 200, r.text
    got = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
    assert got.status_code == 200, got.text
    return got.json()["manifest"]


def _tokens(manifest: dict[str, Any]) -> dict[str, int | None]:
    return {i["event_id"]: i.get("tokens") for i in manifest["items"] if i["kind"] == "message"}


def _meter(client: TestClient, profile: str) -> Any:
    state = client.app.state.ctxd  # type: ignore[attr-defined]
    return state.meters.get(state.profiles.get(profile))


@pytest.mark.parametrize(("profile", "prompt"), [("qwen3", 3), ("qwen3-nothink", 7)])
def test_qwen3_message_tokens_account_for_the_total(client: TestClient, profile: str, prompt: int) -> None:
    meter = _meter(client, profile)
    gen = "<|im_start|>assistant\n" + ("<think>\n\n</think>\n\n" if profile == "qwen3-nothink" else "")
    assert len(meter.tokenizer.encode(gen, add_special_tokens=False)) == prompt
    for u1 in (SHORT, LONG):
        manifest = _manifest(client, profile, u1)
        tokens, zones = _tokens(manifest), manifest["tokens"]["by_zone"]
        assert set(tokens) == {"u0", "a0", "u1", "a1", "u2"} and None not in tokens.values(), manifest["items"]
        assert manifest["tokens"]["total"] == zones["root"] + zones["trunk"] + sum(tokens.values()) + prompt
        for m in _messages(u1):  # each is its ChatML turn, framing included, counted alone
            turn = f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
            assert tokens[m["event_id"]] == len(meter.tokenizer.encode(turn, add_special_tokens=False)), m


def test_mistral_message_tokens_account_for_the_total(client: TestClient) -> None:
    meter = _meter(client, "mistral-tekken")
    for u1 in (SHORT, LONG):
        manifest = _manifest(client, "mistral-tekken", u1)
        tokens, zones = _tokens(manifest), manifest["tokens"]["by_zone"]
        assert tokens["u0"] is None, "merged into the trunk's [INST] block: counted in the trunk zone"
        assert None not in [tokens[e] for e in ("a0", "u1", "a1", "u2")], manifest["items"]
        assert manifest["tokens"]["total"] == zones["root"] + zones["trunk"] + sum(n or 0 for n in tokens.values())
        for m in _messages(u1):
            if m["role"] == "assistant":  # its text and </s>
                assert tokens[m["event_id"]] == meter.count_text(m["content"]) + 1, m


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_a_longer_message_has_more_tokens_by_what_the_request_grew(client: TestClient, profile: str) -> None:
    short, long = _manifest(client, profile, SHORT), _manifest(client, profile, LONG)
    grew = long["tokens"]["total"] - short["tokens"]["total"]
    assert grew > 0 and _tokens(long)["u1"] - _tokens(short)["u1"] == grew  # type: ignore[operator]
    assert {k: v for k, v in _tokens(long).items() if k != "u1"} == {k: v for k, v in _tokens(short).items()
                                                                     if k != "u1"}


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_message_tokens_are_those_of_the_profile_in_every_format(client: TestClient, profile: str) -> None:
    """The count is the profile's render, whatever the wire format; an identical second GET
    gives the same items."""
    sid = new_session(client, profile=profile, tools=[])
    assert post(client, sid, *_messages(LONG)).status_code == 200
    got = {fmt: client.get(f"/v1/sessions/{sid}/request", params={"format": fmt}).json()["manifest"]
           for fmt in ("openai", "anthropic", "tokens")}
    assert _tokens(got["openai"]) == _tokens(got["anthropic"]) == _tokens(got["tokens"])
    again = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    assert again["items"] == got["openai"]["items"]


def test_tool_results_keep_their_payload_tokens_and_calls_count_with_their_message(client: TestClient) -> None:
    """An assistant message's tool calls are part of its tokens; a tool result's ``tokens``
    stays its payload's (no framing)."""
    sid = new_session(client, profile="qwen3")
    payload = "a.py\nb.py\n"
    r = post(client, sid, {"event_id": "u0", "kind": "message", "role": "user", "content": "List the files."},
             assistant("a0", "c1", content=""), result("r0", "c1", payload))
    assert r.status_code == 200, r.text
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    items = {i["event_id"]: i for i in manifest["items"]}
    meter = _meter(client, "qwen3")
    assert items["r0"]["tokens"] == meter.count_text(payload) and items["r0"]["tokens_known"] is True
    bare = len(meter.tokenizer.encode("<|im_start|>assistant\n<|im_end|>\n", add_special_tokens=False))
    assert items["a0"]["tokens"] > bare + meter.count_text('{"command": "cat c1.py"}')
