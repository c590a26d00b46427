"""The watermark sweep of ``ctxd eval`` (issue 10 items 2 and 8): setting names, the CLI's
product of T_hi x K x record budget, and the report's sweep table with its cost optimum."""

from __future__ import annotations

import pytest

from app.cli import sweep_policies
from ctxd_tools.eval.policies import SweepSetting, get_policy
from ctxd_tools.eval.report import sweep_rows


def test_setting_names_round_trip_and_validate() -> None:
    s = SweepSetting.parse("select[hi=0.35,lo=0.14,k=3,r=1500]")
    assert (s.hi, s.lo, s.keep_groups, s.record_tokens) == (0.35, 0.14, 3, 1500)
    assert SweepSetting.parse(s.name) == s
    assert s.watermarks(28_160).as_dict() == {"t_hi": 9856, "t_lo": 3942, "keep_groups": 3, "record_tokens": 1500,
                                              "user_text_tokens": 2048}
    assert SweepSetting.parse("select[hi=0.5]") == SweepSetting(0.5, 0.2, 3, 1500)
    policy = get_policy("select[hi=0.4,k=2]")
    assert policy.infer_bindings and policy.setting == SweepSetting(0.4, 0.4 * 0.4, 2, 1500)
    for bad in ("select[lo=0.2]", "select[hi=0.3,x=1]", "select[hi=0.3,lo=0.5]", "selectx"):
        with pytest.raises(ValueError):
            get_policy(bad)


def test_cli_sweep_is_the_product_of_its_lists() -> None:
    names = sweep_policies("0.3,0.5", "2,3", "1500", 0.4)
    assert names == ["select[hi=0.3,lo=0.12,k=2,r=1500]", "select[hi=0.3,lo=0.12,k=3,r=1500]",
                     "select[hi=0.5,lo=0.2,k=2,r=1500]", "select[hi=0.5,lo=0.2,k=3,r=1500]"]
    assert sweep_policies("", "3", "1500", 0.4) == []


def test_sweep_table_marks_the_cheapest_setting_with_grounding_at_least_095() -> None:
    def total(cost: float, grounding: float) -> dict:
        return {"total": {"input_vs_append": 0.3, "cost_vs_append": cost / 10, "grounding": grounding,
                          "grounding_via_handle": 1.0, "grounding_via_record": 0.3, "passes_per_call": 0.05,
                          "max_passes_per_call_20": 0.1, "over_limit": 0, "constraint_retention": 1.0,
                          "input_tokens": 1, "cost_usd": cost}}

    policies = {"append": total(10.0, 1.0), "window": total(7.0, 0.99),
                "select[hi=0.3,lo=0.12,k=3,r=1500]": total(4.0, 0.94),  # cheapest, but grounding < 0.95
                "select[hi=0.4,lo=0.16,k=3,r=1500]": total(4.5, 0.96),
                "select": total(5.0, 0.97)}
    info = {"input_limit": 28_160, "watermarks": {"t_hi": 14_080, "t_lo": 8_448, "keep_groups": 3, "record_tokens": 1500}}
    rows = sweep_rows(policies, info)
    assert [r["policy"] for r in rows] == ["select[hi=0.3,lo=0.12,k=3,r=1500]", "select[hi=0.4,lo=0.16,k=3,r=1500]",
                                           "select"]
    assert [r["optimum"] for r in rows] == [False, True, False]
    assert rows[0]["t_hi"] == 8448 and rows[2]["t_hi_fraction"] == 0.5
