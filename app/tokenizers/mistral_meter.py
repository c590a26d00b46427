"""TokenMeter for the ``mistral-tekken`` profile, on :mod:`app.tokenizers.mistral`.

Zones come from the per-message segmenter (owner -1 framing and -2 tool block count to
the root, message 1 to the trunk, later messages to the leaf). Roles are exact
differences of whole encodes: tools = count - count without tools; system = count
without tools - count without tools and without system text; task_state = the trunk
zone less the system text v3 moves into it; observations = the rest (sums to total).
"""

from __future__ import annotations

import sys
from typing import Any, Iterator, Mapping, MutableMapping

from app.caches import ENTRY_OVERHEAD, ByteLRU, memoize, text_key
from app.tokenizers.hf import memoized_cuts
from app.domain.layout import Conversation
from app.domain.ports import Measurement
from app.tokenizers.mistral import SEGMENT_FRAMING, SEGMENT_TOOLS, MistralTekken, default_tekken_path, load_tekken
from app.wire.openai import serialize


#: Byte bounds of the meter's memos (app/caches.py; issue 9 item 7).
SEGMENT_MEMO_BYTES = 64 * 1024 * 1024  # the segmenter's per-message ids (key text + 8 bytes an id)
COUNT_MEMO_BYTES = 4 * 1024 * 1024  # count_text: sha256 of a text -> its token count
HEAD_TAIL_MEMO_BYTES = 32 * 1024 * 1024  # head_tail and cut_ends (each): heads and tails cut from payloads


class _BoundedDict(MutableMapping[str, list[int]]):
    """The segmenter's per-message id cache as a mapping, bounded in bytes (a ByteLRU:
    the key's size plus 8 bytes an id)."""

    def __init__(self, max_bytes: int = SEGMENT_MEMO_BYTES) -> None:
        self._lru: ByteLRU[str, list[int]] = ByteLRU(
            max_bytes, lambda key, ids: sys.getsizeof(key) + 8 * len(ids) + ENTRY_OVERHEAD)

    def __getitem__(self, key: str) -> list[int]:
        value = self._lru.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: list[int]) -> None:
        self._lru.put(key, value)

    def __delitem__(self, key: str) -> None:
        if self._lru.pop(key) is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._lru

    def __iter__(self) -> Iterator[str]:
        return iter([k for k, _ in self._lru.items()])

    def __len__(self) -> int:
        return len(self._lru)


class MistralMeter:
    def __init__(self, tekken: MistralTekken) -> None:
        self.tekken = tekken
        self._raw = tekken.mistral.instruct_tokenizer.tokenizer
        self._cache: MutableMapping[str, list[int]] = _BoundedDict()
        self.count_text = memoize(COUNT_MEMO_BYTES, key=text_key,  # type: ignore[method-assign]
                                  sizeof=lambda _: 32 + ENTRY_OVERHEAD)(self._count_text)
        self.head_tail, self.cut_ends = memoized_cuts(self._head_tail, HEAD_TAIL_MEMO_BYTES)  # type: ignore[method-assign]

    @property
    def tokenizer_id(self) -> str:
        """A stable id of the tokenizer (its file's fingerprint): the key of stored payload
        token counts."""
        return f"tekken-{self.tekken.fingerprint}"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], *, render_reasoning: bool = False) -> "MistralMeter":
        path = spec.get("path") or default_tekken_path(str(spec.get("file", "tekken_240718.json")))
        return cls(load_tekken(str(path)))

    def _count_text(self, text: str) -> int:
        return len(self._raw.encode(text, bos=False, eos=False))

    def _head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        ids = self._raw.encode(text, bos=False, eos=False)
        if len(ids) <= head_tokens + tail_tokens:
            return text, "", 0
        head = self._raw.decode(ids[:head_tokens]) if head_tokens else ""
        tail = self._raw.decode(ids[len(ids) - tail_tokens:]) if tail_tokens else ""
        return head, tail, len(ids) - head_tokens - tail_tokens

    def messages(self, conversation: Conversation) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        body = serialize(conversation, model="-", max_tokens=1)
        return body["messages"], body.get("tools", [])

    def measure(self, conversation: Conversation) -> Measurement:
        messages, tools = self.messages(conversation)
        _, warnings = self.tekken.to_mistral(messages, tools)
        pieces = self.tekken.segments(messages, tools, cache=self._cache)
        by_zone = {"root": 0, "trunk": 0, "leaf": 0}
        ids: list[int] = []
        for owner, piece in pieces:
            ids.extend(piece)
            zone = "root" if owner in (SEGMENT_FRAMING, SEGMENT_TOOLS, 0) else "trunk" if owner == 1 else "leaf"
            by_zone[zone] += len(piece)
        total = len(ids)
        bare = sum(len(p) for _, p in self.tekken.segments(messages, [], cache=self._cache))
        no_system = [dict(messages[0], content="")] + messages[1:]
        bare_no_system = sum(len(p) for _, p in self.tekken.segments(no_system, [], cache=self._cache))
        tools_tokens = total - bare
        system_tokens = bare - bare_no_system
        later_user = any(m["role"] == "user" for m in messages[2:])
        task_state = by_zone["trunk"] - (0 if later_user else system_tokens)
        by_role = {"system": system_tokens, "tools": tools_tokens, "task_state": task_state,
                   "observations": total - system_tokens - tools_tokens - task_state}
        return Measurement(total=total, by_zone=by_zone, by_role=by_role, warnings=tuple(warnings), ids=tuple(ids))


__all__ = ["MistralMeter", "load_tekken"]
