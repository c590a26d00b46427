"""Whether a compaction pass is due within a few calls (issue 11 item 4, driven by issue 10
item 2's watermarks; seed 000 eq. 3 and table 9).

Between passes the request only grows (eq. 4): each model call adds its turn group to the
leaf. A pass runs when the request exceeds ``T_hi``. When that is a few calls away, an
in-place tombstone (which changes earlier tokens, so breaks the cached prefix) would break
the prefix once now and once more at the pass; it waits for the pass instead and an
appended notice naming ``path@rN`` is shown meanwhile (:mod:`app.domain.supersession`).

The forecast: with ``tokens`` the request as it stands (no pass) and ``growth`` the recent
per-call growth (the mean tokens of the newest ``window`` turn groups of the leaf), a pass
is due within ``calls`` (N) calls when ``tokens + N * growth >= T_hi``.

``N`` was chosen with ``ctxd eval`` on the 32 shared traces (qwen3; README "Choosing N"):
:data:`DUE_CALLS`.

Standard library only; pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["DUE_CALLS", "GROWTH_WINDOW", "PassForecast", "forecast_pass", "recent_growth"]

#: N: a pass is due when it is at most this many calls away. Chosen with ``ctxd eval`` (32
#: shared traces, qwen3, policies ``select-due<N>``): cost falls as N grows (N 0: $8.54, 3:
#: $8.42, 8: $8.32, 20: $8.16, every change deferred to the next pass: $8.11) while the stale
#: text kept beside its notice grows (62k, 146k, 261k, 281k tokens over the run) and the
#: in-place tombstone all but disappears (1,318, 864, 233, 32 shown); 8 is the cheapest that
#: still waits only "a few calls" (about half the 14 calls between passes at these watermarks).
DUE_CALLS: Final = 8
#: the newest turn groups whose mean size is the per-call growth
GROWTH_WINDOW: Final = 4


@dataclass(frozen=True)
class PassForecast:
    """The forecast of one request: ``tokens`` (the request without a pass, tokens of the
    profile's tokenizer), ``growth`` (tokens a call adds, recent mean), ``calls`` (N), the
    trigger ``t_hi``; ``due``: ``tokens + calls * growth >= t_hi``; ``calls_left``: the
    calls before ``T_hi`` at that growth (None when nothing grows)."""

    tokens: int
    growth: int
    calls: int
    t_hi: int

    @property
    def due(self) -> bool:
        return self.tokens + self.calls * self.growth >= self.t_hi

    @property
    def calls_left(self) -> int | None:
        if self.tokens >= self.t_hi:
            return 0
        if self.growth <= 0:
            return None
        return -(-(self.t_hi - self.tokens) // self.growth)

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "growth": self.growth, "calls": self.calls, "t_hi": self.t_hi,
                "calls_left": self.calls_left, "due": self.due}


def recent_growth(group_sizes: Sequence[int], *, leaf_size: int, leaf_tokens: int,
                  window: int = GROWTH_WINDOW) -> int:
    """Tokens one call adds, recently: the exact ``leaf_tokens`` shared among the leaf's
    texts by size (characters), the share of the newest ``window`` turn groups
    (``group_sizes``: their sizes in characters, oldest first, the groups a call added:
    the pinned user message excluded) divided by their number. ``leaf_size``: the size of
    every leaf text (pinned message and next step included). 0 without groups; rounded up.

    Raises ValueError for a window below 1 or a negative size."""
    if window < 1:
        raise ValueError("the growth window must be at least 1 group")
    recent = list(group_sizes)[-window:]
    if not recent or leaf_size <= 0 or leaf_tokens <= 0:
        return 0
    if min(recent) < 0 or leaf_size < sum(recent):
        raise ValueError("group sizes must be non-negative and within the leaf's size")
    return -(-leaf_tokens * sum(recent) // (leaf_size * len(recent)))


def forecast_pass(tokens: int, growth: int, *, t_hi: int, calls: int = DUE_CALLS) -> PassForecast:
    """The forecast for a request of ``tokens`` growing ``growth`` tokens a call against
    the trigger ``t_hi`` (eq. 3) over ``calls`` calls (N >= 0; 0: due only at ``T_hi``).
    Raises ValueError for a negative ``calls``."""
    if calls < 0:
        raise ValueError("calls (N) must be >= 0")
    return PassForecast(tokens=tokens, growth=max(0, growth), calls=calls, t_hi=t_hi)
