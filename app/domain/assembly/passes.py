"""The fold and eviction search's helpers: whether a pass makes progress or misses its target,
and the leaf's growth per call that forecasts the next pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.compaction.forecast import GROWTH_WINDOW, recent_growth
from app.domain.layout import (
    Conversation,
    LeafMessage,
    begins_with,
)
from app.domain.ports import Measurement
from app.domain.session_memo import SessionMemo


def pass_over_target(measurement: Measurement, t_lo: int, *, rejected: bool, newest_only: bool,
                     user_text_tokens: int = 0, pinned_message_tokens: int = 0) -> str:
    """Why a pass whose request measures ``measurement`` (tokens) ended above ``t_lo``
    (:data:`app.domain.compaction.watermarks.OVER_TARGET_REASONS`): ``protected`` when the
    protected-field check rejected a fold point; else, with every group but the newest folded
    (``newest_only``), ``pinned`` when root + trunk (contract + record) alone exceed ``t_lo``
    without the record's section "What the user said" (``user_text_tokens``), ``user_text``
    when they do with it, ``pinned_message`` when the newest user message kept in the leaf
    (``pinned_message_tokens``) takes them over, and ``newest_group`` otherwise; else
    ``pending`` (a group awaiting results bounds the fold)."""
    if rejected:
        return "protected"
    if not newest_only:
        return "pending"
    pinned = measurement.by_zone.get("root", 0) + measurement.by_zone.get("trunk", 0)
    if pinned - user_text_tokens > t_lo:
        return "pinned"
    if pinned > t_lo:
        return "user_text"
    return "pinned_message" if pinned + pinned_message_tokens > t_lo else "newest_group"


def pass_without_progress(before: int, after: int, *, t_hi: int, t_lo: int, input_limit: int) -> bool:
    """Whether a pass that takes the request from ``before`` to ``after`` tokens should not
    run (no pass without progress): it ends above ``t_lo`` (what it cannot fold, the pinned
    part, keeps the request there), it frees less than ``t_hi - t_lo`` tokens, and the request
    without it is within ``input_limit``. Such a pass would rewrite the trunk (the cached prefix
    lost) to win a few hundred tokens, and run again at the next call; skipped, the request
    grows until the foldable part is worth a pass (``t_hi - t_lo``, what a normal pass frees at
    least) or the limit forces one. A pass that reaches ``t_lo`` always frees more than that."""
    return after > t_lo and before - after < t_hi - t_lo and before <= input_limit


_CHARS = ("assembly", "chars")  # LeafMessage.memo: the characters of a message's texts


def _size(messages: Sequence[LeafMessage]) -> int:
    """Characters of a group's leaf texts (contents and call arguments); each message's
    kept in its memo (leaf messages are the same objects from GET to GET)."""
    total = 0
    for m in messages:
        chars = m.memo.get(_CHARS)
        if chars is None:
            chars = m.memo[_CHARS] = len(m.content) + sum(len(c.arguments) for c in m.tool_calls)
        total += chars
    return total


def _leaf_size(leaf: tuple[LeafMessage, ...], memo: SessionMemo | None) -> int:
    """:func:`_size` of a whole leaf; with ``memo`` (the session's), from the last GET's when
    this leaf begins with that one's messages but its last (the next step, replaced each
    call): the same objects, compared in C, so only the new messages are visited."""
    if memo is not None and (held := memo.leaf_chars) is not None:
        last, total = held
        shared = len(last) - 1
        if shared > 0 and begins_with(leaf, last[:shared]):
            size = int(total) - _size(last[shared:]) + _size(leaf[shared:])
            memo.leaf_chars = (leaf, size)
            return size
    size = _size(leaf)
    if memo is not None:
        memo.leaf_chars = (leaf, size)
    return size


_LEAF_CHARS = ("assembly", "leaf chars")  # the session memo: (the last leaf measured, its characters)


def _growth(leaf_groups: Sequence[Sequence[LeafMessage]], conversation: Conversation, measurement: Measurement, *,
            first: int, newest: int, pin: int | None, memo: SessionMemo | None = None) -> int:
    """The recent per-call growth of the request (tokens): the leaf's exact tokens shared
    by size among its texts, the mean share of the newest turn groups since ``first`` that
    send something (the pinned user message excluded: no call added it;
    :func:`app.domain.compaction.forecast.recent_growth`, which reads only the newest
    ``GROWTH_WINDOW`` of them: only those are measured)."""
    sizes: list[int] = []
    for i in range(newest, first - 1, -1):
        if len(sizes) == GROWTH_WINDOW:
            break
        if i != pin and leaf_groups[i]:
            sizes.append(_size(leaf_groups[i]))
    sizes.reverse()
    return recent_growth(sizes, leaf_size=_leaf_size(conversation.leaf, memo),
                         leaf_tokens=int(measurement.by_zone.get("leaf", 0)))
