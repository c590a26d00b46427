import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.budget import Budget, check_pinned
from app.domain.errors import PinnedOverBudget


def test_input_limit_is_w_minus_o_minus_m() -> None:
    assert Budget(window=32768, output_reserve=4096, headroom=512).input_limit == 28160
    # seed 000 notebook 4.1: 128,000 - 8,000 = 120,000 with no headroom
    assert Budget(window=128_000, output_reserve=8_000, headroom=0).input_limit == 120_000


@given(st.integers(1, 10**6), st.integers(0, 10**5), st.integers(0, 10**5))
def test_input_limit_property(w: int, o: int, m: int) -> None:
    if w - o - m <= 0:
        with pytest.raises(ValueError):
            Budget(window=w, output_reserve=o, headroom=m)
    else:
        b = Budget(window=w, output_reserve=o, headroom=m)
        assert b.input_limit == w - o - m
        assert b.eviction_target == b.input_limit


def test_invalid_shares_and_watermark() -> None:
    with pytest.raises(ValueError, match="sum"):
        Budget(window=100, output_reserve=10, headroom=0, shares={"system": 0.7, "tools": 0.5})
    with pytest.raises(ValueError, match="unknown budget roles"):
        Budget(window=100, output_reserve=10, headroom=0, shares={"memes": 0.1})
    with pytest.raises(ValueError, match="low_watermark"):
        Budget(window=100, output_reserve=10, headroom=0, low_watermark=91)


def test_role_limits_floor_shares() -> None:
    b = Budget(window=1000, output_reserve=100, headroom=0, shares={"system": 0.1, "tools": 0.2, "task_state": 0.3, "observations": 0.4})
    assert b.role_limits() == {"system": 90, "tools": 180, "task_state": 270, "observations": 360}


def test_check_pinned_names_role_and_excess() -> None:
    b = Budget(window=1000, output_reserve=100, headroom=0, shares={"system": 0.1, "tools": 0.2, "task_state": 0.3, "observations": 0.4})
    check_pinned(b, {"system": 90}, 900)  # at the limit: fine
    with pytest.raises(PinnedOverBudget) as info:
        check_pinned(b, {"system": 50, "tools": 100, "task_state": 800, "observations": 10}, 960)
    err = info.value
    assert err.extra["over_by"] == 60
    assert err.extra["over_roles"] == ["task_state"]
    assert err.extra["by_role"]["task_state"]["over_by"] == 530
    assert "task_state" in err.detail and "60 over" in err.detail
