"""Provider-shaped messages in: OpenAI chat messages and Anthropic messages as ctxd events
(issue 14 item 1; README "Provider messages").

``POST /v1/sessions/{id}/messages?format=openai|anthropic`` takes a conversation exactly
as an agent keeps it (the SDK's objects dumped, or the dicts it sent) and maps each
message to the events ``POST /events`` takes, or to the session's instructions:

* OpenAI: ``system`` / ``developer`` -> instructions; ``user`` -> a user message;
  ``assistant`` -> an assistant message (``content`` null, a string or text / refusal
  parts; ``tool_calls[].id`` -> ``call_id``, ``function.name`` / ``function.arguments``;
  ``reasoning_content`` or ``reasoning`` -> ``reasoning``); ``tool`` -> a tool result of
  ``tool_call_id``.
* Anthropic: ``system`` (a top-level field) -> instructions; an assistant message's
  ``thinking`` / ``redacted_thinking`` blocks are kept whole (``thinking``; their text
  also becomes ``reasoning``), ``text`` blocks -> content, ``tool_use`` -> tool calls
  (``input`` serialized as the arguments); a user message's ``tool_result`` blocks -> tool
  results (``is_error`` kept in ``conditions``), its text -> a user message.

Text parts or blocks of one message are joined with ``"\\n"`` (as vLLM joins text parts).
Anything ctxd cannot carry (images, audio, files, server tools, the legacy
``function_call``) is refused with :class:`~app.domain.errors.InvalidMessage` (422) naming
the place, so nothing is silently lost. Fields that do not change the conversation (SDK
bookkeeping: ``annotations``, ``audio: null``, ``name``, ``cache_control``, a response's
``id`` / ``usage`` / ``stop_reason``) are ignored.

Event ids are derived from the message's position in the session's message stream
(:func:`event_id`), so re-posting the same history maps to the same events.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.errors import InvalidMessage
from app.domain.layout import canonical_json

FORMATS = ("openai", "anthropic")
#: Event ids of provider messages start with this (README: reserved for POST /messages).
EVENT_ID_PREFIX = "msg:"
_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


def event_id(position: int, part: int = 0) -> str:
    """The event id of a message's ``part``-th event (``msg:<position>``, then
    ``msg:<position>:<part>`` for the further events of one message)."""
    return f"{EVENT_ID_PREFIX}{position}" + (f":{part}" if part else "")


@dataclass(frozen=True)
class MappedMessage:
    """One provider message as ctxd takes it: the events it becomes (dicts as ``POST
    /events`` takes them) and/or the instructions it carries (a system message)."""

    position: int
    events: tuple[dict[str, Any], ...] = ()
    instructions: str | None = None

    def fingerprint(self) -> str:
        """sha256 hex of what the message maps to (events without unset fields, and the
        instructions): a message re-posted at its position is the same message when this
        is equal, whatever SDK bookkeeping fields differ."""
        events = [{k: v for k, v in e.items() if v is not None} for e in self.events]
        return hashlib.sha256(canonical_json({"events": events, "instructions": self.instructions})
                              .encode("utf-8")).hexdigest()


def _fail(loc: Sequence[str | int], message: str) -> InvalidMessage:
    where = ".".join(map(str, loc))
    return InvalidMessage(f"{where}: {message}", loc=["body", *loc])


def _object(value: Any, loc: Sequence[str | int]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(loc, f"must be an object, got {type(value).__name__}")
    return value


def _string(value: Any, loc: Sequence[str | int], *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _fail(loc, f"must be a string, got {'null' if value is None else type(value).__name__}")
    return value


def _parts_text(content: Any, loc: Sequence[str | int], *, kinds: Mapping[str, str]) -> str:
    """``content`` as text: null -> "", a string as is, a list of parts (``kinds``: part
    type -> the key holding its text) joined with "\\n"."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(loc, f"must be null, a string or a list of parts, got {type(content).__name__}")
    texts = []
    for i, part in enumerate(content):
        part = _object(part, [*loc, i])
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in kinds:
            raise _fail([*loc, i, "type"], f"content part type {kind!r} is not supported (ctxd keeps text: "
                        f"{', '.join(sorted(kinds))})")
        texts.append(_string(part.get(kinds[kind]), [*loc, i, kinds[kind]]) or "")
    return "\n".join(texts)


