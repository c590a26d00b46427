"""The pass forecast (issue 11 item 4 driven by issue 10's watermarks): a pass is due within
N calls when the request's tokens plus N times the recent per-call growth reach T_hi."""

from __future__ import annotations

import pytest

from app.domain.compaction.forecast import DUE_CALLS, GROWTH_WINDOW, forecast_pass, recent_growth


def test_due_when_n_calls_of_growth_reach_t_hi() -> None:
    # qwen3: T_hi 8,448; a request of 6,900 tokens growing 520 a call reaches it in 3 calls
    f = forecast_pass(6900, 520, t_hi=8448, calls=3)
    assert f.due and f.calls_left == 3 and 6900 + 3 * 520 >= 8448
    assert not forecast_pass(6900, 515, t_hi=8448, calls=3).due  # 6,900 + 1,545 = 8,445 < 8,448
    assert forecast_pass(6900, 520, t_hi=8448, calls=2).calls_left == 3
    assert not forecast_pass(6900, 520, t_hi=8448, calls=2).due


def test_over_t_hi_is_due_now_and_no_growth_is_never_due() -> None:
    assert forecast_pass(9000, 0, t_hi=8448).due and forecast_pass(9000, 0, t_hi=8448).calls_left == 0
    quiet = forecast_pass(8000, 0, t_hi=8448)
    assert not quiet.due and quiet.calls_left is None
    assert forecast_pass(8000, -50, t_hi=8448).growth == 0, "a shrinking request grows by 0"
    assert forecast_pass(8448, 0, t_hi=8448, calls=0).due, "N = 0: due only at T_hi"
    assert forecast_pass(8000, 1, t_hi=8448).as_dict() == {
        "tokens": 8000, "growth": 1, "calls": DUE_CALLS, "t_hi": 8448, "calls_left": 448, "due": False}


def test_growth_is_the_leaf_tokens_shared_by_size_over_the_newest_groups() -> None:
    # a leaf of 10,000 characters and 2,500 tokens; the newest 4 groups hold 4,000 characters:
    # 1,000 tokens over 4 calls = 250 a call (the older groups and the pinned message do not count)
    sizes = [3000, 1000, 500, 1500, 1000, 1000]
    assert GROWTH_WINDOW == 4
    assert recent_growth(sizes, leaf_size=10000, leaf_tokens=2500) == 250
    assert recent_growth(sizes, leaf_size=10000, leaf_tokens=2500, window=1) == 250  # 1,000 chars: 250 tokens
    assert recent_growth(sizes, leaf_size=10000, leaf_tokens=2500, window=2) == 250
    assert recent_growth([3000], leaf_size=10000, leaf_tokens=2500) == 750
    assert recent_growth([1], leaf_size=3, leaf_tokens=1) == 1, "rounded up"
    assert recent_growth([], leaf_size=10000, leaf_tokens=2500) == 0
    assert recent_growth([0, 0], leaf_size=0, leaf_tokens=0) == 0


def test_bad_inputs_are_value_errors() -> None:
    with pytest.raises(ValueError):
        recent_growth([1], leaf_size=10, leaf_tokens=5, window=0)
    with pytest.raises(ValueError):
        recent_growth([20], leaf_size=10, leaf_tokens=5)
    with pytest.raises(ValueError):
        forecast_pass(1, 1, t_hi=10, calls=-1)
