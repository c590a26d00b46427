"""Turn-group eviction and the window policy's invariants (unit-token meter)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.assembly import NOTE_MAX_GROUPS, assemble_window, bound_group, build_turn_groups
from app.domain.budget import Budget
from app.domain.errors import NewestGroupOverBudget, PinnedOverBudget
from app.domain.framing import unframe
from app.domain.session_memo import SessionMemo
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
    groups, _step, _writes = build_turn_groups(events)
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
    assistant = next(m for m in result.conversation.leaf if m.role == "assistant")
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
    payload = events[1].payload
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100)
    tool = next(m for m in result.conversation.leaf if m.role == "tool")
    assert tool.content.startswith('<<<ctxd-data source="tool:bash" revision="unbound" trust="untrusted">>>\n')
    assert "t0r0w0 " in unframe(tool.content) and unframe(tool.content).endswith("t0r0w499")
    elided = payload[len(words(50, "t0r0w")) : len(payload) - len(" ".join(f"t0r0w{i}" for i in range(450, 500)))]
    assert elided.startswith(" t0r0w50 ") and elided.endswith("t0r0w449 ")
    # the marker: size in lines and bytes of what is left out, and the handle with the lines to read
    marker = (f"[... 1 lines ({len(elided.encode()):,} bytes) elided by ctxd; the whole output is handle "
              f"{events[1].handle}: GET /v1/handles/{events[1].handle}?lines=1:1 ...]")
    assert marker in tool.content and "tokens" not in tool.content
    item = next(i for i in result.items if i.kind == "tool_result")
    assert item.representation == "head_tail" and item.elided_bytes == len(elided.encode())
    assert item.elided_lines == (1, 1) and item.bytes == len(payload) and item.lines == 1
    assert item.tokens_known is False and item.tokens is None and not item.elided_tokens
    # with the payload's count known (stored after its POST): reported in the manifest, same body
    known = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100,
                            payload_tokens={events[1].handle: 500})
    assert known.conversation == result.conversation
    item = next(i for i in known.items if i.kind == "tool_result")
    assert item.tokens_known is True and item.tokens == 500 and item.elided_tokens == 400


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
    except (PinnedOverBudget, NewestGroupOverBudget):
        return  # the newest group can still not fit a tiny window: an honest refusal
    check_invariants(result, events, budget)


def test_leaf_cache_across_calls_gives_the_same_assembly() -> None:
    """A leaf_cache kept across calls (as the service keeps one per session) changes
    nothing: same conversation, items and counts as without it, as events arrive one by
    one (pending calls resolving, eviction, a late parallel result)."""
    events = session_events([[30, 20], [25], [40, 10, 5], [30], [35], [20, 20]])
    budget = Budget(window=420, output_reserve=50, headroom=10, low_watermark=260)
    cache = SessionMemo()
    cut_with = cut_without = 0
    for n in range(1, len(events) + 1):
        prefix = events[:n]
        kwargs = {"budget": budget, "meter": WordMeter(), "item_cap_tokens": 30, "render_reasoning": False}
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
    cache = SessionMemo()
    small = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=20, leaf_cache=cache)
    large = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000, leaf_cache=cache)
    assert small.measurement.total < large.measurement.total
    assert any(i.representation == "head_tail" for i in small.items)
    assert not any(i.representation == "head_tail" for i in large.items)


# --- issue 8 item 4: the newest turn group is never evicted silently ---------------------

def with_text(events: list, event_id: str, text: str) -> list:
    """``events`` with the message ``event_id``'s content replaced by ``text``."""
    out = []
    for e in events:
        if isinstance(e, MessageEvent) and e.event_id == event_id:
            e = MessageEvent(seq=e.seq, event_id=e.event_id, role=e.role, content=text, handle=e.handle, tool_calls=e.tool_calls)
        out.append(e)
    return out


def newest_sending(events):
    """The newest turn group that sends something (later ones are dropped or pending)."""
    groups, _, _ = build_turn_groups(events)
    return next((g for g in reversed(groups) if g.results or g.message.content.strip()), groups[-1])