def _arguments(value: Any, loc: Sequence[str | int]) -> str:
    """Tool-call arguments as JSON text: a string as the model produced it, an object
    (some agents keep them parsed) serialized, null as ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return json.dumps(value, ensure_ascii=False)
    raise _fail(loc, f"must be a JSON string or an object, got {type(value).__name__}")


def _openai_message(message: Mapping[str, Any], position: int, loc: list[str | int]) -> MappedMessage:
    role = message.get("role")
    if role not in _OPENAI_ROLES:
        hint = " (the legacy function role: send tool messages)" if role == "function" else ""
        raise _fail([*loc, "role"], f"role {role!r} is not one of {', '.join(_OPENAI_ROLES)}{hint}")
    text_parts = {"text": "text"}
    if role in ("system", "developer"):
        return MappedMessage(position, instructions=_parts_text(message.get("content"), [*loc, "content"],
                                                                kinds=text_parts))
    if role == "tool":
        call_id = _string(message.get("tool_call_id"), [*loc, "tool_call_id"])
        payload = _parts_text(message.get("content"), [*loc, "content"], kinds=text_parts)
        return MappedMessage(position, events=({"event_id": event_id(position), "kind": "tool_result",
                                                "call_id": call_id, "payload": payload},))
    if role == "user":
        content = _parts_text(message.get("content"), [*loc, "content"], kinds=text_parts)
        return MappedMessage(position, events=({"event_id": event_id(position), "kind": "message", "role": "user",
                                                "content": content},))
    content = _parts_text(message.get("content"), [*loc, "content"], kinds={"text": "text", "refusal": "refusal"})
    refusal = _string(message.get("refusal"), [*loc, "refusal"], optional=True)
    if not content and refusal:
        content = refusal  # the SDK's refusal field: the model's words, with content null
    if message.get("function_call") is not None:
        raise _fail([*loc, "function_call"], "the legacy function_call has no call id: send tool_calls")
    for key in ("audio",):
        if message.get(key) is not None:
            raise _fail([*loc, key], f"{key} is not supported (ctxd keeps text)")
    reasoning = None
    for key in ("reasoning_content", "reasoning"):
        reasoning = _string(message.get(key), [*loc, key], optional=True)
        if reasoning is not None:
            break
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise _fail([*loc, "tool_calls"], f"must be a list, got {type(calls).__name__}")
    tool_calls = []
    for i, call in enumerate(calls or []):
        where = [*loc, "tool_calls", i]
        call = _object(call, where)
        if call.get("type", "function") != "function":
            raise _fail([*where, "type"], f"tool call type {call.get('type')!r} is not supported (function only)")
        fn = _object(call.get("function"), [*where, "function"])
        tool_calls.append({"call_id": _string(call.get("id"), [*where, "id"]),
                           "name": _string(fn.get("name"), [*where, "function", "name"]),
                           "arguments": _arguments(fn.get("arguments"), [*where, "function", "arguments"])})
    event: dict[str, Any] = {"event_id": event_id(position), "kind": "message", "role": "assistant",
                             "content": content, "reasoning": reasoning, "tool_calls": tool_calls}
    return MappedMessage(position, events=(event,))


def _anthropic_text(block: Mapping[str, Any], loc: Sequence[str | int]) -> str:
    return _string(block.get("text"), [*loc, "text"]) or ""


def _blocks(content: Any, loc: list[str | int]) -> Iterator[tuple[list[str | int], Mapping[str, Any], Any]]:
    """``(loc, block, type)`` of each block of an Anthropic ``content`` (a string is one text
    block)."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    elif not isinstance(content, list):
        raise _fail([*loc, "content"], f"must be a string or a list of blocks, got {type(content).__name__}")
    for i, block in enumerate(content):
        where: list[str | int] = [*loc, "content", i]
        block = _object(block, where)
        yield where, block, block.get("type")


