"""OpenAI chat-completions body from a Conversation (root | trunk | leaf, DESIGN.md 4).

Layout on the wire: messages[0] is the system message (the root; the tools go beside it
in ``tools``), messages[1] one user message holding the trunk, the leaf after it. No
per-call field (request id, time) enters the body, so equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.domain.layout import Conversation, LeafMessage
from app.wire.ids import mapped_id

MAX_TOOL_CALL_ID = 40  # OpenAI: "string too long. Expected a string with maximum length 40"


def tool_call_id(call_id: str) -> str:
    """OpenAI tool-call ids are at most 40 characters: kept when they are, else mapped
    deterministically to ``call_`` + 32 hex chars of sha256 (the same on the call and its
    result, in every request). Qwen3's template renders no id, so counts do not change."""
    return mapped_id(call_id, valid=lambda i: len(i) <= MAX_TOOL_CALL_ID, prefix="call_", hex_chars=32)


def _message(m: LeafMessage) -> tuple[dict[str, Any], bytes | None]:
    """The chat-completions message for one leaf message and its compact JSON (None when
    orjson refuses it), built once per message (kept in ``m.memo``; read-only)."""
    found = m.memo.get("openai")
    if found is None:
        out: dict[str, Any]
        if m.role == "assistant":
            out = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                out["tool_calls"] = [
                    {"id": tool_call_id(c.call_id), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
        elif m.role == "tool":
            out = {"role": "tool", "tool_call_id": tool_call_id(m.call_id or ""), "content": m.content}
        else:
            out = {"role": "user", "content": m.content}
        try:
            encoded: bytes | None = orjson.dumps(out)
        except TypeError:
            encoded = None
        found = m.memo["openai"] = (out, encoded)
    return found


def serialize(conversation: Conversation, *, model: str, max_tokens: int,
              prompt_cache_key: str | None = None,
              chat_template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A body the chat-completions API accepts: model, max_tokens, messages, tools and,
    when given, ``prompt_cache_key`` (routes a session's requests to the same cache) and
    ``chat_template_kwargs`` (vLLM and SGLang pass them to the chat template; sent only
    for a profile that declares some, since OpenAI itself refuses unknown parameters).
    Tool-call ids go through :func:`tool_call_id`. The leaf's message dicts are shared
    with later bodies of the session (each built once): treat the body as read-only."""
    return serialize_bytes(conversation, model=model, max_tokens=max_tokens, prompt_cache_key=prompt_cache_key,
                           chat_template_kwargs=chat_template_kwargs)[0]


def serialize_bytes(conversation: Conversation, *, model: str, max_tokens: int,
                    prompt_cache_key: str | None = None,
                    chat_template_kwargs: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], bytes | None]:
    """:func:`serialize`'s body and its compact JSON (``orjson.dumps(body)``, byte for byte),
    joined from each leaf message's JSON built once; None when orjson refuses a part (the
    caller then serializes the body itself)."""
    head = [{"role": "system", "content": conversation.system}, {"role": "user", "content": conversation.trunk}]
    messages: list[dict[str, Any]] = list(head)
    parts: list[bytes] | None = []
    for m in conversation.leaf:
        out, encoded = m.memo.get("openai") or _message(m)
        messages.append(out)
        if encoded is None:
            parts = None
        elif parts is not None:
            parts.append(encoded)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if conversation.tools:
        body["tools"] = [dict(t) for t in conversation.tools]
    if prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key
    if chat_template_kwargs:
        body["chat_template_kwargs"] = dict(chat_template_kwargs)
    if parts is None:
        return body, None
    try:
        chunks = [b'{"model":', orjson.dumps(model), b',"max_tokens":', orjson.dumps(max_tokens),
                  b',"messages":[', b",".join([orjson.dumps(m) for m in head] + parts), b"]"]
        for key in ("tools", "prompt_cache_key", "chat_template_kwargs"):
            if key in body:
                chunks += [b',"', key.encode(), b'":', orjson.dumps(body[key])]
    except TypeError:  # e.g. an integer beyond 64 bits in a tool's schema
        return body, None
    chunks.append(b"}")
    return body, b"".join(chunks)
