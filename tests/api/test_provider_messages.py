"""POST /v1/sessions/{id}/messages (issue 14 item 1): OpenAI and Anthropic messages exactly
as the official SDKs return them, mapped to events; idempotent by position; round trip
through GET /request modulo the documented transforms (README "Provider messages").

Peer faults turned into tests (their kind, not their code):
* mlx-openai-server#205: an assistant message with ``content: null`` and tool calls was
  dropped, orphaning its tool messages -> the call and both results come back paired.
* vercel/ai#14758, #13505: ``content: ""`` beside tool calls became an empty text block
  that Bedrock / Anthropic refuse -> no empty text block in the anthropic body.
* anthropic-sdk-python#1598, mnfst/llm-gateway#1658, any-llm#1312: thinking blocks
  dropped, merged or re-serialized on replay ("Invalid signature in thinking block") ->
  every thinking / redacted_thinking block comes back byte for byte, in order, first.
* openclaw#92201: a signed thinking block with empty thinking text is normal -> accepted.
* agentscope#1892, kosong#45: parallel tool results split into several user messages ->
  one user message holding both tool_result blocks first.
* langchain#39370, ongrid#400: ``reasoning_content`` dropped from stored history -> kept
  in the event (and sent back under a profile that renders reasoning).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.framing import unframe
from tests.api.test_api import assert_problem, new_session
from tests.api.test_wire_sdks import capture

SYSTEM = "You are a careful engineer."


def post_messages(client: TestClient, sid: str, messages: list[Any], *, fmt: str = "openai",
                  expect: int = 200, **extra: Any) -> dict[str, Any]:
    r = client.post(f"/v1/sessions/{sid}/messages?format={fmt}", json={"messages": messages} | extra)
    assert r.status_code == expect, r.text
    return dict(r.json())


def served(client: TestClient, sid: str, fmt: str) -> dict[str, Any]:
    r = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
    assert r.status_code == 200, r.text
    return dict(r.json())


# --- OpenAI -----------------------------------------------------------------------------

def openai_history() -> list[Any]:
    """A tool loop as an agent keeps it: the SDK's assistant messages dumped (every field,
    None included), its own dicts for the rest."""
    from openai.types.chat import ChatCompletionMessage

    turn1 = ChatCompletionMessage.model_validate({
        "role": "assistant", "content": None, "reasoning_content": "Two reads will tell.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a.py"}'}},
        ]})
    turn2 = ChatCompletionMessage(role="assistant", content="The parser rejects empty input.")
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Make the parser accept empty input."},
        turn1.model_dump(),
        {"role": "tool", "tool_call_id": "call_a", "content": "a.py\nb.py\n"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "def parse(s):"},
                                                                 {"type": "text", "text": "    return s"}]},
        turn2.model_dump(),
        {"role": "user", "content": [{"type": "text", "text": "Fix it."}, {"type": "text", "text": "Keep the API."}]},
    ]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content)
    return str(content)


def openai_expected(messages: list[Any]) -> list[dict[str, Any]]:
    """What the leaf of the openai body holds for ``messages`` by the documented transforms:
    content null -> "", text parts joined with a newline, reasoning not sent (qwen3 does
    not render it), SDK bookkeeping fields (None) left out, system messages in the root."""
    out = []
    for m in messages:
        if m["role"] in ("system", "developer"):
            continue
        if m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": _text(m["content"])})
        elif m["role"] == "user":
            out.append({"role": "user", "content": _text(m["content"])})
        else:
            e: dict[str, Any] = {"role": "assistant", "content": _text(m["content"])}
            if m.get("tool_calls"):
                e["tool_calls"] = [{"id": c["id"], "type": "function", "function": dict(c["function"])}
                                   for c in m["tool_calls"]]
            out.append(e)
    return out


def openai_leaf(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaf of an openai body with each tool message's frame removed."""
    leaf = copy.deepcopy(body["messages"][2:])
    for m in leaf:
        if m["role"] == "tool":
            m["content"] = unframe(m["content"])
    return leaf


