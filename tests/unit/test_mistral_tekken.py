"""The ``mistral-tekken`` profile: exact ids, per-message segments, tool-call ids, layout warnings.

Every id sequence is compared with mistral-common's own
``MistralTokenizer.encode_chat_completion`` on a ``ChatCompletionRequest`` built
here, independently of ``app.tokenizers.mistral.MistralTekken.to_mistral``, on
conversations cut from the real mini-swe-agent traces.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from functools import cache
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from mistral_common.exceptions import InvalidAssistantMessageException
from mistral_common.protocol.instruct.messages import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from app.tokenizers.mistral import (
    SEGMENT_FRAMING,
    SEGMENT_TOOLS,
    TOOL_BRIDGE,
    MistralTekken,
    default_tekken_path,
    load_tekken,
    map_tool_call_ids,
)
from tests.traces import TRACES_DIR

CHAT_TRACE = "pvlib__pvlib-python-1072__chat"  # assistant turns carry text + tool calls
REASONER_TRACE = "pvlib__pvlib-python-1072__reasoner"  # assistant content is "" (reasoning kept aside)
ID_RE = re.compile(r"^[a-zA-Z0-9]{9}$")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Execute a bash command in the task's shell and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    }
]


# --------------------------------------------------------------------------- traces


@cache
def _largest_trace() -> str:
    """The trace with the most rendered messages (pylint-dev__astroid-1333__chat: ~67k tokens)."""
    names = sorted(p.name.removesuffix(".traj.json") for p in TRACES_DIR.glob("*.traj.json"))
    if not names:
        pytest.skip(f"no traces in {TRACES_DIR}")
    return max(names, key=lambda name: len(openai_messages(name)))


@cache
def openai_messages(name: str) -> tuple[dict[str, Any], ...]:
    """A mini-swe-agent trajectory as OpenAI chat-completions messages (the ``exit`` record skipped)."""
    path = TRACES_DIR / f"{name}.traj.json"
    if not path.is_file():
        pytest.skip(f"trace {path} not available")
    raw = json.loads(path.read_text())["messages"]
    out: list[dict[str, Any]] = []
    for m in raw:
        role = m["role"]
        if role in ("system", "user"):
            out.append({"role": role, "content": m["content"]})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
                }
                for c in m.get("tool_calls") or []
            ]
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        elif role == "exit":
            continue
        else:
            raise AssertionError(f"unexpected role {role}")
    return tuple(out)


def cuts(messages: tuple[dict[str, Any], ...]) -> dict[str, int]:
    """Prefix lengths ending at the trunk user message or at a tool message."""
    tool_ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "tool"]
    return {
        "trunk": 2,
        "first_tool": tool_ends[0],
        "middle_tool": tool_ends[len(tool_ends) // 2],
        "last_tool": tool_ends[-1],
    }


def all_ids(messages: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for m in messages:
        ids.extend(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool":
            ids.append(m["tool_call_id"])
    return ids


# --------------------------------------------------------------------------- independent reference


def reference_request(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The request mistral-common should see, built without ``MistralTekken``.

    Documented rules applied here: tool-call ids go through ``map_tool_call_ids``; an
    assistant message with text and tool calls keeps only the calls; a user message right
    after a tool message gets the bridge assistant text before it (rule M4).
    """
    id_map = map_tool_call_ids(all_ids(messages))
    out: list[Any] = []
    for k, m in enumerate(messages):
        if m["role"] == "system":
            out.append(SystemMessage(content=m["content"]))
        elif m["role"] == "user":
            if k > 0 and messages[k - 1]["role"] == "tool":
                out.append(AssistantMessage(content=TOOL_BRIDGE))
            out.append(UserMessage(content=m["content"]))
        elif m["role"] == "assistant":
            calls = [
                ToolCall(
                    id=id_map[c["id"]],
                    function=FunctionCall(name=c["function"]["name"], arguments=c["function"]["arguments"]),
                )
                for c in m.get("tool_calls") or []
            ]
            out.append(AssistantMessage(content=None if calls else m["content"], tool_calls=calls or None))
        else:
            out.append(ToolMessage(content=m["content"], tool_call_id=id_map[m["tool_call_id"]]))
    return ChatCompletionRequest(messages=out, tools=[Tool(function=Function(**t["function"])) for t in tools])


