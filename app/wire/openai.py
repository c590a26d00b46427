"""OpenAI chat-completions body from a Conversation (root | trunk | leaf, DESIGN.md 4).

Layout on the wire: messages[0] is the system message (the root; the tools go beside it
in ``tools``), messages[1] one user message holding the trunk, the leaf after it. No
per-call field (request id, time) enters the body, so equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.domain.layout import Conversation, LeafMessage, begins_with
from app.domain.session_memo import SessionMemo
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
            if m.reasoning:  # only under a profile with render_reasoning, which counts it as sent
                out["reasoning_content"] = m.reasoning
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


#: key of the session memo's entry (``serialize_bytes(memo=...)``): the last body's leaf, its
#: message dicts, the body's bytes and where the leaf's JSON lies in them
_LEAF_JSON = ("openai", "leaf json")


def serialize_bytes(conversation: Conversation, *, model: str, max_tokens: int,
                    prompt_cache_key: str | None = None,
                    chat_template_kwargs: Mapping[str, Any] | None = None,
                    memo: SessionMemo | None = None) -> tuple[dict[str, Any], bytes | None]:
    """:func:`serialize`'s body and its compact JSON (``orjson.dumps(body)``, byte for byte),
    joined from each leaf message's JSON built once; None when orjson refuses a part (the
    caller then serializes the body itself).

    ``memo``: the session's leaf cache (``assemble_window(leaf_cache=...)``). The last body's
    leaf is kept there with its bytes, so a body whose leaf begins with that leaf (equal
    messages; the usual case, a request extending the previous one) takes that part of the
    messages and of the bytes whole and converts only the new messages. The same body and
    bytes either way."""
    head = [{"role": "system", "content": conversation.system}, {"role": "user", "content": conversation.trunk}]
    leaf = conversation.leaf
    held = memo.wire_leaf if memo is not None else None
    if held is not None and not begins_with(leaf, held[0]):
        held = None
    leaf_messages: list[dict[str, Any]] = list(held[1]) if held is not None else []
    parts: list[bytes | memoryview] | None = [memoryview(held[2])[held[3]:held[4]]] \
        if held is not None and held[4] > held[3] else []
    for m in leaf[len(held[0]) if held is not None else 0:]:
        out, encoded = m.memo.get("openai") or _message(m)
        leaf_messages.append(out)
        if encoded is None:
            parts = None
        elif parts is not None:
            parts.append(encoded)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": head + leaf_messages}
    if conversation.tools:
        body["tools"] = [dict(t) for t in conversation.tools]
    if prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key
    if chat_template_kwargs:
        body["chat_template_kwargs"] = dict(chat_template_kwargs)
    if parts is None:
        return body, None
    try:
        chunks: list[bytes | memoryview] = [b'{"model":', orjson.dumps(model), b',"max_tokens":',
                                            orjson.dumps(max_tokens), b',"messages":[', orjson.dumps(head[0]), b",",
                                            orjson.dumps(head[1])]
        start = sum(map(len, chunks)) + (1 if parts else 0)  # the leaf's JSON begins after its comma
        for part in parts:
            chunks += (b",", part)
        end = sum(map(len, chunks))
        chunks.append(b"]")
        for key in ("tools", "prompt_cache_key", "chat_template_kwargs"):
            if key in body:
                chunks += [b',"', key.encode(), b'":', orjson.dumps(body[key])]
    except TypeError:  # e.g. an integer beyond 64 bits in a tool's schema
        return body, None
    chunks.append(b"}")
    encoded_body = b"".join(chunks)
    if memo is not None:
        memo.wire_leaf = (leaf, leaf_messages, encoded_body, start, end)
    return body, encoded_body
