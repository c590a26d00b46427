"""Budget math: seed 000 equation 1 with seed 003's headroom, ``B_input = W - O - M``.

All quantities are tokens of the profile's tokenizer, counted on the rendered request
(chat framing and tool schemas included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.domain.errors import PinnedOverBudget
from app.domain.types import BUDGET_ROLES


@dataclass(frozen=True)
class Budget:
    """Eq. 1: ``system + tools + task_state + observations <= W - O - M``.

    Args:
        window: W, the model's context window (tokens).
        output_reserve: O, reserved for generation; also the wire body's ``max_tokens``.
        headroom: M, safety margin for template or tokenizer drift (seed 003).
        shares: per-role planning shares of ``input_limit`` (fractions summing to <= 1).
        low_watermark: eviction target T_lo in tokens; when a request exceeds
            ``input_limit`` the oldest turn groups are dropped until it is at or below
            T_lo (hysteresis, eq. 3), so the trunk is not rewritten on every call.

    Raises:
        ValueError: a negative size, or ``input_limit <= 0``, or shares summing above 1.
    """

    window: int
    output_reserve: int
    headroom: int
    shares: Mapping[str, float] = field(default_factory=dict)
    low_watermark: int | None = None

    def __post_init__(self) -> None:
        if min(self.window, self.output_reserve, self.headroom) < 0:
            raise ValueError("window, output_reserve and headroom must be >= 0 tokens")
        if self.input_limit <= 0:
            raise ValueError(
                f"input_limit = W - O - M = {self.window} - {self.output_reserve} - "
                f"{self.headroom} = {self.input_limit} tokens; it must be positive"
            )
        unknown = set(self.shares) - set(BUDGET_ROLES)
        if unknown:
            raise ValueError(f"unknown budget roles {sorted(unknown)}; roles are {BUDGET_ROLES}")
        if sum(self.shares.values()) > 1.0 + 1e-9:
            raise ValueError("role shares must sum to at most 1")
        if self.low_watermark is not None and not 0 < self.low_watermark <= self.input_limit:
            raise ValueError("low_watermark must be in (0, input_limit]")

    @property
    def input_limit(self) -> int:
        """``B_input = W - O - M`` in tokens (seed 000 eq. 1, seed 003)."""
        return self.window - self.output_reserve - self.headroom

    @property
    def eviction_target(self) -> int:
        """Tokens to shrink to once over ``input_limit`` (T_lo, or the limit itself)."""
        return self.low_watermark if self.low_watermark is not None else self.input_limit

    def role_limits(self) -> dict[str, int]:
        """Each role's planning share of ``input_limit`` in tokens (floor)."""
        return {role: int(self.input_limit * self.shares.get(role, 0.0)) for role in BUDGET_ROLES}

    def as_dict(self) -> dict[str, int]:
        return {
            "window": self.window,
            "output_reserve": self.output_reserve,
            "headroom": self.headroom,
            "input_limit": self.input_limit,
        }


def check_pinned(budget: Budget, pinned_by_role: Mapping[str, int], total: int) -> None:
    """Raise if the pinned content alone (``total`` tokens, rendered) exceeds ``input_limit``.

    ``pinned_by_role`` gives the pinned tokens per budget role. The error names every role
    over its planning share, by how many tokens, and the overall excess (eq. 1).

    Raises:
        PinnedOverBudget: ``total > budget.input_limit``.
    """
    if total <= budget.input_limit:
        return
    limits = budget.role_limits()
    by_role = {}
    for role in BUDGET_ROLES:
        used = int(pinned_by_role.get(role, 0))
        limit = limits[role] if budget.shares else budget.input_limit
        by_role[role] = {"tokens": used, "share_limit": limit, "over_by": max(0, used - limit)}
    over_roles = [r for r, v in by_role.items() if v["over_by"] > 0] or [
        max(by_role, key=lambda r: by_role[r]["tokens"])
    ]
    over_by = total - budget.input_limit
    described = ", ".join(
        f"{r} ({by_role[r]['tokens']} tokens, {by_role[r]['over_by']} over its share)"
        for r in over_roles
    )
    raise PinnedOverBudget(
        f"the pinned content (system, tools, task contract, next step) needs {total} tokens, "
        f"{over_by} over input_limit {budget.input_limit} = W - O - M; over: {described}",
        over_by=over_by,
        input_limit=budget.input_limit,
        total=total,
        over_roles=over_roles,
        by_role=by_role,
    )


def split_share(sizes: Sequence[int], share: int) -> tuple[int, ...]:
    """Split ``share`` tokens across items of ``sizes`` tokens, max-min fair (water-filling).

    Used to bound the newest turn group as a whole: its results share the observations
    budget, each cut to head + tail at its cap (``app/domain/assembly.py``).

    Equation: ``c_i = min(s_i, L) + d_i`` with ``L = max{l >= 0 : sum_i min(s_i, l) <= S}``,
    ``S = max(share, 0)``, and ``d_i`` in {0, 1} handing the remainder
    ``S - sum_i min(s_i, L)`` one token each to the first items (in order) with ``s_i > L``.

    Invariants: ``0 <= c_i <= s_i``; ``sum(c) == min(S, sum(s))``; an item that is cut gets
    at least every other item's cap minus one (``c_i < s_i`` implies ``c_i >= c_j - 1``):
    small items keep their whole size and the large ones share the rest evenly.

    Args:
        sizes: tokens of each item (>= 0), in order.
        share: tokens to split (a negative share splits nothing).

    Returns:
        The caps in tokens, in the order of ``sizes``.

    Raises:
        ValueError: a negative size.
    """
    if any(s < 0 for s in sizes):
        raise ValueError("sizes must be >= 0 tokens")
    remaining = max(share, 0)
    if sum(sizes) <= remaining:
        return tuple(sizes)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    left = len(sizes)
    whole: set[int] = set()
    for i in order:  # ascending: an item that fits under the even split keeps its whole size
        if sizes[i] * left > remaining:
            break
        whole.add(i)
        remaining -= sizes[i]
        left -= 1
    level, extra = divmod(remaining, left)
    caps = []
    for i, size in enumerate(sizes):
        if i in whole:
            caps.append(size)
        else:
            caps.append(level + (1 if extra > 0 else 0))
            extra -= 1
    return tuple(caps)
