"""Exact counting with a Hugging Face tokenizer and its chat template (transformers).

One render of the whole request with ``apply_chat_template(..., tokenize=False)``; the
rendered text is encoded in segments cut next to added tokens (``<|im_start|>``, ...), so
zone boundaries are exact token offsets and concatenated ids equal the ids of
``apply_chat_template(..., tokenize=True)`` on the same messages (DESIGN.md section 3).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Callable, Sequence

from app.domain.layout import Conversation
from app.domain.ports import Measurement


def parse_arguments(arguments: str) -> Any:
    """Tool-call arguments as the template receives them: a JSON object is parsed (as vLLM
    and SGLang do for OpenAI requests), anything else is passed as the string."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
    return value if isinstance(value, dict) else arguments


def template_messages(conversation: Conversation, *, render_reasoning: bool = False) -> list[dict[str, Any]]:
    """The chat-template input for ``conversation``: system, trunk user message, leaf.

    Assistant ``content`` is never None (the Qwen3 template rejects it): "" instead.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conversation.system},
        {"role": "user", "content": conversation.trunk},
    ]
    for m in conversation.leaf:
        if m.role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
            if m.tool_calls:
                out["tool_calls"] = [
                    {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": parse_arguments(c.arguments)}}
                    for c in m.tool_calls
                ]
            if render_reasoning and m.reasoning:
                out["reasoning_content"] = m.reasoning
            messages.append(out)
        elif m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.call_id, "name": m.name, "content": m.content})
        else:
            messages.append({"role": m.role, "content": m.content})
    return messages


def openai_to_template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversion applied to an OpenAI chat-completions ``messages`` list (used by
    tests to count a served body independently)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant":
            m["content"] = m.get("content") or ""
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": parse_arguments(c["function"]["arguments"])}}
                    for c in m["tool_calls"]
                ]
        out.append(m)
    return out


class HFChatMeter:
    """TokenMeter for a transformers tokenizer with a chat template.

    Args:
        tokenizer: a loaded ``PreTrainedTokenizerFast``.
        encode: text -> ids for a rendered segment run (the segment cache, or plain encode).
        render_reasoning: render assistant ``reasoning`` (profile switch; off by default).
    """

    def __init__(self, tokenizer: Any, *, encode: Callable[[str], Sequence[int]] | None = None,
                 render_reasoning: bool = False) -> None:
        self.tokenizer = tokenizer
        self.render_reasoning = render_reasoning
        self._encode = encode or (lambda text: tokenizer.encode(text, add_special_tokens=False))
        added = sorted((t.content for t in tokenizer.added_tokens_decoder.values()), key=len, reverse=True)
        self._added = re.compile("|".join(re.escape(a) for a in added)) if added else None
        self.count_text = lru_cache(maxsize=8192)(self._count_text)  # type: ignore[method-assign]

    def _count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        """Cut ``text`` at token boundaries (offset mapping): head, tail, elided tokens."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        n = len(offsets)
        if n <= head_tokens + tail_tokens:
            return text, "", 0
        head_end = offsets[head_tokens - 1][1] if head_tokens else 0
        tail_start = offsets[n - tail_tokens][0] if tail_tokens else len(text)
        tail_start = max(tail_start, head_end)
        return text[:head_end], text[tail_start:], n - head_tokens - tail_tokens

    def render(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, *,
               add_generation_prompt: bool = True) -> str:
        return str(self.tokenizer.apply_chat_template(
            messages, tools=list(tools) if tools else None, add_generation_prompt=add_generation_prompt, tokenize=False))

    def _boundary_before(self, text: str, pos: int) -> int:
        """The start of the last added token at or before ``pos`` (a safe cut point)."""
        if self._added is None:
            return pos
        start = 0
        for match in self._added.finditer(text, 0, pos + 1):
            if match.start() <= pos:
                start = match.start()
        return start

    def zone_offsets(self, messages: list[dict[str, Any]], text: str, tools: Sequence[dict[str, Any]] | None) -> tuple[int, int]:
        """Char offsets where the trunk and the leaf start in ``text`` (cut before an added token)."""
        head = self.render(messages[:2], tools, add_generation_prompt=False)
        if not text.startswith(head):
            raise ValueError("chat template does not render the root and trunk as a prefix of the request")
        leaf_start = self._boundary_before(text, len(head)) if self._added and not self._added.match(text, len(head)) else len(head)
        probe = self.render([messages[0], {"role": "user", "content": ""}], tools, add_generation_prompt=False)
        common = 0
        for a, b in zip(probe, text):
            if a != b:
                break
            common += 1
        trunk_start = self._boundary_before(text, common)
        return trunk_start, leaf_start

    def measure(self, conversation: Conversation) -> Measurement:
        """Render once, count each zone exactly; tools = count with tools - count without."""
        messages = template_messages(conversation, render_reasoning=self.render_reasoning)
        tools = list(conversation.tools)
        text = self.render(messages, tools)
        trunk_start, leaf_start = self.zone_offsets(messages, text, tools)
        root_ids = list(self._encode(text[:trunk_start]))
        trunk_ids = list(self._encode(text[trunk_start:leaf_start]))
        leaf_ids = list(self._encode(text[leaf_start:]))
        ids = root_ids + trunk_ids + leaf_ids
        by_zone = {"root": len(root_ids), "trunk": len(trunk_ids), "leaf": len(leaf_ids)}
        if tools:
            bare = self.render(messages, None)
            bare_trunk, _ = self.zone_offsets(messages, bare, None)
            if bare[bare_trunk:] == text[trunk_start:]:
                tool_tokens = by_zone["root"] - len(self._encode(bare[:bare_trunk]))
            else:
                tool_tokens = len(ids) - len(self._encode(bare))
        else:
            tool_tokens = 0
        by_role = {
            "system": by_zone["root"] - tool_tokens,
            "tools": tool_tokens,
            "task_state": by_zone["trunk"],
            "observations": by_zone["leaf"],
        }
        return Measurement(total=len(ids), by_zone=by_zone, by_role=by_role, ids=tuple(ids),
                           extra={"text": text, "zone_chars": (trunk_start, leaf_start)})