def _anthropic_assistant(content: Any, position: int, loc: list[str | int]) -> MappedMessage:
    texts: list[str] = []
    thinking: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for where, block, kind in _blocks(content, loc):
        if kind == "text":
            texts.append(_anthropic_text(block, where))
        elif kind == "thinking":
            thinking.append({"type": "thinking", "thinking": _string(block.get("thinking"), [*where, "thinking"]),
                             "signature": _string(block.get("signature"), [*where, "signature"])})
        elif kind == "redacted_thinking":
            thinking.append({"type": "redacted_thinking", "data": _string(block.get("data"), [*where, "data"])})
        elif kind == "tool_use":
            tool_input = block.get("input")
            if not isinstance(tool_input, Mapping):
                raise _fail([*where, "input"], "must be an object")
            calls.append({"call_id": _string(block.get("id"), [*where, "id"]),
                          "name": _string(block.get("name"), [*where, "name"]),
                          "arguments": json.dumps(tool_input, ensure_ascii=False)})
        else:
            raise _fail([*where, "type"], f"assistant block type {kind!r} is not supported (text, thinking, "
                        "redacted_thinking, tool_use)")
    reasoning = "\n".join(b["thinking"] for b in thinking if b["type"] == "thinking") or None
    event: dict[str, Any] = {"event_id": event_id(position), "kind": "message", "role": "assistant",
                             "content": "\n".join(texts), "reasoning": reasoning, "tool_calls": calls,
                             "thinking": thinking or None}
    return MappedMessage(position, events=(event,))


def _anthropic_user(content: Any, position: int, loc: list[str | int]) -> MappedMessage:
    if isinstance(content, str):
        return MappedMessage(position, events=({"event_id": event_id(position), "kind": "message", "role": "user",
                                                "content": content},))
    events: list[dict[str, Any]] = []
    texts: list[str] = []
    for where, block, kind in _blocks(content, loc):
        if kind == "text":
            texts.append(_anthropic_text(block, where))
        elif kind == "tool_result":
            payload = _parts_text(block.get("content"), [*where, "content"], kinds={"text": "text"})
            is_error = block.get("is_error")
            if is_error is not None and not isinstance(is_error, bool):
                raise _fail([*where, "is_error"], "must be a boolean")
            result: dict[str, Any] = {"kind": "tool_result",
                                      "call_id": _string(block.get("tool_use_id"), [*where, "tool_use_id"]),
                                      "payload": payload}
            if is_error:
                result["conditions"] = {"is_error": True}
            events.append(result)
        else:
            raise _fail([*where, "type"], f"user block type {kind!r} is not supported (text, tool_result)")
    if texts:  # after the results, as the Messages API orders them
        events.append({"kind": "message", "role": "user", "content": "\n".join(texts)})
    if not events:
        raise _fail([*loc, "content"], "a user message needs a text or tool_result block")
    return MappedMessage(position, events=tuple({"event_id": event_id(position, k), **e} for k, e in enumerate(events)))


def map_messages(messages: Sequence[Any], *, fmt: str, start: int = 0, system: Any = None) -> list[MappedMessage]:
    """Map provider ``messages`` (``fmt`` openai or anthropic) posted at positions
    ``start``, ``start + 1``, ... of the session's message stream. ``system``: the
    Anthropic top-level system prompt (a string or text blocks), mapped first as
    instructions (no position). Returns one :class:`MappedMessage` per message (plus the
    system one, position -1, first).

    Raises InvalidMessage (422, ``loc`` naming the place) for a shape ctxd cannot carry."""
    out: list[MappedMessage] = []
    if system is not None:
        if fmt != "anthropic":
            raise _fail(["system"], "a top-level system is the anthropic format's; openai sends a system message")
        out.append(MappedMessage(-1, instructions=_parts_text(system, ["system"], kinds={"text": "text"})))
    for i, raw in enumerate(messages):
        loc: list[str | int] = ["messages", i]
        message = _object(raw, loc)
        position = start + i
        if fmt == "openai":
            out.append(_openai_message(message, position, loc))
            continue
        role = message.get("role")
        if role == "assistant":
            out.append(_anthropic_assistant(message.get("content"), position, loc))
        elif role == "user":
            out.append(_anthropic_user(message.get("content"), position, loc))
        else:
            raise _fail([*loc, "role"], f"role {role!r} is not user or assistant (the system prompt is the "
                        "top-level system field)")
    return out