def test_openai_sdk_messages_round_trip(client: TestClient) -> None:
    sid = new_session(client, system="")
    history = openai_history()
    out = post_messages(client, sid, history)
    assert [(m["position"], m["status"], m["event_ids"]) for m in out["messages"]] == [
        (0, "created", []), (1, "created", ["msg:1"]), (2, "created", ["msg:2"]), (3, "created", ["msg:3"]),
        (4, "created", ["msg:4"]), (5, "created", ["msg:5"]), (6, "created", ["msg:6"])]
    assert out["messages"][0]["instructions"] is True
    assert out["last_seq"] == 6 and out["next_position"] == 7
    body = served(client, sid, "openai")["request"]
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}  # the system message: the root
    assert openai_leaf(body) == openai_expected(history)
    # the reasoning is kept in the event log (behind the message's handle), not sent to qwen3
    events = client.get(f"/v1/sessions/{sid}").json()
    assert events["system"] == SYSTEM and events["last_seq"] == 6
    # the official SDK sends that body unchanged
    from openai import OpenAI
    http, seen = capture({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": "ok"}}]})
    OpenAI(api_key="test", base_url="http://llm.invalid/v1", http_client=http).chat.completions.create(**body)
    assert seen == [body]


def test_openai_parallel_results_come_back_as_one_anthropic_user_message(client: TestClient) -> None:
    """agentscope#1892 / kosong#45 (parallel results split) and vercel/ai#14758 (an empty
    text block beside tool calls): the content-null turn with two calls is one assistant
    message of two tool_use blocks, answered by one user message of two tool_result blocks."""
    sid = new_session(client, system="")
    post_messages(client, sid, openai_history()[:5])
    messages = served(client, sid, "anthropic")["request"]["messages"]
    assert messages[1]["role"] == "assistant"
    assert [b["type"] for b in messages[1]["content"]] == ["tool_use", "tool_use"]
    assert [b["input"] for b in messages[1]["content"]] == [{"command": "ls"}, {"command": "cat a.py"}]
    assert messages[2]["role"] == "user"
    assert [(b["type"], b["tool_use_id"]) for b in messages[2]["content"]] == [("tool_result", "call_a"),
                                                                             ("tool_result", "call_b")]
    assert unframe(messages[2]["content"][1]["content"]) == "def parse(s):\n    return s"


def test_long_tool_call_id_is_mapped_on_call_and_result(client: TestClient) -> None:
    """Documented transform O1: an id over 40 characters is sent as call_ + 32 hex, on the
    call and its result alike."""
    long_id = "call_" + "x" * 60
    sid = new_session(client, system="")
    post_messages(client, sid, [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": long_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": long_id, "content": "ok"}])
    leaf = openai_leaf(served(client, sid, "openai")["request"])
    sent = leaf[1]["tool_calls"][0]["id"]
    assert sent.startswith("call_") and len(sent) == 37 and sent != long_id
    assert leaf[2]["tool_call_id"] == sent


def test_reposting_the_whole_history_is_a_noop(client: TestClient) -> None:
    sid = new_session(client, system="")
    history = openai_history()
    first = post_messages(client, sid, history[:4])
    assert first["last_seq"] == 3
    body1 = served(client, sid, "openai")["request"]
    again = post_messages(client, sid, history)  # the SDK pattern: the whole history every turn
    assert [m["status"] for m in again["messages"]] == ["duplicate"] * 4 + ["created"] * 3
    assert [m["seqs"] for m in again["messages"]] == [[], [1], [2], [3], [4], [5], [6]]
    assert again["last_seq"] == 6
    body2 = served(client, sid, "openai")["request"]
    third = post_messages(client, sid, history)
    assert [m["status"] for m in third["messages"]] == ["duplicate"] * 7 and third["last_seq"] == 6
    assert served(client, sid, "openai")["request"] == body2 != body1
    # only the new tail, by position: the same
    tail = post_messages(client, sid, history[5:], start=5)
    assert [m["status"] for m in tail["messages"]] == ["duplicate"] * 2


def test_sdk_bookkeeping_and_equivalent_shapes_are_equal(client: TestClient) -> None:
    """The same message dumped with and without its None fields, or with content as a
    string or as one text part, maps to the same events: a re-post is a no-op."""
    from openai.types.chat import ChatCompletionMessage

    sid = new_session(client, system="")
    reply = ChatCompletionMessage(role="assistant", content="Hello.")
    post_messages(client, sid, [{"role": "user", "content": "Hi."}, reply.model_dump()])
    out = post_messages(client, sid, [{"role": "user", "content": [{"type": "text", "text": "Hi."}]},
                                      reply.model_dump(exclude_none=True)])
    assert [m["status"] for m in out["messages"]] == ["duplicate", "duplicate"]


def test_changed_message_at_known_position_is_409_and_changes_nothing(client: TestClient) -> None:
    sid = new_session(client, system="")
    history = openai_history()
    post_messages(client, sid, history[:4])
    before = client.get(f"/v1/sessions/{sid}").json()
    changed = copy.deepcopy(history)
    changed[3]["content"] = "a.py\nb.py\nc.py\n"  # a tool output rewritten, with new messages after it
    r = client.post(f"/v1/sessions/{sid}/messages", json={"messages": changed})
    problem = assert_problem(r, 409)
    assert problem["title"] == "Message conflict" and problem["position"] == 3
    assert client.get(f"/v1/sessions/{sid}").json() == before
    changed = copy.deepcopy(history)
    changed[0]["content"] = "You are someone else."  # instructions at a known position
    assert assert_problem(client.post(f"/v1/sessions/{sid}/messages", json={"messages": changed}),
                          409)["position"] == 0
    assert client.get(f"/v1/sessions/{sid}").json() == before


BAD_OPENAI = [
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
     ["body", "messages", 0, "content", 0, "type"]),
    ([{"role": "function", "name": "bash", "content": "x"}], ["body", "messages", 0, "role"]),
    ([{"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": "{}"}}],
     ["body", "messages", 0, "function_call"]),
    ([{"role": "assistant", "content": None,
       "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "x", "input": "y"}}]}],
     ["body", "messages", 0, "tool_calls", 0, "type"]),
    ([{"role": "tool", "content": "orphan"}], ["body", "messages", 0, "tool_call_id"]),
    ([{"role": "user", "content": 7}], ["body", "messages", 0, "content"]),
    ([{"role": "user", "content": "   "}], ["body", "messages", 0]),  # L4: a user message needs text
    (["not a message"], ["body", "messages", 0]),
    ([{"role": "assistant", "content": "x", "tool_calls": [{"id": "c1", "type": "function",
                                                              "function": {"name": None, "arguments": "{}"}}]}],
     ["body", "messages", 0, "tool_calls", 0, "function", "name"]),
]


@pytest.mark.parametrize(("messages", "loc"), BAD_OPENAI)
def test_bad_openai_messages_are_422_and_store_nothing(client: TestClient, messages: list[Any],
                                                       loc: list[Any]) -> None:
    sid = new_session(client, system="")
    good = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]
    r = client.post(f"/v1/sessions/{sid}/messages", json={"messages": good + messages})
    problem = assert_problem(r, 422)
    assert problem["loc"][:3] == ["body", "messages", 2] and problem["loc"][3:] == loc[3:], problem
    state = client.get(f"/v1/sessions/{sid}").json()
    assert (state["last_seq"], state["system"]) == (0, "")
    # nothing was stored: the same positions are still new
    assert [m["status"] for m in post_messages(client, sid, good)["messages"]] == ["created", "created"]


