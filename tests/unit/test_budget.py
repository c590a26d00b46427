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


def test_split_share_examples() -> None:
    from app.domain.budget import split_share

    assert split_share([2040] * 10, 14080) == (1408,) * 10
    assert split_share([100, 5000, 5000], 3000) == (100, 1450, 1450)  # the small one keeps its size
    assert split_share([3, 3, 3], 7) == (3, 2, 2)  # the remainder goes to the first ones
    assert split_share([10, 20], 100) == (10, 20)
    assert split_share([10, 20], -5) == (0, 0)
    assert split_share([], 10) == ()
    with pytest.raises(ValueError):
        split_share([-1], 10)


@given(st.lists(st.integers(0, 5000), max_size=20), st.integers(-100, 60_000))
def test_split_share_is_max_min_fair(sizes: list[int], share: int) -> None:
    """Eq. in split_share's docstring: 0 <= c_i <= s_i, sum(c) = min(S, sum(s)), and a cut
    item gets at least every other cap minus one."""
    from app.domain.budget import split_share

    caps = split_share(sizes, share)
    assert len(caps) == len(sizes)
    assert all(0 <= c <= s for c, s in zip(caps, sizes))
    assert sum(caps) == min(max(share, 0), sum(sizes))
    for c, s in zip(caps, sizes):
        if c < s:
            assert all(c >= other - 1 for other in caps)