def newest_present(result, events) -> None:
    """Every message and result of the newest turn group is in the leaf, in full or bounded."""
    newest = newest_sending(events)
    leaf = result.conversation.leaf
    assert {m.call_id for m in leaf if m.role == "tool"} >= {r.call_id for r in newest.results}
    if newest.message.content.strip() or newest.results:
        assert any(m.seq == newest.message.seq for m in leaf)
    kept = {i.event_id for i in result.items}
    assert {newest.message.event_id, *(r.event_id for r in newest.results)} <= kept


def test_newest_group_larger_than_the_eviction_target_is_kept_whole() -> None:
    """Before: every group evicted (empty leaf, no error). After: the newest group stays whole."""
    events = session_events([[40], [40], [40], [60] * 5])
    budget = Budget(window=600, output_reserve=50, headroom=0, low_watermark=200)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100)
    check_invariants(result, events, budget)
    newest_present(result, events)
    assert 200 < result.measurement.total <= 550
    assert {e.event_id for e in result.elided if e.kind == "message"} == {"a0", "a1", "a2"}
    tools = [m for m in result.conversation.leaf if m.role == "tool"]
    assert len(tools) == 5 and all(i.representation == "verbatim" for i in result.items if i.kind == "tool_result")
    assert result.cut_seq == 7  # the newest group's first seq


def eight_results_of_100_words(window: int):
    """An older turn, then a turn of eight 100-word results (each under the cap of 200)."""
    events = session_events([[40], [100] * 8])
    budget = Budget(window=window, output_reserve=50, headroom=0,
                    shares={"system": 0.15, "tools": 0.10, "task_state": 0.25, "observations": 0.5})
    counts = {e.handle: len(e.payload.split()) for e in events if isinstance(e, ToolResultEvent)}
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=200,
                             payload_tokens=counts)  # known counts: the manifest gives elided tokens
    check_invariants(result, events, budget)
    newest_present(result, events)
    return result, events, budget


def test_newest_group_over_input_limit_is_bounded_as_a_whole() -> None:
    """input_limit 950: alone the eight results do not fit, so they share the observations
    share (475 of 950) as head + tail, 59 or 60 words each; the request is 831 tokens."""
    result, events, _ = eight_results_of_100_words(1000)
    results = [i for i in result.items if i.kind == "tool_result"]
    kept_words = [i.tokens - i.elided_tokens for i in results]
    assert sorted(kept_words) == [59] * 5 + [60] * 3 and sum(kept_words) == 475
    assert all(i.representation == "head_tail" and "share 475 tokens" in i.why for i in results)
    # 13 root + 79 trunk (contract + note) + assistant 4+2+8*4
    # + 8 results * (4 + 2 + kept + 17 marker + 5 frame words: app/domain/framing.py) + 2
    assert result.measurement.total == 13 + 79 + 38 + 8 * (23 + 5) + 475 + 2 == 831
    by_call = {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}
    for message in (m for m in result.conversation.leaf if m.role == "tool"):
        assert by_call[message.call_id].handle in message.content and "elided by ctxd" in message.content
    assert any("newest turn group does not fit" in w for w in result.warnings)


def test_newest_group_bounded_to_the_room_left_when_below_the_share() -> None:
    """The same group with input_limit 550: the room left by the pinned content and the
    eight frames (5 words each: 234 - 40 = 194 words for the results) is below the
    observations share (275); the request uses it exactly."""
    result, _, budget = eight_results_of_100_words(600)
    kept_words = [i.tokens - i.elided_tokens for i in result.items if i.kind == "tool_result"]
    assert sum(kept_words) == 194 and max(kept_words) - min(kept_words) <= 1
    assert result.measurement.total == budget.input_limit == 550