def test_other_bad_posts_are_422(client: TestClient) -> None:
    sid = new_session(client, system="")
    ok = [{"role": "user", "content": "Hi."}]
    assert_problem(client.post(f"/v1/sessions/{sid}/messages?format=gemini", json={"messages": ok}), 422)
    gap = assert_problem(client.post(f"/v1/sessions/{sid}/messages", json={"messages": ok, "start": 3}), 422)
    assert gap["next_position"] == 0
    assert_problem(client.post(f"/v1/sessions/{sid}/messages", json={"messages": ok, "system": "x"}), 422)
    unknown = assert_problem(client.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        {"role": "tool", "tool_call_id": "nope", "content": "x"}]}), 422)
    assert unknown["call_id"] == "nope"
    control = assert_problem(client.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        {"role": "system", "content": "End turns with <|im_end|>."}, *ok]}), 422)
    assert control["title"] == "Control token in protected text"
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == 0
    assert_problem(client.post("/v1/sessions/" + "0" * 32 + "/messages", json={"messages": ok}), 404)


def test_system_and_developer_messages_map_to_instructions(client: TestClient) -> None:
    sid = new_session(client)  # created with SYSTEM
    post_messages(client, sid, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi."}])
    assert client.get(f"/v1/sessions/{sid}").json()["system"] == SYSTEM  # the same text: unchanged
    post_messages(client, sid, [{"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]}],
                  start=2)
    assert client.get(f"/v1/sessions/{sid}").json()["system"] == SYSTEM + "\n\nAnswer in French."
    body = served(client, sid, "openai")["request"]
    assert body["messages"][0] == {"role": "system", "content": SYSTEM + "\n\nAnswer in French."}
    assert served(client, sid, "anthropic")["request"]["system"][0]["text"] == SYSTEM + "\n\nAnswer in French."


def test_empty_assistant_message_is_dropped_not_an_empty_block(client: TestClient) -> None:
    sid = new_session(client, system="")
    post_messages(client, sid, [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": ""},
                                {"role": "user", "content": "Still there?"}])
    out = served(client, sid, "anthropic")
    blocks = [b for m in out["request"]["messages"] for b in m["content"]]
    assert all(b.get("text", "x").strip() for b in blocks if b["type"] == "text")
    assert {i["event_id"]: i["representation"] for i in out["manifest"]["items"]}["msg:1"] == "dropped"


# --- Anthropic --------------------------------------------------------------------------

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds" + "+/=" * 3


def anthropic_history() -> list[Any]:
    """A tool loop as an agent keeps it with the Anthropic SDK: ``{"role": "assistant",
    "content": response.content}`` of real SDK types, dumped."""
    from anthropic.types import (
        Message,
        RedactedThinkingBlock,
        TextBlock,
        ThinkingBlock,
        ToolUseBlock,
        Usage,
    )

    turn1 = Message(id="msg_1", type="message", role="assistant", model="claude-x", stop_reason="tool_use",
                    usage=Usage(input_tokens=10, output_tokens=5), content=[
                        ThinkingBlock(type="thinking", thinking="Two reads will tell.\n  ", signature=SIGNATURE),
                        RedactedThinkingBlock(type="redacted_thinking", data="ENCRYPTED\u00e9=="),
                        TextBlock(type="text", text="Reading both files."),
                        ToolUseBlock(type="tool_use", id="toolu_01A", name="bash", input={"command": "ls"}),
                        ToolUseBlock(type="tool_use", id="toolu_01B", name="bash",
                                     input={"command": "cat a.py", "n": [1, 2.5, None]}),
                    ])
    turn2 = Message(id="msg_2", type="message", role="assistant", model="claude-x", stop_reason="end_turn",
                    usage=Usage(input_tokens=10, output_tokens=5), content=[
                        ThinkingBlock(type="thinking", thinking="", signature=SIGNATURE[::-1]),  # openclaw#92201
                        TextBlock(type="text", text="The parser rejects empty input."),
                    ])
    return [
        {"role": "user", "content": "Make the parser accept empty input."},
        {"role": "assistant", "content": [b.model_dump() for b in turn1.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "a.py\nb.py\n"},
            {"type": "tool_result", "tool_use_id": "toolu_01B", "is_error": True,
             "content": [{"type": "text", "text": "cat: a.py: denied"}]},
            {"type": "text", "text": "Both done?"}]},
        turn2.model_dump(),  # a whole response object: its id, usage... are ignored
    ]


def anthropic_blocks(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(role, block) of an anthropic body's leaf: the trunk block and cache_control removed,
    tool results unframed."""
    out = []
    for i, m in enumerate(body["messages"]):
        for j, b in enumerate(m["content"]):
            if i == 0 and j == 0:
                continue  # the trunk
            b = {k: v for k, v in b.items() if k != "cache_control"}
            if b["type"] == "tool_result":
                b["content"] = unframe(b["content"])
            out.append((m["role"], b))
    return out


def anthropic_expected(messages: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The documented transforms: a string content is one text block, several text blocks of
    a message join with a newline (after the thinking blocks, before the tool_use blocks), a
    tool_result's text blocks join into its content string, SDK fields that are None
    (citations, caller) are left out."""
    out: list[tuple[str, dict[str, Any]]] = []
    for m in messages:
        blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        if m["role"] == "assistant":
            out += [("assistant", {k: v for k, v in b.items() if k in ("type", "thinking", "signature", "data")})
                    for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
            text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
            if text:
                out.append(("assistant", {"type": "text", "text": text}))
            out += [("assistant", {"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]})
                    for b in blocks if b["type"] == "tool_use"]
        else:
            for b in blocks:
                if b["type"] == "tool_result":
                    e = {"type": "tool_result", "tool_use_id": b["tool_use_id"], "content": _text(b["content"])}
                    if b.get("is_error"):  # the block's flag, and the run-fact line every format shows
                        e["is_error"] = True
                        e["content"] = "is_error: true\n" + e["content"]
                    out.append(("user", e))
            text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
            if text:
                out.append(("user", {"type": "text", "text": text}))
    return out


def test_anthropic_sdk_messages_round_trip_with_thinking(client: TestClient) -> None:
    sid = new_session(client, system="")
    history = anthropic_history()
    out = post_messages(client, sid, history, fmt="anthropic", system=[{"type": "text", "text": SYSTEM}])
    assert [(m["position"], m["event_ids"]) for m in out["messages"]] == [
        (-1, []), (0, ["msg:0"]), (1, ["msg:1"]), (2, ["msg:2", "msg:2:1", "msg:2:2"]), (3, ["msg:3"])]
    body = served(client, sid, "anthropic")["request"]
    assert body["system"][0]["text"] == SYSTEM
    assert anthropic_blocks(body) == anthropic_expected(history)
    # byte for byte: the thinking blocks' JSON is the posted JSON, and each message starts with them
    raw = client.get(f"/v1/sessions/{sid}/request?format=anthropic").text
    for block in history[1]["content"][:2] + history[3]["content"][:1]:
        posted = {k: block[k] for k in ("type", "thinking", "signature", "data") if k in block}
        assert json.dumps(posted, ensure_ascii=False, separators=(",", ":")) in raw
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    assert [b["type"] for b in assistants[0]["content"]][:2] == ["thinking", "redacted_thinking"]
    assert assistants[1]["content"][0] == {"type": "thinking", "thinking": "", "signature": SIGNATURE[::-1]}
    # the official SDK sends the body unchanged
    from anthropic import Anthropic
    http, seen = capture({"id": "m", "type": "message", "role": "assistant", "model": body["model"],
                          "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                          "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}})
    Anthropic(api_key="test", base_url="http://llm.invalid", http_client=http).messages.create(**body)
    assert seen == [body]
    # re-posted as the SDK pattern does (system and all): nothing new
    again = post_messages(client, sid, history, fmt="anthropic", system=[{"type": "text", "text": SYSTEM}])
    assert {m["status"] for m in again["messages"]} == {"duplicate"} and again["last_seq"] == out["last_seq"]


def test_anthropic_history_in_the_openai_format(client: TestClient) -> None:
    """The same conversation asked for in the openai format: tool_use input as JSON
    arguments, the thinking left out (qwen3 does not render reasoning), is_error as the run-fact
    line ``is_error: true`` (as ``exit_code:`` is one): a failure shows in every format (the
    peer fault sgl-project/sglang#32610: an Anthropic error result sent on as a success)."""
    sid = new_session(client, system="")
    post_messages(client, sid, anthropic_history(), fmt="anthropic")
    leaf = openai_leaf(served(client, sid, "openai")["request"])
    assert leaf[1] == {"role": "assistant", "content": "Reading both files.", "tool_calls": [
        {"id": "toolu_01A", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"id": "toolu_01B", "type": "function",
         "function": {"name": "bash", "arguments": '{"command": "cat a.py", "n": [1, 2.5, null]}'}}]}
    assert [m["role"] for m in leaf] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert leaf[3]["content"] == "is_error: true\ncat: a.py: denied"
    assert leaf[2]["content"].startswith("is_error") is False, "a result not posted as an error has no such line"
    served_tokens = served(client, sid, "tokens")
    assert "is_error: true\ncat: a.py: denied" in served_tokens["request"]["prompt"]
    assert len(served_tokens["request"]["prompt_token_ids"]) == served_tokens["manifest"]["tokens"]["total"], \
        "counted exactly, the line included"


def test_changed_thinking_signature_is_409(client: TestClient) -> None:
    sid = new_session(client, system="")
    history = anthropic_history()
    post_messages(client, sid, history, fmt="anthropic")
    changed = copy.deepcopy(history)
    changed[1]["content"][0]["signature"] = SIGNATURE + "x"
    assert assert_problem(client.post(f"/v1/sessions/{sid}/messages?format=anthropic",
                                      json={"messages": changed}), 409)["position"] == 1


BAD_ANTHROPIC = [
    [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                 "data": "AA=="}}]}],
    [{"role": "system", "content": "x"}],
    [{"role": "assistant", "content": [{"type": "thinking", "thinking": "no signature"}]}],
    [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": "ls"}]}],
    [{"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}]}],
    [{"role": "user", "content": []}],
    [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": "yes", "content": "x"}]}],
]


@pytest.mark.parametrize("messages", BAD_ANTHROPIC)
def test_bad_anthropic_messages_are_422_and_store_nothing(client: TestClient, messages: list[Any]) -> None:
    sid = new_session(client, system="")
    good = [{"role": "user", "content": "Hi."}]
    r = client.post(f"/v1/sessions/{sid}/messages?format=anthropic", json={"messages": good + messages,
                                                                            "system": "Be brief."})
    assert assert_problem(r, 422)["loc"][:3] == ["body", "messages", 1]
    state = client.get(f"/v1/sessions/{sid}").json()
    assert (state["last_seq"], state["system"]) == (0, "")


# --- the documented transforms: neutralisation and redaction, both formats ---------------

@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_neutralisation_and_redaction_of_posted_messages(client: TestClient, fmt: str) -> None:
    """A control token the user wrote is neutralised (U+200B after its first character) and
    a secret in a tool output redacted, in either format; the handles keep the raw bytes."""
    from tests.secret_corpus import GH_CLASSIC

    output = f"token={GH_CLASSIC}\n"
    sid = new_session(client, system="")
    if fmt == "openai":
        history: list[Any] = [
            {"role": "user", "content": "Why does <|im_end|> appear?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_s", "type": "function", "function": {"name": "bash", "arguments": '{"command": "env"}'}}]},
            {"role": "tool", "tool_call_id": "call_s", "content": output}]
    else:
        history = [
            {"role": "user", "content": "Why does <|im_end|> appear?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_s", "name": "bash",
                                               "input": {"command": "env"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_s", "content": output}]}]
    post_messages(client, sid, history, fmt=fmt)
    out = served(client, sid, fmt)
    text = json.dumps(out["request"], ensure_ascii=False)
    assert "<\u200b|im_end|>" in text and "<|im_end|>" not in text
    assert GH_CLASSIC not in text and "[REDACTED:" in text
    items = {i["event_id"]: i for i in out["manifest"]["items"]}
    assert [t["name"] for t in items["msg:0"]["transforms"]] == ["neutralise_control_tokens"]
    assert "redact_secrets" in [t["name"] for t in items["msg:2"]["transforms"]]
    assert client.get(f"/v1/sessions/{sid}/handles/{items['msg:2']['handle']}").text == output
