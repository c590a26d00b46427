"""OpenAI chat-completions body from a Conversation (root | trunk | leaf, DESIGN.md 4).

Layout on the wire: messages[0] is the system message (the root; the tools go beside it
in ``tools``), messages[1] one user message holding the trunk, the leaf after it. No
per-call field (request id, time) enters the body, so equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.domain.layout import Conversation
from app.wire.ids import mapped_id

MAX_TOOL_CALL_ID = 40  # OpenAI: "string too long. Expected a string with maximum length 40"


def tool_call_id(call_id: str) -> str:
    """OpenAI tool-call ids are at most 40 characters: kept when they are, else mapped
    deterministically to ``call_`` + 32 hex chars of sha256 (the same on the call and its
    result, in every request). Qwen3's template renders no id, so counts do not change."""
    return mapped_id(call_id, valid=lambda i: len(i) <= MAX_TOOL_CALL_ID, prefix="call_", hex_chars=32)


def serialize(conversation: Conversation, *, model: str, max_tokens: int,
              prompt_cache_key: str | None = None,
              chat_template_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A body the chat-completions API accepts: model, max_tokens, messages, tools and,
    when given, ``prompt_cache_key`` (routes a session's requests to the same cache) and
    ``chat_template_kwargs`` (vLLM and SGLang pass them to the chat template; sent only
    for a profile that declares some, since OpenAI itself refuses unknown parameters).
    Tool-call ids go through :func:`tool_call_id`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conversation.system},
        {"role": "user", "content": conversation.trunk},
    ]
    for m in conversation.leaf:
        if m.role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                out["tool_calls"] = [
                    {"id": tool_call_id(c.call_id), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            messages.append(out)
        elif m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": tool_call_id(m.call_id or ""), "content": m.content})
        else:
            messages.append({"role": "user", "content": m.content})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if conversation.tools:
        body["tools"] = [dict(t) for t in conversation.tools]
    if prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key
    if chat_template_kwargs:
        body["chat_template_kwargs"] = dict(chat_template_kwargs)
    return body