def test_single_oversized_result_goes_behind_its_handle_before_crossing_input_limit() -> None:
    """A per-item cap above input_limit (a custom profile) does not let one result cross it."""
    events = session_events([[2000]])
    budget = Budget(window=600, output_reserve=50, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=5000)
    check_invariants(result, events, budget)
    newest_present(result, events)
    (item,) = [i for i in result.items if i.kind == "tool_result"]
    assert item.representation == "head_tail" and item.tokens == 2000
    tool = next(m for m in result.conversation.leaf if m.role == "tool")
    assert events[1].handle in tool.content and unframe(tool.content).startswith("exit_code: 0\nt0r0w0 ")
    assert unframe(tool.content).endswith("t0r0w1999")


def test_newest_group_that_cannot_fit_is_a_422_naming_it() -> None:
    """A 1000-word assistant text: system 6 + tools 7 + trunk 25 + assistant 4 + 1000 + call 4
    + result (4 + 'exit_code: 0' + 3 words, shorter than its marker, so verbatim) 9 + its
    frame 5 + generation 2 = 1062 tokens, 512 over input_limit 550."""
    events = with_text(session_events([[3]]), "a0", words(1000, "x"))
    budget = Budget(window=600, output_reserve=50, headroom=0)
    with pytest.raises(NewestGroupOverBudget) as info:
        assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100)
    extra = info.value.extra
    assert (extra["seq"], extra["seqs"], extra["event_ids"]) == (1, [1, 2], ["a0", "r0-0"])
    assert (extra["total"], extra["over_by"], extra["input_limit"]) == (1062, 512, 550)
    assert "seq 1" in info.value.detail and "a0, r0-0" in info.value.detail and "512 over" in info.value.detail


@pytest.mark.parametrize("later", [
    MessageEvent(seq=99, event_id="later", role="assistant", content="", handle="c" * 64),
    MessageEvent(seq=99, event_id="later", role="user", content="  ", handle="c" * 64),
    MessageEvent(seq=99, event_id="later", role="assistant", content="", handle="c" * 64,
                 tool_calls=(ToolCall("waiting", "bash", "{}"),)),
])
def test_a_later_message_that_sends_nothing_does_not_expose_the_newest_group(later: MessageEvent) -> None:
    """An empty or pending message after the big group is not "the newest group": the group
    it follows is still kept (bounded), not evicted into an empty leaf."""
    events = session_events([[40], [100] * 8]) + [later]
    budget = Budget(window=1000, output_reserve=50, headroom=0,
                    shares={"system": 0.15, "tools": 0.10, "task_state": 0.25, "observations": 0.5})
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=200)
    check_invariants(result, events, budget)
    newest_present(result, events)
    assert len([m for m in result.conversation.leaf if m.role == "tool"]) == 8
    assert next(i for i in result.items if i.event_id == "later").representation in ("dropped", "pending")


def test_after_the_422_a_newer_group_evicts_the_oversized_one() -> None:
    events = with_text(session_events([[3]]), "a0", words(1000, "x"))
    events.append(MessageEvent(seq=3, event_id="u1", role="user", content="Continue.", handle="f" * 64))
    budget = Budget(window=600, output_reserve=50, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=100)
    check_invariants(result, events, budget)
    assert [m.content for m in result.conversation.leaf] == ["Continue."]
    assert {e.event_id for e in result.elided} == {"a0", "r0-0"}


def test_pinned_content_over_budget_is_still_named_as_pinned() -> None:
    big = Session(id="s", profile="unit", system=words(700, "s"), tools=(), contract=Contract(goal="g", constraints=()))
    events = session_events([[5] * 3])
    with pytest.raises(PinnedOverBudget):
        assemble_window(big, events, budget=Budget(window=600, output_reserve=50, headroom=0), meter=WordMeter(),
                        item_cap_tokens=100)


