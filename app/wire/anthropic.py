"""Anthropic Messages API body from a Conversation.

Order and shape: ``model``, ``max_tokens``, ``tools`` (name, description, input_schema),
``system`` (the root's instructions as one text block), ``messages``: the trunk is
messages[0], a user message; the leaf follows with strictly alternating user and
assistant turns (consecutive tool results and a following user text merge into one user
message, tool_result blocks first, each paired with the tool_use of the assistant turn
before it); no empty text blocks. ``cache_control`` breakpoints (at most 4): the end of
the root (the system block; the cached prefix covers tools + system), the end of the
trunk, and the last block of the last leaf message.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.domain.layout import Conversation, LeafMessage, tool_arguments
from app.domain.types import ThinkingBlock
from app.wire.ids import mapped_id

EPHEMERAL = {"type": "ephemeral"}
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def tool_use_id(call_id: str) -> str:
    """Anthropic tool_use ids match ``^[a-zA-Z0-9_-]+$``: kept when they do, else mapped
    deterministically (``toolu_`` + 24 hex chars of sha256)."""
    return mapped_id(call_id, valid=lambda i: bool(_TOOL_ID.match(i)), prefix="toolu_", hex_chars=24)


def tool_input(arguments: str) -> dict[str, Any]:
    """``tool_use.input`` must be an object: the arguments as the leaf carries them
    (:func:`~app.domain.layout.tool_arguments`: the JSON object, ``{}`` for none, else
    ``{"arguments": text}``), parsed."""
    value: dict[str, Any] = json.loads(tool_arguments(arguments))
    return value


def layout_warnings(conversation: Conversation) -> list[str]:
    """Notes on an Anthropic body that some Claude models may still refuse: a request that
    ends with an assistant turn is a prefill (the model continues that text), which Claude
    models from 4.6 on refuse with 400 ("The conversation must end with a user message")."""
    out = []
    if conversation.leaf and conversation.leaf[-1].role == "assistant":
        out.append("anthropic: the request ends with an assistant turn, sent as a prefill (its text trimmed of "
                   "trailing whitespace); Claude models from 4.6 on refuse a prefill: post a user message or a "
                   "step before asking for the next request")
    for name, dropped in _dropped_fields(conversation):
        out.append(f"anthropic: tool {name!r}: {', '.join(dropped)} not sent (no such field in Anthropic's tool "
                   "schema: name, description, input_schema, strict)")
    return out


#: what an OpenAI function declaration carries that the Anthropic tool has: name,
#: description, parameters (-> input_schema) and strict (structured tool inputs)
_FUNCTION_FIELDS = frozenset({"name", "description", "parameters", "strict"})


def _dropped_fields(conversation: Conversation) -> list[tuple[str, list[str]]]:
    """Per tool, the declaration's fields the Anthropic body cannot carry (sorted)."""
    out = []
    for tool in conversation.tools:
        fn = tool.get("function", tool)
        dropped = sorted({f"function.{k}" for k in fn if k not in _FUNCTION_FIELDS} |
                         ({k for k in tool if k not in ("type", "function")} if "function" in tool else set()))
        if dropped:
            out.append((str(fn.get("name")), dropped))
    return out


def _tools(conversation: Conversation) -> list[dict[str, Any]]:
    """Tool declarations as Anthropic takes them: ``function.strict`` becomes the tool's
    ``strict``; a field outside the tool schema is dropped, and :func:`layout_warnings`
    names it."""
    out = []
    for tool in conversation.tools:
        fn = tool.get("function", tool)
        decl: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            decl["description"] = fn["description"]
        decl["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
        if isinstance(fn.get("strict"), bool):
            decl["strict"] = fn["strict"]
        out.append(decl)
    return out


def thinking_block(block: ThinkingBlock) -> dict[str, Any]:
    """The Messages API block of a thinking block as it was posted: ``{"type": "thinking",
    "thinking", "signature"}`` or ``{"type": "redacted_thinking", "data"}`` (byte for byte:
    the API verifies the signature of the thinking blocks sent back in a tool-use loop)."""
    if block.kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.text}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _blocks(m: LeafMessage) -> tuple[str, tuple[dict[str, Any], ...]]:
    """The role and content blocks one leaf message contributes, built once per message
    (kept in ``m.memo``; read-only: ``serialize`` copies what it changes)."""
    found = m.memo.get("anthropic")
    if found is None:
        blocks: list[dict[str, Any]] = []
        if m.role == "assistant":
            # thinking first, exactly as posted: the API checks each block's signature
            blocks.extend(thinking_block(t) for t in m.thinking)
            if m.content.strip():
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append({"type": "tool_use", "id": tool_use_id(c.call_id), "name": c.name,
                               "input": tool_input(c.arguments)})
            role = "assistant"
        elif m.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id(m.call_id or "")}
            if m.content:
                block["content"] = m.content
            if m.is_error:
                block["is_error"] = True
            blocks.append(block)
            role = "user"
        else:
            if m.content.strip():
                blocks.append({"type": "text", "text": m.content})
            role = "user"
        found = m.memo["anthropic"] = (role, tuple(blocks))
    return found


def serialize(conversation: Conversation, *, model: str, max_tokens: int) -> dict[str, Any]:
    """A body ``anthropic.Anthropic().messages.create(**body)`` accepts."""
    # the trunk's own block carries its breakpoint, even when leaf user blocks join its message
    trunk_block: dict[str, Any] = {"type": "text", "text": conversation.trunk, "cache_control": EPHEMERAL}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [trunk_block]}]

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for m in conversation.leaf:
        role, blocks = _blocks(m)
        add(role, list(blocks))
    # then the last leaf block (none when the leaf is empty: the trunk block is the last)
    last_block = messages[-1]["content"][-1]
    if last_block is not trunk_block:  # a copy: the message's blocks are shared with later bodies
        messages[-1]["content"][-1] = last_block | {"cache_control": EPHEMERAL}
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if conversation.tools:
        body["tools"] = _tools(conversation)
    if conversation.system:
        body["system"] = [{"type": "text", "text": conversation.system, "cache_control": EPHEMERAL}]
    elif conversation.tools:
        body["tools"][-1]["cache_control"] = EPHEMERAL
    body["messages"] = messages
    return body
