"""Compaction watermarks: trigger ``T_hi``, target ``T_lo`` (seed 000 section 4.5.3, eq. 3
and eq. 4; issue 10 item 2).

A compaction pass runs when the next request would exceed ``T_hi`` tokens and brings it
down to at most ``T_lo`` tokens: it folds the leaf's turn groups older than the newest
``keep_groups`` (K) into the trunk's progress record, and rewrites the trunk once. Between
passes the leaf only grows, so each call adds only its new turn to the uncached suffix
(eq. 4). The record has its own budget (``record_tokens``, at most the task_state share):
entries beyond it collapse into coarser ones, so the record cannot grow until every call
triggers a pass (thrashing).

All sizes are tokens of the profile's tokenizer, counted on the rendered request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from app.domain.compaction.user_text import SECTION_TOKENS

__all__ = ["LEAF_FLOOR", "OVER_TARGET_REASONS", "Watermarks", "cycle_turns"]

#: tokens ``T_lo`` must leave beside the record budget (:meth:`Watermarks.check`): room for the
#: root, the contract and the newest turn group, which a pass never folds. A profile whose
#: ``T_lo`` leaves less could never bring a request down to it.
LEAF_FLOOR: Final = 512

#: why a pass ended above ``T_lo`` (the manifest's ``compaction.after_pass.over``), each an
#: exception the rules allow or a named shortfall:
#: ``newest_group``: every group but the newest is folded (K shrank to 1) and root + trunk +
#: the newest group (bounded at the per-item cap) + the newest user message still exceed
#: ``T_lo``; ``pinned``: root + contract + record (without what the user said) alone exceed it;
#: ``user_text``: they do with the record's section "What the user said"; ``pinned_message``:
#: root + trunk are within it and the newest user message, kept verbatim in the leaf, takes the
#: request over; ``pending``: a group whose calls await results bounds the fold;
#: ``protected``: the protected-field check rejected the fold point and the larger raw slice
#: was kept.
OVER_TARGET_REASONS: Final = ("newest_group", "pinned", "user_text", "pinned_message", "pending", "protected")


@dataclass(frozen=True)
class Watermarks:
    """The select policy's compaction settings (eq. 3).

    Args:
        t_hi: trigger ``T_hi``; a pass runs when the request would exceed it.
        t_lo: target ``T_lo``; a pass brings the request to at most this (K shrinks, down to
            the newest group, until it does).
        keep_groups: K, the newest turn groups a pass never folds (>= 1).
        record_tokens: the progress record's own budget (tokens of its rendered text, the
            user's words apart).
        user_text_tokens: the budget of the record's section "What the user said".

    Invariant (checked): ``0 < T_lo < T_hi <= input_limit`` (eq. 3:
    ``T_lo < T_hi <= W - O``, with the headroom M taken off), ``keep_groups >= 1``,
    ``record_tokens > 0``.

    Raises:
        ValueError: a setting outside those bounds (``input_limit`` given to :meth:`check`).
    """

    t_hi: int
    t_lo: int
    keep_groups: int = 3
    record_tokens: int = 2000
    #: the budget of the record's section "What the user said" (its own, beside record_tokens;
    #: :mod:`app.domain.compaction.user_text`)
    user_text_tokens: int = SECTION_TOKENS

    def __post_init__(self) -> None:
        if not 0 < self.t_lo < self.t_hi:
            raise ValueError(f"watermarks need 0 < t_lo < t_hi (eq. 3); got t_lo={self.t_lo}, t_hi={self.t_hi}")
        if self.keep_groups < 1:
            raise ValueError("keep_groups (K) must be at least 1: the newest turn group is never folded")
        if self.record_tokens <= 0:
            raise ValueError("record_tokens must be positive")
        if self.user_text_tokens <= 0:
            raise ValueError("user_text_tokens must be positive")

    def check(self, input_limit: int) -> Watermarks:
        """This value if ``T_hi <= input_limit`` (eq. 3) and ``T_lo`` is achievable:
        ``T_lo >= record_tokens + LEAF_FLOOR`` (a pass leaves the record at its budget plus the
        root, the contract and the newest group; issue 10 item 3). ValueError otherwise."""
        if self.t_hi > input_limit:
            raise ValueError(f"t_hi {self.t_hi} exceeds input_limit {input_limit} = W - O - M (eq. 3)")
        if self.t_lo < self.record_tokens + LEAF_FLOOR:
            raise ValueError(f"t_lo {self.t_lo} is not achievable: a pass leaves the record at its budget "
                             f"(record_tokens {self.record_tokens}) plus the root, the contract and the newest turn "
                             f"group; t_lo must be at least record_tokens + {LEAF_FLOOR}")
        return self

    @classmethod
    def of_limit(cls, input_limit: int, *, hi: float, lo: float, keep_groups: int = 3,
                 record_tokens: int = 2000) -> Watermarks:
        """Watermarks as fractions of ``input_limit``: ``T_hi = floor(hi * input_limit)``,
        ``T_lo = floor(lo * input_limit)`` (the sweep's parametrisation)."""
        return cls(t_hi=int(hi * input_limit), t_lo=int(lo * input_limit), keep_groups=keep_groups,
                   record_tokens=record_tokens).check(input_limit)

    def as_dict(self) -> dict[str, int]:
        return {"t_hi": self.t_hi, "t_lo": self.t_lo, "keep_groups": self.keep_groups,
                "record_tokens": self.record_tokens, "user_text_tokens": self.user_text_tokens}


def cycle_turns(t_hi: int, t_lo: int, arrival: int) -> int:
    """Eq. 3: ``N = ceil((T_hi - T_lo) / a)``, the turns between passes when each pass
    resets the request to ``T_lo`` and each turn adds ``a > 0`` tokens.

    Raises:
        ValueError: ``arrival <= 0`` or ``t_hi <= t_lo``.
    """
    if arrival <= 0 or t_hi <= t_lo:
        raise ValueError("eq. 3 needs arrival > 0 and t_hi > t_lo")
    return math.ceil((t_hi - t_lo) / arrival)
