"""The window policy's per-session memo (``assemble_window(leaf_cache=...)``): a GET reuses
what earlier GETs derived from unchanged turn groups, and the result is the one a fresh
assembly gives (issue 9: speed without a process-global cache)."""

from __future__ import annotations

import dataclasses

from app.api import deps
from app.domain.assembly import assemble_window
from app.domain.assembly.passes import _leaf_size, _size
from app.domain.budget import Budget
from app.domain.compaction.fold import Fold, pinned_group
from app.domain.compaction.watermarks import Watermarks
from app.domain.layout import LeafMessage, LeafToolCall
from app.domain.notes import note_items
from app.domain.session_memo import SessionMemo
from app.domain.types import HypothesisEvent, ObligationEvent, StepEvent
from tests.unit.test_window_policy import SESSION, session_events
from tests.unit.wordmeter import WordMeter

BUDGET = Budget(window=4000, output_reserve=100, headroom=100)


def assemble(events, cache=None, cut=0, counts=None):
    return assemble_window(SESSION, events, budget=BUDGET, meter=WordMeter(), item_cap_tokens=400,
                           previous_cut_seq=cut, leaf_cache=cache, payload_tokens=counts)


def same(a, b) -> None:
    assert a.conversation == b.conversation
    assert a.measurement.total == b.measurement.total and a.measurement.by_zone == b.measurement.by_zone
    assert a.items == b.items and a.elided == b.elided and a.ranges == b.ranges
    assert a.cut_seq == b.cut_seq and a.warnings == b.warnings and a.derived_payloads == b.derived_payloads
    assert a.invalidation == b.invalidation