def test_bound_group_keeps_results_verbatim_when_cutting_would_not_save() -> None:
    events = session_events([[3, 90]])
    groups, _, _ = build_turn_groups(events)
    counts = {r.handle: len(r.payload.split()) for r in groups[0].results}
    out = bound_group(WordMeter(), groups[0], 20, 200, payload_tokens=counts)
    small, large = (out[r.handle] for r in groups[0].results)  # calls t0c0 (3 words), t0c1 (90 words)
    assert small.representation == "verbatim" and small.text == "t0r0w0 t0r0w1 t0r0w2"
    assert large.representation == "head_tail" and large.elided_tokens == 90 - (20 - 3)
    # a share below the marker's size: the 3-word result stays whole (its marker is 17 words)
    tiny = bound_group(WordMeter(), groups[0], 0, 200, payload_tokens=counts)
    assert tiny[groups[0].results[0].handle].representation == "verbatim"
    assert tiny[groups[0].results[1].handle].elided_tokens == 90


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(st.integers(1, 120), min_size=1, max_size=3), max_size=6),
       st.lists(st.integers(0, 400), min_size=0, max_size=12), st.integers(0, 900),
       st.integers(300, 1200), st.integers(20, 2000), st.booleans(), st.sampled_from(["", " ", None]))
def test_newest_group_fits_or_a_422_names_it(older: list[list[int]], newest: list[int], text_words: int,
                                             window: int, cap: int, shares: bool, trailing: str | None) -> None:
    """For any group sizes: either the request fits input_limit with the newest group
    present, or NewestGroupOverBudget names that group (or the pinned content alone is over)."""
    events = session_events(older + [newest])
    last = max((e for e in events if isinstance(e, MessageEvent)), key=lambda e: e.seq)
    events = with_text(events, last.event_id, words(text_words, "m"))
    if trailing is not None:  # a later message that sends nothing
        events.append(MessageEvent(seq=1000, event_id="trailing", role="assistant", content=trailing, handle="c" * 64))
    budget = Budget(window=window, output_reserve=60, headroom=10,
                    shares={"system": 0.15, "tools": 0.10, "task_state": 0.25, "observations": 0.5} if shares else {})
    try:
        result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=cap)
    except NewestGroupOverBudget as exc:
        newest = newest_sending(events)
        assert exc.extra["seq"] == newest.first_seq
        assert exc.extra["event_ids"] == [newest.message.event_id, *(r.event_id for r in newest.results)]
        assert exc.extra["over_by"] == exc.extra["total"] - budget.input_limit > 0
        return
    except PinnedOverBudget as exc:
        assert exc.extra["total"] > budget.input_limit
        return
    check_invariants(result, events, budget)
    newest_present(result, events)


# --- issue 8 item 6: the manifest says exactly what was sent -----------------------------

@pytest.mark.parametrize(("role", "content", "why"), [
    ("assistant", "", "empty message"),
    ("assistant", " \n\t", "whitespace-only text"),
    ("user", "", "empty message"),
    ("user", "   ", "whitespace-only text"),
])
def test_message_no_format_sends_is_listed_as_dropped(role: str, content: str, why: str) -> None:
    events = session_events([[3]]) + [MessageEvent(seq=3, event_id="m", role=role, content=content, handle="e" * 64)]
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    check_invariants(result, events, budget)
    item = next(i for i in result.items if i.event_id == "m")
    assert (item.representation, item.zone) == ("dropped", None) and item.why.startswith(why)
    assert not any(m.seq == 3 for m in result.conversation.leaf)
    assert [m.role for m in result.conversation.leaf] == ["assistant", "tool"]


def test_sent_messages_are_verbatim_and_pending_stays_pending() -> None:
    events = session_events([[3]]) + [
        MessageEvent(seq=3, event_id="u", role="user", content=" go on ", handle="e" * 64),
        MessageEvent(seq=4, event_id="p", role="assistant", content=" ", handle="d" * 64,
                     tool_calls=(ToolCall("late", "bash", "{}"),)),
    ]
    budget = Budget(window=10_000, output_reserve=100, headroom=0)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    by_id = {i.event_id: i for i in result.items}
    assert by_id["u"].representation == "verbatim" and by_id["p"].representation == "pending"
    assert [m.content for m in result.conversation.leaf if m.role == "user"] == [" go on "]
