"""Turn-group eviction and the window policy's invariants (unit-token meter)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.assembly import NOTE_MAX_GROUPS, assemble_window, build_turn_groups
from app.domain.budget import Budget
from app.domain.errors import PinnedOverBudget
from app.domain.types import Constraint, Contract, MessageEvent, Session, StepEvent, ToolCall, ToolResultEvent
from tests.unit.wordmeter import WordMeter

SESSION = Session(
    id="s", profile="unit", system="be careful",
    contract=Contract(goal="fix the bug", constraints=(Constraint("c1", "do not touch tests"),)),
    tools=({"type": "function", "function": {"name": "bash", "parameters": {}}},),
)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def session_events(turns: list[list[int]], *, reversed_results: bool = True) -> list:
    """Each turn: an assistant message with one call per size; results (sizes in words)
    arrive in reverse call order to exercise parallel-call pairing."""
    events: list = []
    seq = 0
    for t, sizes in enumerate(turns):
        seq += 1
        calls = tuple(ToolCall(f"t{t}c{j}", "bash", '{"command": "ls"}') for j in range(len(sizes)))
        events.append(MessageEvent(seq=seq, event_id=f"a{t}", role="assistant", content=f"turn {t}", handle=f"{t:064x}", tool_calls=calls))
        order = list(enumerate(sizes))
        if reversed_results:
            order.reverse()
        for j, size in order:
            seq += 1
            events.append(ToolResultEvent(seq=seq, event_id=f"r{t}-{j}", call_id=f"t{t}c{j}", payload=words(size, f"t{t}r{j}w"),
                                          handle=f"{t:032x}{j:032x}", exit_code=0))
    return events


def check_invariants(result, events, budget) -> None:
    conv = result.conversation
    assert result.measurement.total <= budget.input_limit
    calls = [c.call_id for m in conv.leaf for c in m.tool_calls]
    results = [m.call_id for m in conv.leaf if m.role == "tool"]
    assert sorted(calls) == sorted(results), "every call has its result and every result its call"
    assert "do not touch tests" in conv.trunk
    elided_handles = {e.handle for e in result.elided if e.kind == "tool_result"}
    index_text = " ".join(data.decode() for data in result.derived_payloads.values())
    for handle in result.derived_payloads:
        assert handle[:12] in conv.trunk, "the note names its index payload"
    for handle in elided_handles:
        assert handle[:12] in conv.trunk or handle in index_text, "the elision note names every dropped handle"
    listed = [i.seq for i in result.items] + [e.seq for e in result.elided]
    assert len(listed) == len(set(listed)), "an event is listed once"
    unlisted = {e.seq for e in events} - set(listed)
    assert set(listed) <= {e.seq for e in events}
    assert len(unlisted) == sum(r.events for r in result.ranges), "every other event is in a range"
    assert all(any(r.seq_from <= seq <= r.seq_to for r in result.ranges) for seq in unlisted)
    assert len(result.elided) <= 4 * NOTE_MAX_GROUPS and len(result.ranges) <= 1, "bounded by the window"


def test_groups_pair_parallel_calls_out_of_order() -> None:
    events = session_events([[3, 4, 5]])
    groups, step, writes = build_turn_groups(events)
    assert len(groups) == 1
    assert [r.call_id for r in groups[0].results] == ["t0c0", "t0c1", "t0c2"]
    assert groups[0].pending == ()


def test_only_the_latest_step_is_shown_and_older_ones_are_accounted() -> None:
    events = session_events([[3]]) + [StepEvent(seq=3, event_id="s1", text="first"), StepEvent(seq=4, event_id="s2", text="second")]
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    check_invariants(result, events, budget)
    assert result.conversation.leaf[-1].content == "Next step: second"
    assert not any("first" in m.content for m in result.conversation.leaf)
    older = next(i for i in result.items if i.event_id == "s1")
    assert older.representation == "superseded" and older.zone is None


def test_pending_call_is_not_rendered() -> None:
    events = session_events([[3, 3]])[:-1]  # the second result (call t0c0) has not arrived
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    assistant = [m for m in result.conversation.leaf if m.role == "assistant"][0]
    assert [c.call_id for c in assistant.tool_calls] == ["t0c1"]
    check_invariants(result, events, budget)


def test_eviction_drops_whole_oldest_groups_with_note() -> None:
    events = session_events([[40, 40], [40], [40, 40, 40], [40], [40]])
    budget = Budget(window=400, output_reserve=50, headroom=10)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    check_invariants(result, events, budget)
    assert result.elided, "something had to go"
    assert "## Elided history" in result.conversation.trunk
    dropped_turns = {e.event_id for e in result.elided if e.kind == "message"}
    assert "a0" in dropped_turns  # the oldest goes first
    kept_first = result.conversation.leaf[0]
    assert kept_first.role == "assistant"


def test_cut_only_moves_forward_and_leaf_is_append_stable() -> None:
    turns = [[30]] * 12
    budget = Budget(window=600, output_reserve=50, headroom=0, low_watermark=350)
    meter = WordMeter()
    cut = 0
    previous = None
    rewrites = 0
    for n in range(1, len(turns) + 1):
        events = session_events(turns[:n])
        result = assemble_window(SESSION, events, budget=budget, meter=meter, item_cap_tokens=1000, previous_cut_seq=cut)
        check_invariants(result, events, budget)
        assert result.cut_seq >= cut
        if previous is not None and result.cut_seq == cut:
            # no eviction: same trunk, and the old leaf is a prefix of the new one
            assert result.conversation.trunk == previous.conversation.trunk
            assert result.conversation.leaf[: len(previous.conversation.leaf)] == previous.conversation.leaf
        elif previous is not None:
            rewrites += 1
            assert result.measurement.total <= budget.eviction_target
        cut, previous = result.cut_seq, result
    assert 1 <= rewrites < len(turns) // 2, "hysteresis: evictions are batched"


def test_note_stays_bounded_with_an_index_of_older_groups() -> None:
    import hashlib
    import json

    events = session_events([[5]] * 120)
    budget = Budget(window=700, output_reserve=50, headroom=0, low_watermark=500)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    check_invariants(result, events, budget)
    note_lines = [line for line in result.conversation.trunk.splitlines() if line.startswith("- seq")]
    assert len(note_lines) == 33, "32 newest dropped groups + one index line"
    (handle, data), = result.derived_payloads.items()
    assert hashlib.sha256(data).hexdigest() == handle
    index = json.loads(data)
    listed_turns = [e for e in result.elided if e.kind == "message"]
    assert len(listed_turns) == 32, "the manifest lists the groups the note lists line by line"
    (older,) = result.ranges
    assert older.index == handle and older.representations == {"elided": 2 * len(index)}
    assert older.seq_from == 1 and older.events == 2 * len(index)
    assert index[0]["turn"] == events[0].handle and index[-1]["seq"] == older.seq_to - 1
    assert listed_turns[0].seq == older.seq_to + 1
    assert older.tokens == 5 * len(index)


def test_item_cap_bounds_tool_output_head_tail() -> None:
    events = session_events([[500]])
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100)
    tool = [m for m in result.conversation.leaf if m.role == "tool"][0]
    assert "t0r0w0 " in tool.content and tool.content.endswith("t0r0w499")
    assert "400 tokens elided" in tool.content and events[1].handle in tool.content
    item = [i for i in result.items if i.kind == "tool_result"][0]
    assert item.representation == "head_tail" and item.elided_tokens == 400


def test_pinned_over_budget_raises_with_role() -> None:
    big = Session(id="s", profile="unit", system="x", tools=(),
                  contract=Contract(goal=words(500, "g"), constraints=()))
    budget = Budget(window=300, output_reserve=50, headroom=0, shares={"system": 0.2, "task_state": 0.4, "observations": 0.4})
    with pytest.raises(PinnedOverBudget) as info:
        assemble_window(big, [StepEvent(seq=1, event_id="s1", text="go")], budget=budget, meter=WordMeter(), item_cap_tokens=100)
    assert info.value.extra["over_roles"] == ["task_state"]
    assert info.value.extra["over_by"] > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(1, 120), min_size=1, max_size=3), min_size=1, max_size=14),
       st.integers(300, 900), st.integers(40, 200))
def test_window_policy_invariants(turns: list[list[int]], window: int, cap: int) -> None:
    events = session_events(turns)
    budget = Budget(window=window, output_reserve=60, headroom=10)
    try:
        result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=cap)
    except PinnedOverBudget:
        return  # the newest group can still not fit a tiny window: an honest refusal
    check_invariants(result, events, budget)


def test_leaf_cache_across_calls_gives_the_same_assembly() -> None:
    """A leaf_cache kept across calls (as the service keeps one per session) changes
    nothing: same conversation, items and counts as without it, as events arrive one by
    one (pending calls resolving, eviction, a late parallel result)."""
    events = session_events([[30, 20], [25], [40, 10, 5], [30], [35], [20, 20]])
    budget = Budget(window=420, output_reserve=50, headroom=10, low_watermark=260)
    cache: dict = {}
    cut_with = cut_without = 0
    for n in range(1, len(events) + 1):
        prefix = events[:n]
        kwargs = dict(budget=budget, meter=WordMeter(), item_cap_tokens=30, render_reasoning=False)
        with_cache = assemble_window(SESSION, prefix, previous_cut_seq=cut_with, leaf_cache=cache, **kwargs)
        without = assemble_window(SESSION, prefix, previous_cut_seq=cut_without, **kwargs)
        assert with_cache.conversation == without.conversation
        assert with_cache.items == without.items and with_cache.elided == without.elided
        assert with_cache.measurement.total == without.measurement.total
        cut_with, cut_without = with_cache.cut_seq, without.cut_seq
    assert cut_with > 0, "the scenario evicts"


def test_leaf_cache_distinguishes_the_item_cap_and_the_meter() -> None:
    events = session_events([[80]])
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    cache: dict = {}
    small = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=20, leaf_cache=cache)
    large = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000, leaf_cache=cache)
    assert small.measurement.total < large.measurement.total
    assert any(i.representation == "head_tail" for i in small.items)
    assert not any(i.representation == "head_tail" for i in large.items)