def test_a_growing_session_assembles_as_without_a_memo_and_reuses_unchanged_groups() -> None:
    meter = WordMeter()
    cache = SessionMemo()
    events = session_events([[30, 20]] * 40)
    cut = 0
    previous = None
    for n in range(3, len(events) + 1, 3):
        prefix = events[:n] + [StepEvent(seq=n + 1, event_id=f"s{n}", text="go on")]
        counts = {e.handle: 7 for e in prefix[: n // 2] if hasattr(e, "payload")}  # some counts become known
        got = assemble_window(SESSION, prefix, budget=BUDGET, meter=meter, item_cap_tokens=400,
                              previous_cut_seq=cut, leaf_cache=cache, payload_tokens=counts)
        fresh = assemble_window(SESSION, prefix, budget=BUDGET, meter=meter, item_cap_tokens=400,
                                previous_cut_seq=cut, payload_tokens=counts)
        same(got, fresh)
        if previous is not None and got.cut_seq == previous.cut_seq:
            # the leaf messages of groups both requests carry are the very same objects
            old = {id(m) for m in previous.conversation.leaf if m.role != "user"}
            shared = [m for m in got.conversation.leaf[:-4] if m.role != "user"]  # not the newest group, the step
            assert shared and all(id(m) in old for m in shared)
        cut, previous = got.cut_seq, got
    assert previous is not None and previous.cut_seq > 0, "the replay evicted, so the memo met a trunk rewrite"


def test_select_with_a_memo_assembles_as_without_and_keeps_notes_out_of_the_groups() -> None:
    """Select's fold on the memo's grouping (issue 10 merged with the per-group views):
    hypothesis and obligation events are neither turn groups nor artifact writes, the
    progress record replaces the elision note (whose cache is then not used), and a
    growing session assembles as it does without a memo, passes included."""
    fold = Fold(Watermarks(t_hi=2500, t_lo=1500, keep_groups=3, record_tokens=400))
    events: list = []
    for i, event in enumerate(session_events([[30, 20]] * 30)):
        events.append(dataclasses.replace(event, seq=len(events) + 1))
        if i % 7 == 3:
            events.append(HypothesisEvent(seq=len(events) + 1, event_id=f"h{i}", key=f"h{i % 2}",
                                          text=f"maybe {i}", status="working"))
            events.append(ObligationEvent(seq=len(events) + 1, event_id=f"o{i}", key="o", text=f"run tests {i}",
                                          status="open"))
    meter, cache, cut, passes = WordMeter(), SessionMemo(), 0, 0
    for n in range(4, len(events) + 1, 4):
        prefix = events[:n] + [StepEvent(seq=n + 1, event_id=f"s{n}", text="go on")]
        notes = {e.seq for e in prefix if e.kind in ("hypothesis", "obligation")}
        got = assemble_window(SESSION, prefix, budget=BUDGET, meter=meter, item_cap_tokens=400,
                              previous_cut_seq=cut, leaf_cache=cache, fold=fold)
        fresh = assemble_window(SESSION, prefix, budget=BUDGET, meter=meter, item_cap_tokens=400,
                                previous_cut_seq=cut, fold=fold)
        same(got, fresh)
        assert got.record == fresh.record and got.record is not None
        assert not notes & {m.seq for m in got.conversation.leaf}, "notes are never leaf messages"
        grouping = cache.turn_groups
        assert grouping.writes == [] and not notes & {s for g in grouping.groups for s in g.seqs}
        # what the grouping keeps as it grows equals what a scan of every event finds
        assert [e.seq for e in grouping.notes] == sorted(notes)
        assert grouping.note_items() == note_items(prefix) and len(grouping.note_items()) == len(notes)
        assert grouping.pinned == pinned_group(grouping.groups)
        assert grouping.conclusions == []
        assert not cache.elision_notes, "the record replaces the note: no note is cached"
        assert "Elided history" not in got.conversation.trunk
        passes += got.cut_seq > cut
        cut = got.cut_seq
    assert passes >= 2 and cut > 0, "the replay ran passes, so the memo met trunk rewrites"


def test_events_read_again_as_new_objects_do_not_pile_up_in_the_memo() -> None:
    cache = SessionMemo()
    events = session_events([[10, 10]] * 12)
    for _ in range(20):  # another snapshot of the same events, as a worker re-reading them would have
        copies = [dataclasses.replace(e) for e in events]
        same(assemble(copies, cache), assemble(events))
    views = next(iter(cache.group_views.values()))
    assert len(views) <= 2 * 12 + 64


def test_api_dependencies_do_not_hop_to_the_thread_pool() -> None:
    """FastAPI runs a plain ``def`` dependency in its thread pool (a thread hop per
    dependency and request: fastapi/fastapi#1306); ctxd's only read app.state."""
    import inspect

    for name in ("unit_of_work_dep", "database", "profiles", "meters", "memo", "shell_states"):
        assert inspect.iscoroutinefunction(getattr(deps, name)), name


def test_leaf_size_from_the_last_leaf_equals_a_full_count() -> None:
    """select's growth forecast sizes the whole leaf each GET; with the memo only the
    messages after the last leaf's (all but its last, the next step) are visited. Equal to
    a full count when the leaf extends, is rewritten in place, shrinks or stays."""
    def msg(i: int, text: str = "") -> LeafMessage:
        return LeafMessage(role="tool" if i % 2 else "assistant", content=text or f"message {i} " * (i % 5 + 1),
                           seq=i, tool_calls=() if i % 2 else (LeafToolCall(f"c{i}", "bash", '{"command": "ls"}'),))

    base = tuple(msg(i) for i in range(40))
    step = LeafMessage(role="user", content="next step")
    memo = SessionMemo()
    leaves = [base + (step,), base + (msg(40), msg(41), step), base + (msg(40), msg(41), step),
              base[:10] + (msg(10, "rewritten in place"),) + base[11:] + (step,), base[:5] + (step,), (step,), ()]
    for leaf in leaves:
        assert _leaf_size(leaf, memo) == _size(leaf) == _leaf_size(leaf, None)


def test_items_loop_resumes_only_when_the_maps_agree_on_every_earlier_key() -> None:
    """The items loop resumes from the last GET's (app/domain/assembly.py ``_ItemsLoop``)
    only when invalidation's states, choices and bindings kept every entry they had and
    gained keys only past the groups it visited."""
    from app.domain.assembly.views import _agree

    then = {3: "current", 7: "historical"}
    assert _agree(then, then, 7)
    assert _agree(dict(then), then, 7), "equal values, another map"
    assert _agree({**then, 9: "current"}, then, 7), "a key of a later event"
    assert not _agree({**then, 5: "possibly_stale"}, then, 7), "a key of an event the loop visited"
    assert not _agree({3: "historical", 7: "historical"}, then, 7), "a changed value"
    assert not _agree({3: "current"}, then, 7), "a lost key"
