"""Issue 10 item 3 and the grounding gap: T_lo achievable (validated at profile load), where a
pass leaves the request and why it is above T_lo when it is (the manifest's
``compaction.after_pass``, ``ctxd eval``'s passes ending above T_lo), the record held to its
budget at its floor (terse exit-status lines), and the names index
keeping dunders, leading-underscore names and the innermost traceback frames of failed
results.

Real events: shared trajectories' domain events (tests/domain_events.py) with the
unit-token WordMeter, as in tests/unit/test_compaction_select.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.domain.assembly import assemble_window, build_turn_groups
from app.domain.compaction.evidence import check_protected, protected_inventory
from app.domain.compaction.fold import Fold
from app.domain.compaction.record import build_record, names_of, render_record
from app.domain.compaction.watermarks import LEAF_FLOOR, OVER_TARGET_REASONS, Watermarks
from app.domain.planner import Policy, compaction_report
from app.domain.session_memo import SessionMemo
from app.domain.state import LayoutState
from app.domain.types import MessageEvent, ToolCall, ToolResultEvent, TurnGroup
from ctxd_tools.eval.measures import Prices
from ctxd_tools.eval.replay import CallRecord
from ctxd_tools.eval.report import summarize
from tests.traces import TRACE_FILES
from tests.unit.test_compaction_select import BUDGET, session_of
from tests.unit.wordmeter import WordMeter

PROFILE = ('[p]\nmodel = "m"\ntokenizer = { kind = "hf_dir", path = "x" }\nwindow = 32768\noutput_reserve = 4096\n'
           'headroom = 512\nt_hi = 8448\nrecord_tokens = 1500\n')


def _trace(name: str) -> Path:
    return next(f for f in TRACE_FILES if f.name == name)


# ---------------------------------------------------------------- T_lo achievable


def test_t_lo_below_record_budget_plus_leaf_floor_is_refused_at_profile_load(tmp_path: Path) -> None:
    """A pass leaves the record at its budget plus root, contract and the newest group:
    T_lo 2,011 with a record budget of 1,500 can never be reached (refused, naming why);
    2,012 = 1,500 + LEAF_FLOOR loads. The shipped profiles all pass.

    Peer fault of this kind: a compaction threshold set below the irreducible context
    (system prompt + summary) compacts on every turn with no guard or warning
    (PrimeIntellect-ai/nano-rlm#54)."""
    from app.tokenizers.profiles import load_profiles

    assert LEAF_FLOOR == 512
    path = tmp_path / "p.toml"
    path.write_text(PROFILE + "t_lo = 2011\n")
    with pytest.raises(ValueError, match=r"t_lo 2011 is not achievable.*record_tokens \+ 512"):
        load_profiles(path)
    path.write_text(PROFILE + "t_lo = 2012\n")
    assert load_profiles(path)["p"].watermarks.t_lo == 2012
    for profile in load_profiles().values():
        marks = profile.watermarks
        assert marks.t_lo >= marks.record_tokens + LEAF_FLOOR, profile.name


def test_shipped_watermarks_are_the_measured_ones() -> None:
    """The defaults after each profile's own sweep (README "Compaction"): qwen3 and
    qwen3-nothink T_hi 0.30 / T_lo 0.20 of input_limit 28,160, K 1 (T_lo at or above root +
    contract + record budget on all 32 shared traces: largest 3,019 + 1,500); mistral-tekken
    T_hi 0.35 / T_lo 0.233, K 2 (the cheapest setting with grounding >= 0.95)."""
    from app.tokenizers.profiles import load_profiles

    profiles = load_profiles()
    marks = profiles["qwen3"].watermarks
    assert marks.as_dict() == {"t_hi": 8448, "t_lo": 5632, "keep_groups": 1, "record_tokens": 1500,
                               "user_text_tokens": 2048}
    assert marks.t_lo >= 3019 + marks.record_tokens
    assert profiles["qwen3-nothink"].watermarks == marks, "its own sweep chose the same (README)"
    assert profiles["mistral-tekken"].watermarks.as_dict() == {"t_hi": 9856, "t_lo": 6569, "keep_groups": 2,
                                                                "record_tokens": 1500, "user_text_tokens": 2048}


# ---------------------------------------------------------------- after a pass


@pytest.mark.parametrize("name", ["pydicom__pydicom-901__chat.traj.json", "sqlfluff__sqlfluff-1517__chat.traj.json"])
def test_every_pass_ends_at_or_below_t_lo_or_names_why(name: str) -> None:
    """Each pass (WordMeter, T_hi 5,000, T_lo 2,200, K 1, record 700): at or below T_lo with
    no reason, or above with a reason of OVER_TARGET_REASONS that holds: ``newest_group``
    only with every group but the newest folded; the manifest's ``after_pass`` says the
    same (tokens, T_lo, over).

    Peer fault of this kind: a compacted context that can never drop back below the
    threshold, so every turn compacts again (NousResearch/hermes-agent#109681)."""
    marks = Watermarks(t_hi=5000, t_lo=2200, keep_groups=1, record_tokens=700)
    fold = Fold(marks)
    session, events, counts = session_of(_trace(name))
    policy = Policy("unit", BUDGET, item_cap_tokens=800, fold=fold)
    cut, passes = 0, 0
    cache = SessionMemo()
    over: list[str] = []
    for n in counts:
        if n == 0:
            continue
        a = assemble_window(session, events[:n], budget=BUDGET, meter=WordMeter(), item_cap_tokens=800,
                            previous_cut_seq=cut, leaf_cache=cache, fold=fold)
        if a.evicted_now > 0:  # a pass (the cut moved past groups)
            passes += 1
            report = compaction_report(a, policy, LayoutState(cut_seq=a.cut_seq))
            assert report["after_pass"] == {"tokens": a.measurement.total, "t_lo": 2200, "over": a.over_target}
            if a.measurement.total <= marks.t_lo:
                assert a.over_target is None
            else:
                assert a.over_target in OVER_TARGET_REASONS
                over.append(a.over_target)
                groups, _, _ = build_turn_groups(events[:n])
                newest = [g for g in groups if g.results or g.message.content.strip()][-1]
                if a.over_target == "newest_group":
                    assert a.cut_seq == newest.first_seq, "K shrank to the newest group"
        else:
            assert a.over_target is None
            assert "after_pass" not in compaction_report(a, policy, LayoutState(cut_seq=a.cut_seq))
        cut = a.cut_seq
    assert passes >= 2
    assert set(over) <= {"newest_group"}, over


# ---------------------------------------------------------------- the record at its floor


def test_record_floor_shares_exit_status_lines_and_keeps_every_protected_field() -> None:
    """sqlfluff-1517 folds 105 groups with 22 protected results (many ``grep`` exit 1): with
    every group collapsed the record is still over a 250-word budget (the floor). The floor
    is now terse: exit-status-only results share one line per status and scope (``#24 #28
    -> exit 1 at path@r0``); it is smaller than the plain floor, every protected field of
    what it folds still in it."""
    session, events, _ = session_of(_trace("sqlfluff__sqlfluff-1517__chat.traj.json"))
    contract = session.contract
    groups, _, _ = build_turn_groups(events)
    fold_seq = groups[106].first_seq
    meter = WordMeter()
    record = build_record(contract, events, groups, fold_seq=fold_seq, budget_tokens=250, count=meter.count_text)
    assert record.collapsed == sum(1 for g in groups[:106] if g.message.kind == "message") and record.terse
    text = render_record(record, with_contract=False)
    assert "#24 #28 #41 #47 -> exit 1 at src/sqlfluff/dialects/dialect_ansi.py@r0" in text
    plain = render_record(type(record)(**{**record.__dict__, "terse": False}), with_contract=False)
    assert record.tokens == meter.count_text(text) < meter.count_text(plain)
    folded = [e for e in events if e.seq in set(record.folded_seqs)]
    assert check_protected(protected_inventory(folded, contract), [render_record(record)]) == []
    roomy = build_record(contract, events, groups, fold_seq=fold_seq, budget_tokens=100_000, count=meter.count_text)
    assert not roomy.terse


# ---------------------------------------------------------------- the names index


def test_names_index_keeps_dunders_private_names_and_innermost_frames() -> None:
    """The grounding misses under select were mostly names only a folded output showed, and
    ``__name__`` (22 misses): the index now takes ``__name__`` and ``_eval`` like the
    grounding rule does, and ``path:line`` + function of a failed result's innermost
    traceback frames (Python's and pytest's), newest group first."""
    call = MessageEvent(seq=1, event_id="m1", role="assistant", content="Check `__name__` and _eval in x", handle="h1",
                        tool_calls=(ToolCall(call_id="c1", name="bash", arguments='{"command": "python t.py"}'),))
    payload = ('Traceback (most recent call last):\n  File "/testbed/t.py", line 3, in <module>\n'
               '  File "/testbed/src/marshmallow/schema.py", line 875, in _invoke_validators\n'
               "    validated_value = v(value)\nValueError: bad\ntests/test_x.py:44: in test_y\n")
    failed = ToolResultEvent(seq=2, event_id="r1", call_id="c1", payload=payload, handle="h2", exit_code=1)
    ok = ToolResultEvent(seq=2, event_id="r1", call_id="c1", payload=payload, handle="h2", exit_code=0)
    names = names_of([TurnGroup(message=call, results=(failed,))])
    assert names[:4] == ("tests/test_x.py:44", "test_y", "src/marshmallow/schema.py:875", "_invoke_validators")
    assert "t.py:3" in names and "<module>" not in names
    assert {"__name__", "_eval"} <= set(names)
    assert "_invoke_validators" not in names_of([TurnGroup(message=call, results=(ok,))]), "failed results only"


def test_names_index_treats_escape_sequences_as_separators() -> None:
    """``printf "a\\nThe value\\nfoo_bar"`` in a command held the names ``nThe`` and
    ``nfoo_bar`` (the escape's letter glued to the next word); an escape is a separator."""
    command = r'printf "Result:\nThe value\nfoo_bar\tGetThing\r"'
    call = MessageEvent(seq=1, event_id="m1", role="assistant", content="Print it", handle="h1",
                        tool_calls=(ToolCall(call_id="c1", name="bash", arguments=json.dumps({"command": command})),))
    names = names_of([TurnGroup(message=call, results=())])
    assert {"foo_bar", "GetThing"} <= set(names)
    assert not {"nThe", "nfoo_bar", "tGetThing"} & set(names)


# ---------------------------------------------------------------- ctxd eval


def _call(i: int, tokens: int, passed: bool, over: str | None = None) -> CallRecord:
    return CallRecord(call=i, failed_call=False, input_tokens=tokens, cached_tokens=0, uncached_tokens=tokens,
                      over_limit=False, by_role={}, by_zone={}, constraints_retained=0, constraints_total=0,
                      pair_errors=0, superseded=0, stale=0, grounding_candidates=0, grounding_hits=0,
                      grounding_via_handle_hits=0, compaction_pass=passed, pass_over_target=over)


def test_eval_counts_passes_ending_above_t_lo_by_reason() -> None:
    records = [_call(0, 9000, False), _call(1, 4000, True), _call(2, 7000, True, "newest_group"),
               _call(3, 6000, True, "pinned"), _call(4, 8000, False)]
    s = summarize(records, Prices(3.0, 0.3), None)
    assert (s["passes"], s["passes_above_t_lo"], s["after_pass_median_tokens"]) == (3, 2, 6000)
    assert s["passes_above_t_lo_by_reason"] == {"newest_group": 1, "pinned": 1}
    assert summarize(records[:1], Prices(3.0, 0.3), None)["after_pass_median_tokens"] is None
