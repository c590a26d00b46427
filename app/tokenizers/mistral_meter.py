"""TokenMeter for the ``mistral-tekken`` profile, on :mod:`app.tokenizers.mistral`.

The messages counted are the ones served (:meth:`MistralTekken.served_messages`: ids
mapped, unrepresentable text dropped, a final assistant text as a prefix), handed to the
openai serializer through ``Measurement.extra["openai_messages"]``.

Zones come from the per-message segmenter (owner -1 framing, -2 tool block and the system
message count to the root, the trunk (first user message) to the trunk, later messages to
the leaf). Roles are exact differences of whole encodes: tools = count - count without
tools; system = count without tools - count without tools and without the system message;
task_state = the trunk zone, less the system text when v3 puts it there (the last user
run is the trunk's own, e.g. a leaf user message merged into it); observations = the rest
(sums to total).

Each leaf message's tokens (``Measurement.leaf_tokens``) are the pieces of the served
messages it gave (a bridge assistant text counts to the user message it precedes): its
[INST] block, assistant text or tool call with their control tokens. A run of consecutive
user messages that mistral-common merges is one piece, its first message's (the others
own none; a leaf user message merged into the trunk's block counts in the trunk zone);
the v3 system prompt is inside the last user message's piece, as the leaf zone counts it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from itertools import accumulate
from typing import Any

from mistral_common.exceptions import MistralCommonException
from mistral_common.tokens.tokenizers.tekken import Tekkenizer

from app.caches import ENTRY_OVERHEAD, ByteLRU, memoize, text_key
from app.domain.errors import ProviderRuleViolation
from app.domain.layout import Conversation, LeafMessage
from app.domain.ports import Measurement
from app.domain.text import CUT_MARGIN, ControlStrings, cut_head_tail
from app.tokenizers.graphemes import snap
from app.tokenizers.hf import memoized_cuts
from app.tokenizers.mistral import MistralTekken, default_tekken_path, load_tekken
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


class _EndSpans(Sequence[tuple[int, int]]):
    """Byte spans of the first ``head`` and last ``tail`` tokens of ``ids`` (all that a head
    + tail cut reads), without decoding the tokens in between."""

    def __init__(self, ids: list[int], size: int, piece: Callable[[int], bytes], *, head: int, tail: int) -> None:
        self._n, self._size = len(ids), size
        self._ends = list(accumulate(len(piece(i)) for i in ids[:head]))
        self._back = list(accumulate(len(piece(i)) for i in reversed(ids[max(0, self._n - tail):])))

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> tuple[int, int]:  # type: ignore[override]
        if 0 <= i < len(self._ends):
            return (self._ends[i - 1] if i else 0), self._ends[i]
        back = self._n - 1 - i  # tokens after i
        if 0 <= back < len(self._back):
            return self._size - self._back[back], self._size - (self._back[back - 1] if back else 0)
        raise IndexError(f"token {i} is not within the spans kept next to the cuts")


class MistralMeter:
    def __init__(self, tekken: MistralTekken) -> None:
        self.tekken = tekken
        raw = tekken.mistral.instruct_tokenizer.tokenizer
        if not isinstance(raw, Tekkenizer):  # cuts read byte pieces (id_to_byte_piece): tekken only
            raise NotImplementedError(f"{type(raw).__name__}: the mistral meter needs a tekken tokenizer")
        self._raw = raw
        self._cache: MutableMapping[str, list[int]] = _BoundedDict()
        self.control_strings = ControlStrings(self._control_strings())
        self.count_text = memoize(COUNT_MEMO_BYTES, key=text_key,
                                  sizeof=lambda _: 32 + ENTRY_OVERHEAD)(self._count_text)
        self.head_tail, self.cut_ends = memoized_cuts(self._head_tail, HEAD_TAIL_MEMO_BYTES)

    @property
    def tokenizer_id(self) -> str:
        """A stable id of the tokenizer (its file's fingerprint): the key of stored payload
        token counts."""
        return f"tekken-{self.tekken.fingerprint}"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], *, render_reasoning: bool = False) -> MistralMeter:
        path = spec.get("path") or default_tekken_path(str(spec.get("file", "tekken_240718.json")))
        return cls(load_tekken(str(path)))

    def _control_strings(self) -> tuple[str, ...]:
        """The control tokens' texts (``[INST]``, ``</s>``, ``[TOOL_CALLS]`` ...) that the
        encoder turns into a control id when they occur in text. mistral-common encodes
        text with tiktoken without special tokens, so none does: ``()`` (tested; computed,
        not assumed, so a tokenizer that behaves otherwise gets its list)."""
        raw, n = self._raw, self._raw.num_special_tokens
        found = set()
        for token_id in range(n):
            piece = raw.id_to_piece(token_id)
            if piece.strip() and any(i < n for i in raw.encode(piece, bos=False, eos=False)):
                found.add(piece)
        return tuple(sorted(found))

    def _count_text(self, text: str) -> int:
        return len(self._raw.encode(text, bos=False, eos=False))

    def _head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        """Cut ``text`` at token boundaries: an exact prefix and suffix, never inside a
        character (tekken tokens are byte pieces: :func:`app.domain.text.cut_head_tail`)."""
        ids = self._raw.encode(text, bos=False, eos=False)
        if len(ids) <= head_tokens + tail_tokens:
            return text, "", 0
        spans = _EndSpans(ids, len(text.encode("utf-8")), self._raw.id_to_byte_piece,
                          head=head_tokens + CUT_MARGIN, tail=tail_tokens + CUT_MARGIN)
        return cut_head_tail(text, spans, head_tokens, tail_tokens, in_bytes=True, snap=snap)

    def messages(self, conversation: Conversation) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        """The served chat-completions messages, the tools and the layout warnings."""
        messages, tools, warnings, _ = self._served(conversation)
        return messages, tools, warnings

    def _served(self, conversation: Conversation
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], list[int]]:
        """:meth:`messages` and, per served message, the index of the body message it comes
        from (0 the system message, 1 the trunk, ``2 + i`` leaf message ``i``)."""
        body = serialize(conversation, model="-", max_tokens=1)
        tools = body.get("tools", [])
        messages, warnings, origins = self.tekken.served_with_origins(body["messages"], tools)
        return messages, tools, warnings, origins

    def prefetch(self, messages: Sequence[LeafMessage], *, handoff: bool = True) -> None:
        """Nothing to start ahead (see TokenMeter.prefetch)."""

    def measure(self, conversation: Conversation) -> Measurement:
        """Count the served messages exactly (mistral-common's own encoders).

        Raises:
            ProviderRuleViolation: mistral-common's validator or encoders refused the request
                (a rule ctxd does not lay out around, e.g. a tool schema v3 rejects).
        """
        try:
            return self._measure(conversation)
        except (MistralCommonException, ValueError, TypeError, AssertionError) as exc:
            raise ProviderRuleViolation(f"mistral-common ({self.tekken.version}) refused the request: {exc}",
                                        rule="mistral-common", reason=str(exc)) from exc

    def _measure(self, conversation: Conversation) -> Measurement:
        messages, tools, warnings, origins = self._served(conversation)
        pieces = self.tekken.segments(messages, tools, cache=self._cache)
        roles = [m["role"] for m in messages]
        trunk = roles.index("user")
        last_user_run = max(owner for owner, _ in pieces if owner >= 0 and roles[owner] == "user")
        by_zone = {"root": 0, "trunk": 0, "leaf": 0}
        ids: list[int] = []
        # per leaf message, the tokens of the pieces of the served messages it gave (None: it owns no
        # piece, e.g. merged by mistral-common into the [INST] block of the user message before it)
        leaf_tokens: list[int | None] = [None] * len(conversation.leaf)
        for owner, piece in pieces:
            ids.extend(piece)
            zone = "root" if owner < trunk else "trunk" if owner == trunk else "leaf"
            by_zone[zone] += len(piece)
            if zone == "leaf" and 0 <= (index := origins[owner] - 2) < len(leaf_tokens):
                leaf_tokens[index] = (leaf_tokens[index] or 0) + len(piece)
        total = len(ids)
        bare = sum(len(p) for _, p in self.tekken.segments(messages, [], cache=self._cache))
        no_system = [m for m in messages if m["role"] != "system"]
        bare_no_system = sum(len(p) for _, p in self.tekken.segments(no_system, [], cache=self._cache))
        tools_tokens = total - bare
        system_tokens = bare - bare_no_system
        task_state = by_zone["trunk"] - (system_tokens if last_user_run == trunk else 0)
        by_role = {"system": system_tokens, "tools": tools_tokens, "task_state": task_state,
                   "observations": total - system_tokens - tools_tokens - task_state}
        exact = sum(n for n in leaf_tokens if n is not None) == by_zone["leaf"]  # every leaf piece attributed
        return Measurement(total=total, by_zone=by_zone, by_role=by_role, warnings=tuple(warnings), ids=tuple(ids),
                           leaf_tokens=tuple(leaf_tokens) if exact else None, extra={"openai_messages": messages})


__all__ = ["MistralMeter", "load_tekken"]
