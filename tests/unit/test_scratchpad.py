"""Issue 16 in the domain (app/domain/scratchpad.py, assembly): under the window policy an
evicted plan version survives in the elision note; documents stay next to the instruction
(after the last turn, before the step) through evictions; the invariants of
tests/unit/test_window_policy.py hold with plans, documents and conclusions in the log."""

from __future__ import annotations

from app.domain.assembly import assemble_window
from app.domain.budget import Budget
from app.domain.scratchpad import current_documents, latest_plan
from app.domain.types import ChildConclusionEvent, DocumentEvent, PlanEvent, StepEvent
from tests.unit.test_window_policy import SESSION, check_invariants, session_events
from tests.unit.wordmeter import WordMeter


def test_documents_split_current_and_replaced_by_key() -> None:
    d = [DocumentEvent(seq=s, event_id=f"d{s}", key=k, source="src", text=f"text {s}", handle=f"{s:064x}")
         for s, k in ((1, "a"), (2, "b"), (3, "a"), (4, "a"))]
    docs = current_documents(list(reversed(d)))
    assert [x.seq for x in docs.current] == [2, 4] and [x.seq for x in docs.replaced] == [1, 3]
    assert docs.replaced_by(d[0]) is d[3]
    assert latest_plan([]) is None


def test_window_eviction_keeps_the_latest_plan_in_the_note_and_documents_last() -> None:
    # turn 0 (seqs 1-2), the plan (3), turns 1-4 (4-11), then a document, a conclusion and a step
    shifted = []
    for e in session_events([[40], [40], [40], [40], [40]]):
        shifted.append(e if e.seq <= 2 else type(e)(**{**e.__dict__, "seq": e.seq + 1}))
    plan = PlanEvent(seq=3, event_id="p1", text="PLAN ONE", version=1, handle="a" * 64)
    doc = DocumentEvent(seq=12, event_id="d1", key="api", source="https://x", text="DOC TEXT", handle="b" * 64)
    concl = ChildConclusionEvent(seq=13, event_id="child:c:1", child="c" * 32, child_seq=1, text="CHILD SAYS",
                                 handle="c" * 64)
    step = StepEvent(seq=14, event_id="s", text="go on")
    events = [*shifted[:2], plan, *shifted[2:], doc, concl, step]
    budget = Budget(window=330, output_reserve=50, headroom=10)
    result = assemble_window(SESSION, events, budget=budget, meter=WordMeter(), item_cap_tokens=1000)
    check_invariants(result, events, budget)
    conv = result.conversation
    assert result.evicted_now > 0
    plan_item = next(i for i in (*result.items, *result.elided) if i.seq == 3)
    assert plan_item.representation == "elided" and plan_item.kind == "plan"
    assert "Plan as of seq 3" in conv.trunk and "PLAN ONE" in conv.trunk, "the evicted plan survives in the note"
    contents = [m.content for m in conv.leaf]
    assert contents[-1] == "Next step: go on" and contents[-2].startswith("## Retrieved document [api]")
    assert contents[-3].startswith("## Conclusion of sub-agent session " + "c" * 32)
    by_seq = {i.seq: i for i in result.items}
    assert by_seq[12].kind == "document" and by_seq[12].zone == "leaf"
    assert by_seq[13].kind == "child_conclusion" and by_seq[13].zone == "leaf"
    # the plan's text counts under task_state even in the trunk (there it is the trunk's)
    m = result.measurement
    assert sum(m.by_role.values()) == m.total


def test_fit_plan_keeps_short_plans_and_cuts_long_ones_whole_lines_within_the_limit() -> None:
    """issue 16: the plan folded into the record takes at most its share of the record budget."""
    from app.domain.compaction.record import fit_plan

    def words(text: str) -> int:
        return len(text.split())

    short = "1. reproduce\n2. fix parse()"
    assert fit_plan(short, "ab" * 32, 100, words) == short
    long = "\n".join(f"step {i} of the plan" for i in range(200))  # 5 words a line, 1,000 in all
    cut = fit_plan(long, "ab" * 32, 100, words)
    lines = cut.split("\n")
    assert words(cut) <= 100 and lines[0] == "step 0 of the plan" and lines[-1] == "step 199 of the plan"
    kept = [line for line in lines if line.startswith("step ")]
    assert all(line in long.split("\n") for line in kept)
    (marker,) = [line for line in lines if line.startswith("[... ")]
    dropped = [line for line in long.split("\n") if line not in kept]
    assert marker == (f"[... {len(dropped):,} lines ({len(chr(10).join(dropped).encode()):,} bytes) of this plan cut here "
                      f"to fit the record; the whole plan is handle {'ab' * 6} ...]")
    one_line = "word " * 500  # no line fits: the marker alone, still within the limit
    assert fit_plan(one_line, "cd" * 32, 60, words).startswith("[... 1 lines (2,500 bytes)")
    assert words(fit_plan(one_line, "cd" * 32, 60, words)) <= 60
