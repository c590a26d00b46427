"""The select policy's compaction pass: which turn groups a pass may fold, and the trunk it
writes (seed 000 sections 4.5.3 and 4.6; issue 10 items 2, 3 and 5).

:func:`app.domain.assembly.assemble_window` lays out the request; with a :class:`Fold` it
compacts instead of evicting:

* trigger: a pass runs when the request (with the leaf as it stands) would exceed
  ``T_hi``, not ``input_limit``;
* fold point: the pass folds every turn group older than the newest ``K``
  (:func:`fold_bounds`), and while the request still exceeds ``T_lo`` it folds one more
  (K shrinks, down to the newest group, which is then bounded as a whole, issue 5);
* trunk: the task contract and the progress record of everything folded
  (:func:`app.domain.compaction.record.build_record`), instead of the elision note; the
  record changes only when the fold point moves, so between passes the trunk is stable and
  the leaf only grows (eq. 4);
* never folded: the newest user message, a group whose calls still await results (its
  record entry would change when they arrive), the newest K groups;
* checked (item 5): after choosing the fold point, ``check`` (the protected-field check)
  runs on the request texts; a fold point that loses a protected field of a folded event is
  rejected and the pass keeps the larger raw slice (one group fewer folded, down to the
  previous fold point).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.domain.compaction.evidence import Finding, check_protected, protected_inventory
from app.domain.compaction.forecast import DUE_CALLS
from app.domain.compaction.record import ProgressRecord, build_record, render_record
from app.domain.compaction.watermarks import Watermarks
from app.domain.compaction.written import RecordSource, render_written_record
from app.domain.session_memo import SessionMemo
from app.domain.types import Contract, Event, TurnGroup

__all__ = ["Fold", "ProtectedCheck", "check_pass", "choose_record", "fold_bounds", "fold_record", "pinned_group",
           "protected_check"]

#: ``check(folded_events, contract, texts) -> findings``: the protected fields of the folded
#: events (and the contract) that ``texts`` (the request's trunk and leaf texts) lose or
#: alter; empty when none is lost (issue 10 item 5).
ProtectedCheck = Callable[[Sequence[Event], Contract, Sequence[str]], Sequence[Any]]


def protected_check(folded: Sequence[Event], contract: Contract, texts: Sequence[str]) -> list[Finding]:
    """Issue 10 item 5: the protected fields of ``folded`` and ``contract``
    (:func:`~app.domain.compaction.evidence.protected_inventory`: constraint texts, test
    names, revisions, run conditions, failed assertion lines, exit statuses) that ``texts``
    lose or alter (:func:`~app.domain.compaction.evidence.check_protected`)."""
    return check_protected(protected_inventory(folded, contract), texts)


@dataclass(frozen=True)
class Fold:
    """Compaction settings of the select policy: the watermarks (eq. 3), and the
    protected-field check run on every pass (default :func:`protected_check`; None: no
    check, for tests that show what the check prevents).

    ``due_calls``: N of the pass forecast (:mod:`app.domain.compaction.forecast`): a pass
    is due when the request reaches ``T_hi`` within N calls at its recent growth (in-place
    tombstones then wait for it, issue 11 item 4). ``candidate``: a summarizer's outcome
    for a pass this request may run (used only by a new pass whose fold it matches);
    ``current``: the outcome the last pass used (persisted with the layout state), used
    for the fold point as it stands, so that every worker renders the same trunk
    (:func:`choose_record`)."""

    watermarks: Watermarks
    check: ProtectedCheck | None = protected_check
    due_calls: int = DUE_CALLS
    candidate: RecordSource | None = None
    current: RecordSource | None = None


def check_pass(fold: Fold, record: ProgressRecord, events: Sequence[Event], contract: Contract,
               trunk: str) -> Sequence[Any]:
    """The findings of ``fold.check`` on a pass whose trunk is ``trunk``: the protected
    fields of the events ``record`` folds that the trunk loses or alters (empty: none, or
    no check configured)."""
    if fold.check is None:
        return ()
    folded = set(record.folded_seqs)
    return fold.check([e for e in events if e.seq in folded], contract, [trunk])


def choose_record(fold: Fold, record: ProgressRecord, text: str, *, new_pass: bool, contract: Contract,
                  count: Callable[[str], int]) -> tuple[ProgressRecord, str]:
    """The record and trunk text a fold point uses (issue 10 item 6): ``record`` and
    ``text`` (the deterministic ones) unless a summarizer's outcome matches its fold
    exactly (:meth:`RecordSource.matches`): ``fold.candidate`` for a new pass
    (``new_pass``), ``fold.current`` for the fold point as it stands. An admitted
    candidate's trunk (:func:`render_written_record`) is used when its record part fits
    the record budget, else the deterministic one with that finding; the returned record
    says which (``source``)."""
    source = fold.candidate if new_pass else fold.current
    if source is None or not record.folded_seqs or not source.matches(record):
        return record, text
    if source.source != "model" or source.candidate is None:
        return replace(record, source=source.as_dict()), text
    written = render_written_record(contract, source.candidate, record, rejected=len(source.rejections))
    tokens = count(render_written_record(contract, source.candidate, record, rejected=len(source.rejections),
                                         with_contract=False, with_user_text=False))
    if tokens > record.budget:
        over = replace(source, source="deterministic", candidate=None,
                       rejections=(*source.rejections, ((f"budget record: the admitted candidate renders to {tokens} "
                                                        f"tokens, over the record budget of {record.budget}"),)))
        return replace(record, source=over.as_dict()), text
    return replace(record, source=source.as_dict(), tokens=tokens), written


def fold_bounds(groups: Sequence[TurnGroup], *, newest: int, first_kept: int, keep_groups: int) -> tuple[int, int]:
    """``(lo, hi)``: the range of the first kept group's index ``k`` a pass may choose
    (groups before ``k`` are folded). ``lo = max(first_kept + 1, newest + 1 - K)``: fold
    at least one group, keep the newest ``K``; ``hi``: at most the newest group and the
    first group with a call awaiting its result. ``lo > hi`` means no pass is possible
    within those rules. (The newest user message is pinned instead: :func:`pinned_group`.)"""
    hi = newest
    for i, group in enumerate(groups):
        if group.pending and i < hi:
            hi = i
            break
    return max(first_kept + 1, newest + 1 - keep_groups), hi


def pinned_group(groups: Sequence[TurnGroup]) -> int | None:
    """The index of the newest user message's group: never folded; when the fold point
    passes it, it stays verbatim first in the leaf (the issue: "never fold the newest user
    message")."""
    return next((i for i in range(len(groups) - 1, -1, -1)
                 if groups[i].message.role == "user" and groups[i].message.kind == "message"), None)


def fold_record(contract: Contract, events: Sequence[Event], groups: Sequence[TurnGroup], k: int, *,
                watermarks: Watermarks, count: Callable[[str], int],
                memo: SessionMemo | None = None, pinned: int | None = None) -> tuple[ProgressRecord, str]:
    """The progress record with the groups before index ``k`` folded, and the trunk text
    (contract + record). Memoized in ``memo`` by fold point and budget (a function of the
    events before the fold point, which no later event changes). ``pinned``: the index of a
    group kept in the leaf whatever ``k`` (the newest user message), never folded."""
    fold_seq = groups[k].first_seq if k < len(groups) else (max((e.seq for e in events), default=0) + 1)
    pin = groups[pinned].first_seq if pinned is not None and pinned < k else None
    key = (fold_seq, watermarks.record_tokens, watermarks.user_text_tokens, contract, pin)
    cache = memo if memo is not None else SessionMemo()
    hit = cache.progress_records.get(key)
    if hit is None:
        record = build_record(contract, events, groups, fold_seq=fold_seq if k > 0 else 0,
                              budget_tokens=watermarks.record_tokens, count=count, memo=memo, pinned=pin,
                              user_text_tokens=watermarks.user_text_tokens)
        hit = cache.progress_records[key] = (record, render_record(record))
    return hit