def reference_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Same rules, as OpenAI dicts for ``MistralCommonBackend.apply_chat_template``."""
    id_map = map_tool_call_ids(all_ids(messages))
    out: list[dict[str, Any]] = []
    for k, m in enumerate(messages):
        m = dict(m)
        if m["role"] == "user" and k > 0 and messages[k - 1]["role"] == "tool":
            out.append({"role": "assistant", "content": TOOL_BRIDGE})
        if m.get("tool_calls"):
            m["content"] = None
            m["tool_calls"] = [{**c, "id": id_map[c["id"]]} for c in m["tool_calls"]]
        if m["role"] == "tool":
            m["tool_call_id"] = id_map[m["tool_call_id"]]
        out.append(m)
    return out


@pytest.fixture(scope="module")
def tok() -> MistralTekken:
    return load_tekken()


@pytest.fixture(scope="module")
def reference() -> MistralTokenizer:
    """A separate mistral-common tokenizer on the same file: the ground truth."""
    return MistralTokenizer.from_file(default_tekken_path())


def joined(pieces: list[tuple[int, list[int]]]) -> list[int]:
    return [t for _, ids in pieces for t in ids]


def text(reference: MistralTokenizer, ids: list[int]) -> str:
    return reference.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP)


def drop_warnings(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "text dropped" in w]


# --------------------------------------------------------------------------- loading


def test_load_default_path_and_fingerprint(tok: MistralTekken) -> None:
    assert os.path.isabs(tok.path) and tok.path.endswith(os.path.join("mistral_common", "data", "tekken_240718.json"))
    assert tok.fingerprint == hashlib.sha256(Path(tok.path).read_bytes()).hexdigest()[:16]
    assert tok.version == "v3"


# --------------------------------------------------------------------------- exact ids on real traces


@pytest.mark.parametrize("cut", ["trunk", "first_tool", "middle_tool", "last_tool"])
@pytest.mark.parametrize("trace", [CHAT_TRACE, REASONER_TRACE, "largest"])
def test_encode_and_segments_match_encode_chat_completion(
    tok: MistralTekken, reference: MistralTokenizer, trace: str, cut: str
) -> None:
    name = _largest_trace() if trace == "largest" else trace
    full = openai_messages(name)
    k = cuts(full)[cut]
    messages = [dict(m) for m in full[:k]]

    expected = reference.encode_chat_completion(reference_request(messages, TOOLS)).tokens
    ids = tok.encode(messages, TOOLS)
    assert ids == expected

    pieces = tok.segments(messages, TOOLS)
    assert joined(pieces) == ids
    assert tok.count(messages, TOOLS) == len(ids)

    # <s> first; the tools block right before the (only) user message; then one piece per
    # non-system message, in order (the system prompt lives inside the user piece under v3).
    owners = [o for o, _ in pieces]
    assert pieces[0] == (SEGMENT_FRAMING, [reference.instruct_tokenizer.tokenizer.bos_id])
    assert owners[1] == SEGMENT_TOOLS
    assert owners[2:] == list(range(1, k))
    assert all(ids for _, ids in pieces)

    _, warnings = tok.to_mistral(messages, TOOLS)
    both = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m["content"] and m.get("tool_calls")]
    assert [int(w.split()[2].rstrip(":")) for w in drop_warnings(warnings)] == both
    assert not [w for w in warnings if w.startswith("v3 layout")]  # one user message: nothing moves
    if trace == CHAT_TRACE and cut != "trunk":
        assert both  # the decision is exercised on real data


def test_apply_chat_template_agrees(tok: MistralTekken) -> None:
    full = openai_messages(CHAT_TRACE)
    messages = [dict(m) for m in full[: cuts(full)["middle_tool"]]]
    ids = tok.encode(messages, TOOLS)
    via_backend = tok.backend.apply_chat_template(reference_openai(messages), tools=TOOLS, return_dict=False)
    assert via_backend == ids
    with_prompt = tok.backend.apply_chat_template(
        reference_openai(messages), tools=TOOLS, add_generation_prompt=True, return_dict=False
    )
    assert with_prompt == ids  # the request already ends at the generation prompt


def test_single_user_layout_is_prefix_stable(tok: MistralTekken) -> None:
    full = openai_messages(CHAT_TRACE)
    ends = [i + 1 for i, m in enumerate(full) if m["role"] == "tool"][:6]
    previous = tok.encode([dict(m) for m in full[:2]], TOOLS)
    for k in ends:
        current = tok.encode([dict(m) for m in full[:k]], TOOLS)
        assert current[: len(previous)] == previous
        previous = current


# --------------------------------------------------------------------------- v3 layout


def test_later_user_message_moves_system_prompt_and_tools(tok: MistralTekken, reference: MistralTokenizer) -> None:
    full = openai_messages(CHAT_TRACE)
    base = [dict(m) for m in full[: cuts(full)["first_tool"]]]
    nxt = {"role": "user", "content": "Next step: run the failing test and report the traceback."}
    messages = [*base, nxt]
    last = len(messages) - 1

    ids = tok.encode(messages, TOOLS)
    assert ids == reference.encode_chat_completion(reference_request(messages, TOOLS)).tokens
    pieces = tok.segments(messages, TOOLS)
    assert joined(pieces) == ids

    system, trunk = messages[0]["content"], messages[1]["content"]
    by_owner = dict(pieces)
    # the trunk is rendered bare; the last user message carries system prompt, tools right before it
    assert text(reference, by_owner[1]) == f"[INST]{trunk}[/INST]"
    assert text(reference, by_owner[last]) == f"[INST]{system}\n\n{nxt['content']}[/INST]"
    owners = [o for o, _ in pieces]
    assert owners[-2:] == [SEGMENT_TOOLS, last]
    assert text(reference, by_owner[SEGMENT_TOOLS]).startswith("[AVAILABLE_TOOLS]")

    # position dependence: the trunk piece differs from its piece when it is the last user message
    alone = dict(tok.segments(base, TOOLS))
    assert alone[1] != by_owner[1]
    # ... and the two requests share only <s>
    before = tok.encode(base, TOOLS)
    common = next(i for i, (a, b) in enumerate(zip(before, ids, strict=False)) if a != b)
    assert common == 1

    _, warnings = tok.to_mistral(messages, TOOLS)
    layout = [w for w in warnings if w.startswith("v3 layout")]
    assert len(layout) == 1
    assert f"message {last} is the last user message" in layout[0]
    assert "system prompt (message 0)" in layout[0] and "[AVAILABLE_TOOLS]" in layout[0]
    assert "user message(s) 1 " in layout[0]


def test_consecutive_user_messages_are_merged(tok: MistralTekken, reference: MistralTokenizer) -> None:
    full = openai_messages(REASONER_TRACE)
    messages = [dict(full[0]), dict(full[1]), {"role": "user", "content": "Start with the tests."}]
    ids = tok.encode(messages, TOOLS)
    assert ids == reference.encode_chat_completion(reference_request(messages, TOOLS)).tokens
    pieces = tok.segments(messages, TOOLS)
    assert joined(pieces) == ids
    assert [o for o, _ in pieces] == [SEGMENT_FRAMING, SEGMENT_TOOLS, 1]
    assert text(reference, pieces[-1][1]) == (
        f"[INST]{full[0]['content']}\n\n{full[1]['content']}\n\nStart with the tests.[/INST]"
    )
    _, warnings = tok.to_mistral(messages, TOOLS)
    assert any("messages [1, 2]: consecutive user messages are merged" in w for w in warnings)
    assert not [w for w in warnings if w.startswith("v3 layout")]


def test_assistant_text_message_and_no_tools(tok: MistralTekken, reference: MistralTokenizer) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Task: say hi."},
        {"role": "assistant", "content": "Hi.  "},
        {"role": "user", "content": "Again."},
    ]
    ids = tok.encode(messages, [])
    assert ids == reference.encode_chat_completion(reference_request(messages, [])).tokens
    pieces = tok.segments(messages, [])
    assert joined(pieces) == ids
    assert [o for o, _ in pieces] == [SEGMENT_FRAMING, 1, 2, 3]
    assert text(reference, pieces[2][1]) == "Hi.</s>"  # v3 strips trailing spaces
    _, warnings = tok.to_mistral(messages, [])
    assert len(warnings) == 1 and "prepended" in warnings[0] and "AVAILABLE_TOOLS" not in warnings[0]


# --------------------------------------------------------------------------- content + tool calls


def test_text_with_tool_calls_has_no_faithful_rendering(reference: MistralTokenizer) -> None:
    """The evidence behind dropping the text (module docstring)."""
    call = ToolCall(id="abcDEF123", function=FunctionCall(name="bash", arguments='{"command": "ls"}'))
    head = [SystemMessage(content="S"), UserMessage(content="T")]
    result = ToolMessage(content="out", tool_call_id="abcDEF123")
    with pytest.raises(InvalidAssistantMessageException):
        reference.encode_chat_completion(
            ChatCompletionRequest(messages=[*head, AssistantMessage(content="why", tool_calls=[call]), result])
        )
    # split into text + calls: validated, then merged back by the normalizer and rejected
    with pytest.raises(ValueError, match="Cannot have tool calls and content"):
        reference.encode_chat_completion(
            ChatCompletionRequest(
                messages=[*head, AssistantMessage(content="why"), AssistantMessage(tool_calls=[call]), result]
            )
        )
    # the other shipped tekken file is the same v3 tokenizer
    other = MistralTokenizer.from_file(default_tekken_path("tekken_240911.json"))
    assert other.instruct_tokenizer.tokenizer.version.value == "v3"


def test_text_with_tool_calls_is_dropped_with_warning(tok: MistralTekken, reference: MistralTokenizer) -> None:
    full = openai_messages(CHAT_TRACE)
    k = cuts(full)["first_tool"]
    messages = [dict(m) for m in full[:k]]
    assert messages[2]["content"] and messages[2]["tool_calls"]
    request, warnings = tok.to_mistral(messages, TOOLS)
    assert request.messages[2].content is None and request.messages[2].tool_calls
    assert drop_warnings(warnings)[0].startswith("assistant message 2: text dropped")
    rendered = text(reference, tok.encode(messages, TOOLS))
    assert messages[2]["content"] not in rendered
    without_text = [*messages[:2], {**messages[2], "content": ""}, *messages[3:]]
    assert tok.encode(without_text, TOOLS) == tok.encode(messages, TOOLS)
    assert not drop_warnings(tok.to_mistral(without_text, TOOLS)[1])


def test_text_message_merged_into_tool_call_run_is_dropped(
    tok: MistralTekken, reference: MistralTokenizer
) -> None:
    full = openai_messages(REASONER_TRACE)
    head = [dict(m) for m in full[:2]]
    call_msg, result = dict(full[2]), dict(full[3])
    messages = [*head, {"role": "assistant", "content": "Let me look around."}, call_msg, result]
    ids = tok.encode(messages, TOOLS)
    expected = reference.encode_chat_completion(reference_request([*head, call_msg, result], TOOLS)).tokens
    assert ids == expected
    pieces = tok.segments(messages, TOOLS)
    assert joined(pieces) == ids
    assert [o for o, _ in pieces] == [SEGMENT_FRAMING, SEGMENT_TOOLS, 1, 3, 4]
    _, warnings = tok.to_mistral(messages, TOOLS)
    assert any(w.startswith("assistant message 2: dropped") for w in warnings)


# --------------------------------------------------------------------------- tool-call ids


def test_tool_call_ids_are_deterministic_alnum9_and_collision_free(
    tok: MistralTekken, reference: MistralTokenizer
) -> None:
    every: list[str] = []
    for path in sorted(TRACES_DIR.glob("*.traj.json")):
        every.extend(all_ids(list(openai_messages(path.name.removesuffix(".traj.json")))))
    assert len(set(every)) > 1000
    first = map_tool_call_ids(every)
    assert first == map_tool_call_ids(every)
    assert first == map_tool_call_ids(list(reversed(every)))  # no collision, so order does not matter
    assert all(ID_RE.match(v) for v in first.values())
    assert len(set(first.values())) == len(first)

    # ids that are already valid are kept; a hash that would collide with one is re-drawn
    clash = map_tool_call_ids(["call_00_x"])["call_00_x"]
    forced = map_tool_call_ids(["call_00_x", clash])
    assert forced[clash] == clash and forced["call_00_x"] != clash and ID_RE.match(forced["call_00_x"])

    # the rendered request carries the mapped ids, consistently on calls and results
    full = openai_messages(CHAT_TRACE)
    messages = [dict(m) for m in full[: cuts(full)["middle_tool"]]]
    rendered = text(reference, tok.encode(messages, TOOLS))
    mapped = map_tool_call_ids(all_ids(messages))
    for original, new in mapped.items():
        assert original not in rendered
        assert rendered.count(f'"id": "{new}"') == 1 and rendered.count(f'"call_id": "{new}"') == 1


# --------------------------------------------------------------------------- segment cache


def test_segment_cache_is_exact(tok: MistralTekken) -> None:
    full = openai_messages(CHAT_TRACE)
    ends = cuts(full)
    cache: dict[str, list[int]] = {}
    short = [dict(m) for m in full[: ends["middle_tool"]]]
    long = [dict(m) for m in full[: ends["last_tool"]]]
    assert tok.segments(short, TOOLS, cache=cache) == tok.segments(short, TOOLS)
    filled = len(cache)
    assert tok.segments(short, TOOLS, cache=cache) == tok.segments(short, TOOLS)
    assert len(cache) == filled  # all hits
    assert joined(tok.segments(long, TOOLS, cache=cache)) == tok.encode(long, TOOLS)
    assert len(cache) == filled + (len(long) - len(short))  # only the new messages were encoded
    # the trunk's key depends on its position: appending a user message is a miss, and exact
    later = [*short, {"role": "user", "content": "continue"}]
    assert joined(tok.segments(later, TOOLS, cache=cache)) == tok.encode(later, TOOLS)


# --------------------------------------------------------------------------- timing


def test_timing_largest_prefix_of_largest_trace(tok: MistralTekken, capsys: pytest.CaptureFixture[str]) -> None:
    name = _largest_trace()
    full = openai_messages(name)
    messages = [dict(m) for m in full[: cuts(full)["last_tool"]]]

    def best(fn: Any, repeat: int = 3) -> float:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    n = len(tok.encode(messages, TOOLS))
    t_encode = best(lambda: tok.encode(messages, TOOLS))
    t_segments = best(lambda: tok.segments(messages, TOOLS))
    cache: dict[str, list[int]] = {}
    tok.segments(messages, TOOLS, cache=cache)
    t_warm = best(lambda: tok.segments(messages, TOOLS, cache=cache))
    with capsys.disabled():
        print(
            f"\n[mistral-tekken] {name}: {len(messages)} messages, {n} tokens: "
            f"encode {t_encode * 1000:.0f} ms, segments {t_segments * 1000:.0f} ms, "
            f"segments with warm cache {t_warm * 1000:.0f} ms"
        )
    assert t_encode < 30.0
