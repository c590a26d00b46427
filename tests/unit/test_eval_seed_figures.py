"""Seed 000's notebooks 4.1-4.4, reproduced by ctxd's own domain code on synthetic
sessions counted by the unit-token profile (ctxd_tools/eval/synthetic.py). Exact numbers.

Not tested: section 4.9's 167,000 (the stated parameters give 159,000)."""

from __future__ import annotations

import pytest

from app.domain.budget import Budget
from app.domain.layout import Conversation, LeafMessage
from ctxd_tools.eval.measures import names_write
from ctxd_tools.eval.synthetic import (
    SeedParams,
    UnitMeter,
    compaction_cycle_turns,
    notebook_4_1,
    notebook_4_2,
    notebook_4_3,
    notebook_4_4,
    units,
)


@pytest.fixture(scope="module")
def nb41():
    return notebook_4_1()


@pytest.fixture(scope="module")
def nb42():
    return notebook_4_2()


@pytest.fixture(scope="module")
def nb43():
    return notebook_4_3()


@pytest.fixture(scope="module")
def nb44():
    return notebook_4_4()


def test_unit_meter_counts_exact_sizes_without_framing() -> None:
    meter = UnitMeter()
    assert meter.count_text(units("a", 850)) == 850
    assert meter.count_text("# Task contract (version 1)\n## Goal") == 0  # ctxd's framing is free
    conv = Conversation(system=units("s", 3), tools=({"description": units("t", 5)},), trunk="## Goal\n" + units("g", 7),
                        leaf=(LeafMessage(role="tool", content="exit_code: 0\n" + units("o", 11), call_id="c", name="bash"),))
    m = meter.measure(conv)
    assert (m.total, m.by_zone, m.by_role) == (26, {"root": 8, "trunk": 7, "leaf": 11},
                                               {"system": 3, "tools": 5, "task_state": 7, "observations": 11})
    assert m.ids is not None and len(m.ids) == 26
    assert meter.measure(conv).ids == m.ids  # equal text, equal ids


def test_budget_of_the_baseline() -> None:
    p = SeedParams()
    assert p.budget.input_limit == 120_000 == Budget(window=128_000, output_reserve=8_000, headroom=0).input_limit
    assert (p.system + p.tools) == 15_000 and (p.window - p.output_reserve - p.root) / p.window == pytest.approx(0.8203, abs=1e-4)


# --------------------------------------------------------------------------- 4.1


def test_notebook_4_1_appending_overflows_at_turn_21(nb41) -> None:
    assert nb41.observation_budget == 81_000
    assert nb41.turns_that_fit == 20
    assert nb41.max_observation_for_all_turns == 2_700
    assert nb41.append_sizes[0] == 43_000  # the first request already holds one tool result
    assert nb41.append_sizes[19] == 119_000 <= nb41.input_limit < nb41.append_sizes[20] == 123_000
    assert nb41.overflow_turn == 21


def test_notebook_4_1_bills(nb41) -> None:
    assert nb41.append_input_tokens == 3_030_000
    assert nb41.select_input_tokens == 1_410_000
    assert set(nb41.select_sizes) == {47_000}
    assert round(nb41.ratio, 1) == 2.1


# --------------------------------------------------------------------------- 4.3


def test_notebook_4_3_eq3_cadence(nb43) -> None:
    assert compaction_cycle_turns(92_000, 47_000, 4_000) == 12 == nb43.additions_per_cycle_eq3
    assert compaction_cycle_turns(92_000, 81_000, 4_000) == 3  # the raised target
    with pytest.raises(ValueError):
        compaction_cycle_turns(47_000, 92_000, 4_000)


def test_notebook_4_3_simulated_passes(nb43) -> None:
    assert nb43.additions_per_cycle == (12, 12)
    assert nb43.passes == 2 and nb43.pass_turns == (12, 24)
    assert nb43.peak == 95_000 and nb43.overshoot == 3_000
    assert nb43.peak + SeedParams().output_reserve == 103_000 <= SeedParams().window
    assert nb43.sizes[12] == 51_000  # the pass reset the request to T_lo before the next addition
    assert max(nb43.sizes) <= SeedParams().budget.input_limit


# --------------------------------------------------------------------------- 4.2


def test_notebook_4_2_trunk_rewritten_twice(nb42) -> None:
    assert nb42.rewrite_calls == (13, 25)


def test_notebook_4_2_stable_layout(nb42) -> None:
    s = nb42.stable
    assert s.input_tokens == 1_410_000
    assert s.uncached_tokens == 47_000 + 2 * 32_000 + 27 * 8_000 == 327_000
    assert s.cached_tokens == 1_083_000
    assert round(100 * s.reuse_ratio, 1) == 76.8
    assert round(s.cost_usd, 2) == 1.31
    assert round(s.cost_per_call, 3) == 0.044


def test_notebook_4_2_unstable_layout(nb42) -> None:
    u, s = nb42.unstable, nb42.stable
    assert u.input_tokens == 1_410_000 and u.cached_tokens == 0
    assert round(u.cost_usd, 2) == 4.23
    assert round(u.cost_per_call, 3) == 0.141
    assert round(u.cost_usd / s.cost_usd, 1) == 3.2
    assert round(u.uncached_tokens / s.uncached_tokens, 1) == 4.3


# --------------------------------------------------------------------------- 4.4


def test_notebook_4_4_removal(nb44) -> None:
    assert nb44.baseline == 47_000
    assert nb44.removal.resident_tokens == 46_150
    assert nb44.removal.cached_tokens == 15_000  # reuse ends at the root
    assert nb44.removal.uncached_tokens == 31_150


def test_notebook_4_4_tombstone(nb44) -> None:
    assert nb44.tombstone.resident_tokens == 46_174
    assert nb44.tombstone.uncached_tokens == 31_174


def test_notebook_4_4_notice(nb44) -> None:
    assert nb44.notice.resident_tokens == 47_128
    assert nb44.notice.cached_tokens == 47_000
    assert nb44.notice.uncached_tokens == 128
    assert round(nb44.tombstone.uncached_tokens / nb44.notice.uncached_tokens) == 244


def test_notebook_4_4_markers_name_the_write(nb44) -> None:
    assert names_write(nb44.marker, "src/pool.py", [18])
    assert names_write(nb44.notice_text, "src/pool.py", [18])
    assert not names_write(nb44.marker, "src/pool.py", [19])
