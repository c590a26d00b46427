"""Message items' ``tokens`` (app/domain/assembly.py ``_with_message_tokens``): the meter's
per-leaf-message counts (``Measurement.leaf_tokens``) on the user and assistant message
items of the leaf, none elsewhere; with the session memo (``leaf_cache``) the items equal a
fresh assembly's on every GET of a growing session (counts that move with the position of a
message included), and an unchanged message's item is the same object from GET to GET."""

from __future__ import annotations

from dataclasses import replace

from app.domain.assembly import assemble_window
from app.domain.budget import Budget
from app.domain.layout import Conversation
from app.domain.ports import Measurement
from app.domain.session_memo import SessionMemo
from app.domain.types import MessageEvent, StepEvent
from tests.unit.test_window_policy import SESSION, session_events
from tests.unit.wordmeter import FRAME, WordMeter

BUDGET = Budget(window=4000, output_reserve=100, headroom=100)
LAST_USER = 3  # tokens the positional meter adds to the last user message (as v3 puts the system prompt there)


class PositionalMeter(WordMeter):
    """WordMeter with per-message counts: FRAME + words (+ 2 per call and its arguments),
    LAST_USER more on the last user message, and none of its own for a user message right
    after a user message (merged into it, the way mistral-common merges [INST] blocks)."""

    def _one(self, m) -> int:  # type: ignore[no-untyped-def]
        return FRAME + self.count_text(m.content) + sum(2 + len(c.arguments.split()) for c in m.tool_calls)

    def measure(self, conversation: Conversation) -> Measurement:
        measured = super().measure(conversation)
        counts: list[int | None] = [self._one(m) for m in conversation.leaf]
        users = [i for i, m in enumerate(conversation.leaf) if m.role == "user"]
        if users:
            counts[users[-1]] = int(counts[users[-1]] or 0) + LAST_USER
        for i in range(len(counts) - 1, 0, -1):
            if conversation.leaf[i].role == conversation.leaf[i - 1].role == "user":
                counts[i - 1] = int(counts[i - 1] or 0) + int(counts[i] or 0)
                counts[i] = None
        zones = dict(measured.by_zone, leaf=sum(n or 0 for n in counts) + 2)
        return replace(measured, total=sum(zones.values()), by_zone=zones, leaf_tokens=tuple(counts))


def _events(n_turns: int) -> list:
    """Turns of an assistant call and its result, each followed by a user message; every
    third turn ends with two user messages in a row (the second merged into the first)."""
    out, seq = [], 0
    for t, group in enumerate(session_events([[12]] * n_turns)[i:i + 2] for i in range(0, 2 * n_turns, 2)):
        for e in group:
            seq += 1
            out.append(replace(e, seq=seq))
        for k in range(2 if t % 3 == 2 else 1):
            seq += 1
            out.append(MessageEvent(seq=seq, event_id=f"u{t}.{k}", role="user", content=f"user says {t} " + "w " * k,
                                    handle=f"{seq:064x}"))
    return out


def _assemble(events, meter, cache=None):  # type: ignore[no-untyped-def]
    return assemble_window(SESSION, events, budget=BUDGET, meter=meter, item_cap_tokens=400, leaf_cache=cache)


def test_message_items_carry_the_meters_counts_and_a_memo_changes_nothing() -> None:
    meter, cache = PositionalMeter(), SessionMemo()
    events = _events(12)
    previous = None
    for n in range(2, len(events) + 1):
        prefix = [*events[:n], StepEvent(seq=n + 1, event_id=f"s{n}", text="go on")]
        got, fresh = _assemble(prefix, meter, cache), _assemble(prefix, meter)
        assert got.items == fresh.items and got.elided == fresh.elided
        leaf = got.conversation.leaf
        counts = got.measurement.leaf_tokens
        assert counts is not None
        expected = {m.seq: c for m, c in zip(leaf, counts) if c is not None and m.role != "tool"}
        for item in got.items:
            if item.kind == "message" and item.zone == "leaf":
                assert item.tokens == expected.get(item.seq), (n, item)
            elif item.kind != "tool_result":
                assert item.tokens is None, (n, item)
        assert all(i.tokens is None for i in got.elided if i.kind == "message")
        messages = sum(i.tokens or 0 for i in got.items if i.kind == "message")
        tools = sum(c or 0 for m, c in zip(leaf, counts) if m.role == "tool" or m.seq == n + 1)  # results, the step
        assert messages + tools + 2 == got.measurement.by_zone["leaf"], n  # + the generation prompt
        if previous is not None:
            before = {i.seq: i for i in previous.items if i.kind == "message" and i.tokens is not None}
            now = {i.seq: i for i in got.items if i.kind == "message" and i.tokens is not None}
            same_count = [s for s in now if s in before and before[s].tokens == now[s].tokens]
            assert same_count and all(now[s] is before[s] for s in same_count), "unchanged: the same object"
        previous = got


def test_a_meter_without_per_message_counts_leaves_messages_without_tokens() -> None:
    got = _assemble([*_events(3), StepEvent(seq=99, event_id="s", text="go on")], WordMeter(), SessionMemo())
    assert got.measurement.leaf_tokens is None
    assert [i for i in got.items if i.kind == "message" and i.tokens is not None] == []
