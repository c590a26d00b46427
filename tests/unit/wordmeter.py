"""A unit-token TokenMeter for domain tests: one token per whitespace-separated word,
plus a fixed framing cost per message. Exact by construction (its own tokenizer)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.domain.cuts import windowed_head_tail
from app.domain.layout import Conversation, LeafMessage
from app.domain.ports import Measurement

FRAME = 4  # tokens of framing per message


class WordMeter:
    control_strings: tuple[str, ...] = ()

    def count_text(self, text: str) -> int:
        return len(text.split())

    def head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        words = text.split()
        if len(words) <= head_tokens + tail_tokens:
            return text, "", 0
        return " ".join(words[:head_tokens]), " ".join(words[len(words) - tail_tokens:]), len(words) - head_tokens - tail_tokens

    def cut_ends(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str] | None:
        return windowed_head_tail(text, head_tokens, tail_tokens, self.head_tail)

    def prefetch(self, messages: Sequence[LeafMessage], *, handoff: bool = True) -> None:
        """Nothing to start ahead (see TokenMeter.prefetch)."""

    def measure(self, conversation: Conversation) -> Measurement:
        tools = sum(len(json.dumps(t).split()) for t in conversation.tools)
        system = FRAME + self.count_text(conversation.system)
        trunk = FRAME + self.count_text(conversation.trunk)
        leaf = 0
        for m in conversation.leaf:
            leaf += FRAME + self.count_text(m.content) + sum(2 + len(c.arguments.split()) for c in m.tool_calls)
        leaf += 2  # generation prompt
        by_zone = {"root": system + tools, "trunk": trunk, "leaf": leaf}
        return Measurement(total=sum(by_zone.values()), by_zone=by_zone,
                           by_role={"system": system, "tools": tools, "task_state": trunk, "observations": leaf})
