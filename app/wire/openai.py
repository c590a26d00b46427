"""OpenAI chat-completions body from a Conversation (root | trunk | leaf, DESIGN.md 4).

Layout on the wire: messages[0] is the system message (the root; the tools go beside it
in ``tools``), messages[1] one user message holding the trunk, the leaf after it. No
per-call field (request id, time) enters the body, so equal inputs give equal bytes.
"""

from __future__ import annotations

from typing import Any

from app.domain.layout import Conversation


def serialize(conversation: Conversation, *, model: str, max_tokens: int,
              prompt_cache_key: str | None = None) -> dict[str, Any]:
    """A body the chat-completions API accepts: model, max_tokens, messages, tools and,
    when given, ``prompt_cache_key`` (routes a session's requests to the same cache)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conversation.system},
        {"role": "user", "content": conversation.trunk},
    ]
    for m in conversation.leaf:
        if m.role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                out["tool_calls"] = [
                    {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            messages.append(out)
        elif m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content})
        else:
            messages.append({"role": "user", "content": m.content})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    if conversation.tools:
        body["tools"] = [dict(t) for t in conversation.tools]
    if prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key
    return body
