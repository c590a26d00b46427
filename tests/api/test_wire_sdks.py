"""The served bodies go through the official OpenAI and Anthropic SDKs unchanged: each SDK
sends its request through an httpx MockTransport that captures the body (no network)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import assistant, new_session, post, result


def capture(handler_body: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """An SDK-compatible HTTP client whose MockTransport records each request body.

    Recent openai/anthropic SDKs are built on ``httpx2`` (older ones on ``httpx``)."""
    try:
        import httpx2 as http
    except ImportError:  # older SDK generations
        http = httpx
    seen: list[dict[str, Any]] = []

    def handler(request: Any) -> Any:
        seen.append(json.loads(request.content))
        return http.Response(200, json=handler_body)

    return http.Client(transport=http.MockTransport(handler)), seen


def busy_session(client: TestClient) -> str:
    sid = new_session(client)
    post(client, sid,
         assistant("a1", "c1", "c2", content="Two reads in parallel."),
         result("r2", "c2", "second\n"), result("r1", "c1", "first\n"),
         assistant("a2", "c3", content=""),
         result("r3", "c3", "", exit_code=1),
         {"event_id": "u1", "kind": "message", "role": "user", "content": "Please also check the docs."},
         assistant("a3", content="Done: the parser accepts empty input."),
         {"event_id": "s1", "kind": "step", "text": "Summarise the change."})
    return sid


def test_openai_sdk_sends_the_served_body(client: TestClient) -> None:
    from openai import OpenAI

    sid = busy_session(client)
    body = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]
    http, seen = capture({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]})
    OpenAI(api_key="test", base_url="http://llm.invalid/v1", http_client=http).chat.completions.create(**body)
    assert seen == [body]
    assert body["prompt_cache_key"].startswith("ctxd-")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                                    "user", "assistant", "user"]


def test_anthropic_sdk_sends_the_served_body(client: TestClient) -> None:
    from anthropic import Anthropic

    sid = busy_session(client)
    body = client.get(f"/v1/sessions/{sid}/request?format=anthropic").json()["request"]
    http, seen = capture({"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                          "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                          "usage": {"input_tokens": 1, "output_tokens": 1}})
    Anthropic(api_key="test", base_url="http://llm.invalid", http_client=http).messages.create(**body)
    assert seen == [body]
    assert list(body) == ["model", "max_tokens", "tools", "system", "messages"]
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), "strict alternation"
    uses: list[str] = []
    for m in messages:
        for block in m["content"]:
            assert block["type"] != "text" or block["text"].strip(), "no empty text blocks"
        kinds = [b["type"] for b in m["content"]]
        if "tool_result" in kinds:
            assert kinds[: kinds.count("tool_result")] == ["tool_result"] * kinds.count("tool_result"), "tool_result first"
            assert sorted(b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result") == sorted(uses)
            uses = []
        uses += [b["id"] for b in m["content"] if b["type"] == "tool_use"]
    breakpoints = [b for m in messages for b in m["content"] if "cache_control" in b]
    breakpoints += [b for b in body["system"] if "cache_control" in b]
    assert 1 <= len(breakpoints) <= 4
    assert "cache_control" in body["system"][-1]
    trunk_block = messages[0]["content"][0]
    assert trunk_block["text"].startswith("# Task contract")
    assert "cache_control" in trunk_block, "the trunk's own block ends the trunk's cached prefix"
    assert "cache_control" in messages[-1]["content"][-1]


def test_anthropic_trunk_breakpoint_stays_on_the_trunk_when_a_user_turn_joins_it(client: TestClient) -> None:
    """A leaf that opens with a user message shares messages[0] with the trunk (strict
    alternation); the breakpoint must still end the trunk, where the manifest predicts it."""
    sid = new_session(client)
    post(client, sid, {"event_id": "u0", "kind": "message", "role": "user", "content": "Please fix the bug."},
         {"event_id": "s0", "kind": "step", "text": "Read the failing test."})
    out = client.get(f"/v1/sessions/{sid}/request?format=anthropic").json()
    first = out["request"]["messages"][0]
    assert len(out["request"]["messages"]) == 1 and len(first["content"]) == 3
    assert [("cache_control" in b) for b in first["content"]] == [True, False, True]
    breakpoints = out["manifest"]["cache"]["breakpoints"]
    trunk_end = out["manifest"]["tokens"]["by_zone"]["root"] + out["manifest"]["tokens"]["by_zone"]["trunk"]
    assert trunk_end in breakpoints and out["manifest"]["tokens"]["total"] in breakpoints


def test_tokens_format_and_identity(client: TestClient) -> None:
    sid = busy_session(client)
    a = client.get(f"/v1/sessions/{sid}/request?format=tokens")
    b = client.get(f"/v1/sessions/{sid}/request?format=tokens")
    assert a.content.split(b'"manifest"')[0] == b.content.split(b'"manifest"')[0]
    body, manifest = a.json()["request"], a.json()["manifest"]
    assert len(body["prompt_token_ids"]) == manifest["tokens"]["total"]
    assert body["prompt"].startswith("<|im_start|>system\n")
    assert manifest["cache"]["extends_previous"] is False  # first tokens request of the session
    assert b.json()["manifest"]["cache"]["extends_previous"] is True
    assert b.json()["manifest"]["cache"]["predicted_cached_tokens"] == (manifest["tokens"]["total"] - 1) // 16 * 16


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "tokens"])
def test_new_event_extends_previous_request(client: TestClient, fmt: str) -> None:
    sid = new_session(client)
    post(client, sid, assistant("a1", "c1"), result("r1", "c1", "one\n"))
    first = client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()["manifest"]
    post(client, sid, assistant("a2", "c2"), result("r2", "c2", "two\n"))
    second = client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()["manifest"]
    cache = second["cache"]
    assert cache["previous_tokens"] == first["tokens"]["total"]
    assert cache["extends_previous"] is True, cache
    if fmt == "anthropic":
        assert cache["predicted_cached_tokens"] in (0, *cache["breakpoints"])  # below 1024 tokens: nothing cached
    else:
        assert cache["predicted_cached_tokens"] >= first["tokens"]["total"] - 16
    # a step is placed last in the leaf: the next event lands before it and the manifest says so
    post(client, sid, {"event_id": "s1", "kind": "step", "text": "Now write the test."})
    client.get(f"/v1/sessions/{sid}/request?format={fmt}")
    post(client, sid, assistant("a3", "c3"), result("r3", "c3", "three\n"))
    moved = client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()["manifest"]["cache"]
    assert moved["first_divergence"]["zone"] == "leaf"
    assert "step" in moved["first_divergence"]["reason"]


OPENAI_REPLY = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}]}


@pytest.mark.parametrize("profile", ["qwen3", "qwen3-nothink", "mistral-tekken"])
def test_openai_sdk_sends_provider_rule_bodies(client: TestClient, profile: str) -> None:
    """README "Provider rules": a 44-character call id (mapped), arguments that are not an
    object (wrapped), a final assistant text (trimmed; ``prefix`` for mistral-tekken) and
    the profile's ``chat_template_kwargs``, which the SDK sends through ``extra_body``."""
    from openai import OpenAI

    from tests.api.test_provider_rules import LONG_ID, call, output, said, session_with

    sid = session_with(client, profile, call("a1", LONG_ID, '"ls"'), output("r1", LONG_ID, "a.py\n"),
                       said("a2", "I listed the files. \n"))
    body = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]
    http, seen = capture(OPENAI_REPLY)
    known = {k: v for k, v in body.items() if k != "chat_template_kwargs"}
    extra = {"chat_template_kwargs": body["chat_template_kwargs"]} if "chat_template_kwargs" in body else None
    OpenAI(api_key="test", base_url="http://llm.invalid/v1", http_client=http).chat.completions.create(
        **known, extra_body=extra)
    assert seen == [body]
    assert ("chat_template_kwargs" in body) == (profile == "qwen3-nothink")
    calls = [c for m in body["messages"] for c in m.get("tool_calls") or []]
    assert len(calls[0]["id"]) <= 40 and json.loads(calls[0]["function"]["arguments"]) == {"arguments": '"ls"'}
    assert body["messages"][-1]["content"] == "I listed the files."


def test_anthropic_sdk_sends_a_trimmed_final_assistant_turn(client: TestClient) -> None:
    from anthropic import Anthropic

    from tests.api.test_provider_rules import ENDS_ON_ASSISTANT, session_with

    body = client.get(f"/v1/sessions/{session_with(client, 'qwen3', *ENDS_ON_ASSISTANT)}/request?format=anthropic"
                      ).json()["request"]
    http, seen = capture({"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                          "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                          "usage": {"input_tokens": 1, "output_tokens": 1}})
    Anthropic(api_key="test", base_url="http://llm.invalid", http_client=http).messages.create(**body)
    assert seen == [body]
    assert body["messages"][-1]["content"][-1]["text"] == "I listed the files."
