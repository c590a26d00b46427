"""The window policy: pin root and trunk, keep the newest turn groups, evict (window) or fold
(select) the oldest complete ones when over budget.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from app.domain.assembly.base import _SEQ, NOTES_KEPT, BoundedResult
from app.domain.assembly.bounding import FittedGroup, bound_documents, fit_newest_group
from app.domain.assembly.grouping import _Grouping
from app.domain.assembly.items import (
    EVICTED,
    KEPT,
    _group_items,
    _side_items,
    _tool_text,
    _with_invalidation,
    _with_message_tokens,
    held_item,
)
from app.domain.assembly.leaf import (
    NOTE_MAX_GROUPS,
    _conversation,
    _leaf_messages,
    apply_invalidation,
    declared_tools,
    folded_why,
    plan_roles,
)
from app.domain.assembly.passes import _growth, pass_over_target, pass_without_progress
from app.domain.assembly.views import _bounded_results, _Front, _front, _ItemsLoop, _touched_groups
from app.domain.budget import Budget, check_pinned
from app.domain.compaction.fold import Fold, check_pass, choose_record, fold_bounds, fold_record
from app.domain.compaction.forecast import PassForecast, forecast_pass
from app.domain.compaction.record import ProgressRecord
from app.domain.cuts import ElidedSpan
from app.domain.errors import NewestGroupOverBudget
from app.domain.layout import (
    Conversation,
    LeafMessage,
)
from app.domain.manifest import (
    EventRange,
    InvalidationReport,
    Item,
    NoticeRef,
    Representation,
)
from app.domain.notes import NOTE_CHARS, elided_note
from app.domain.ports import Measurement, TokenMeter
from app.domain.scratchpad import Documents, current_documents
from app.domain.session_memo import SessionMemo
from app.domain.supersession import InvalidationOptions, InvalidationPlan, plan_invalidation
from app.domain.text import neutralise_transform
from app.domain.types import (
    ArtifactWriteEvent,
    ConclusionEvent,
    DocumentEvent,
    Event,
    Session,
    TurnGroup,
)


@dataclass(frozen=True)
class Assembly:
    """The outcome of one assembly: the conversation, its exact measurement and the manifest
    parts. ``cut_seq`` is the first kept turn group's seq (groups before it are elided);
    callers persist it so later assemblies only ever move it forward."""

    conversation: Conversation
    measurement: Measurement
    budget: Budget
    cut_seq: int
    items: tuple[Item, ...]
    elided: tuple[Item, ...]
    evicted_now: int
    warnings: tuple[str, ...] = field(default=())
    ranges: tuple[EventRange, ...] = field(default=())  # older events, accounted together
    derived_payloads: dict[str, bytes] = field(default_factory=dict)  # {handle: bytes} to store (elision index)
    record: ProgressRecord | None = None  # the trunk's progress record (select), None under window
    #: why this request's pass ended above T_lo (one of watermarks.OVER_TARGET_REASONS), None when
    #: it ran no pass or reached T_lo (issue 10 item 3)
    over_target: str | None = None
    invalidation: InvalidationReport = field(default_factory=InvalidationReport)  # the manifest's summary
    forecast: PassForecast | None = None  # select's pass forecast (pass_due forecast from the watermarks)
    #: a pass was due (over T_hi) and held back for want of progress (:func:`pass_without_progress`):
    #: ``{"tokens", "after", "frees", "needs"}``, the request without and with it; None otherwise
    held: Mapping[str, int] | None = None


def assemble_window(
    session: Session,
    events: Sequence[Event],
    *,
    budget: Budget,
    meter: TokenMeter,
    item_cap_tokens: int,
    previous_cut_seq: int = 0,
    render_reasoning: bool = False,
    leaf_cache: SessionMemo | None = None,
    payload_tokens: Mapping[str, int] | None = None,
    fold: Fold | None = None,
    invalidation: InvalidationOptions | None = None,
) -> Assembly:
    """Select and lay out the next request under the window policy.

    Invariants: the result's ``measurement.total <= budget.input_limit`` (eq. 1, counted
    on the rendered request); evicted turn groups are whole (a call never loses its
    result); every dropped group is named with its handles in the trunk's elision note;
    the cut only moves forward (``previous_cut_seq``), so the leaf is append-only between
    evictions and, once over the limit, the request shrinks to ``budget.eviction_target``
    (or to the newest group alone, when that is larger and within ``input_limit``).

    ``leaf_cache``: an optional mapping kept across calls (the service keeps one per
    session in its bounded memo, app/services/memo.py): per meter, per-item cap and
    reasoning switch, each turn group's bounded tool outputs, leaf messages, manifest
    items and call warnings, keyed by the identity of the group's events (the memo's
    events are the same objects from GET to GET) and its outputs' known token counts.
    A session's leaf is mostly its previous request's, so most groups are then not
    rebuilt, and their messages are the same objects, which carry what the meter and
    the wire format derived from them (``LeafMessage.memo``).

    ``payload_tokens``: exact token counts of tool outputs known so far (handle -> tokens,
    stored after their POST). They go into the manifest only (items' ``tokens`` and
    ``elided_tokens``, with ``tokens_known``); the request body never depends on them.

    ``fold``: compact instead of evicting (the select policy, :mod:`app.domain.compaction.fold`):
    a pass runs past ``T_hi`` and folds the groups older than the newest K into the trunk's
    progress record, down to ``T_lo``; the cut is then the fold point. The record replaces
    the elision note (whose cache is then not used); the groups come from the grouping.

    The newest turn group that sends something is never evicted: when it alone (every
    older group evicted) still exceeds ``input_limit``, its results are bounded as a whole
    (:func:`fit_newest_group`); the request then fits with it present or a 422 names it.

    Invalidation (seed 000 section 4.7): the events' bindings and writes form the
    dependency graph (:mod:`app.domain.invalidation`); every historical observation in the
    leaf is shown as :func:`app.domain.supersession.plan_invalidation` chooses under
    ``invalidation`` (tombstone in place, or an appended notice naming ``path@rN``), and
    its manifest item says ``state: historical`` with the write that superseded it. A
    request that evicts (so rewrites the trunk) applies the deferred tombstones.

    Raises:
        PinnedOverBudget: root + trunk + next step alone exceed ``input_limit``.
        NewestGroupOverBudget: the newest turn group cannot fit even with each of its
            results cut to its marker.
    """
    w = _Window.start(session, events, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
                      previous_cut_seq=previous_cut_seq, render_reasoning=render_reasoning,
                      cache=leaf_cache if leaf_cache is not None else SessionMemo(), known=payload_tokens or {}, fold=fold,
                      options=invalidation or InvalidationOptions())
    _first_request(w)
    if w.measurement.total > (budget.input_limit if fold is None else min(fold.watermarks.t_hi, budget.input_limit)):
        _search(w)
    _rewrite_deferred(w)
    w.over_target = _over_target(w)
    cut_seq = w.groups[w.k].first_seq if w.k < len(w.groups) else 0
    w.cut_seq = max(cut_seq, previous_cut_seq)
    # The manifest lists the window one by one: the kept groups, the newest NOTE_MAX_GROUPS
    # dropped ones (the note's lines), and the steps and writes from the first of those on.
    # Older events (the groups the note names through its index payload) are one range.
    older = max(0, w.k - NOTE_MAX_GROUPS)
    boundary = w.groups[older].first_seq if older else 0
    record_now = w.records.get(w.k)
    folded_now = frozenset(record_now.folded_seqs) if record_now is not None and fold is not None else frozenset()
    # bookkeeping accounted like notes: a child's conclusions (not rendered in its own requests)
    # and the replaced documents (issue 16)
    side_events: list[Event] = [*w.grouping.conclusions, *w.documents.replaced]
    ranges = _older_ranges(w, older, boundary, folded_now, side_events)
    loop = _window_items(w, older)
    items = _bookkeeping_items(w, loop.items, boundary, folded_now, side_events)
    items.sort(key=_SEQ)
    items = _with_message_tokens(items, w.conversation, w.measurement, w.cache)
    return Assembly(
        invalidation=_report(w, loop),
        conversation=w.conversation,
        measurement=w.measurement,
        budget=budget,
        cut_seq=w.cut_seq,
        items=tuple(items),
        elided=tuple(loop.elided),
        ranges=tuple(ranges),
        evicted_now=w.k - w.first_kept,
        warnings=tuple(_warnings(w)),
        derived_payloads=w.derived_by_k.get(w.k, {}),
        record=w.records.get(w.k),
        over_target=w.over_target,
        held=w.held_pass,
        forecast=w.forecast,
    )


@dataclass(eq=False)
class _Window:
    """One :func:`assemble_window` call: its inputs, what its first steps found (the views,
    the invalidation plan, the leaf under it) and the request its phases settle on."""

    session: Session
    events: Sequence[Event]
    budget: Budget
    meter: TokenMeter
    item_cap_tokens: int
    previous_cut_seq: int
    render_reasoning: bool
    cache: SessionMemo
    known: Mapping[str, int]
    fold: Fold | None
    options: InvalidationOptions
    front: _Front
    documents: Documents
    shown_documents: tuple[DocumentEvent, ...]
    document_spans: Mapping[int, ElidedSpan]
    plan_seqs: frozenset[int]
    #: pass_due None: forecast from select's watermarks once the request is measured; planned
    #: first as due (new tombstones deferred), re-planned when the forecast says not due
    forecasting: bool
    bounded: dict[str, BoundedResult]
    sizes: dict[str, tuple[int, int]]
    raw_groups: list[tuple[LeafMessage, ...]]
    pin: int | None  # the newest user message: never folded (pinned_group)
    plan: InvalidationPlan = field(init=False)
    leaf_groups: list[tuple[LeafMessage, ...]] = field(init=False)
    newest: int = 0  # the newest turn group that sends something
    first_kept: int = 0  # the first group at or after the previous cut
    derived_by_k: dict[int, dict[str, bytes]] = field(default_factory=dict)
    records: dict[int, ProgressRecord] = field(default_factory=dict)
    rejected: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list)  # (fold point, findings) of passes rejected
    warnings_extra: list[str] = field(default_factory=list)
    # the request the phases settle on: the cut index, its conversation and measurement
    k: int = 0
    conversation: Conversation = field(init=False)
    measurement: Measurement = field(init=False)
    forecast: PassForecast | None = None
    pass_due: bool = False
    fitted: FittedGroup | None = None
    held_pass: dict[str, int] | None = None  # a pass was due but would not make progress (pass_without_progress)
    over_target: str | None = None
    cut_seq: int = 0

    @classmethod
    def start(cls, session: Session, events: Sequence[Event], *, budget: Budget, meter: TokenMeter,
              item_cap_tokens: int, previous_cut_seq: int, render_reasoning: bool, cache: SessionMemo,
              known: Mapping[str, int], fold: Fold | None, options: InvalidationOptions) -> _Window:
        """The first steps: the views (their new messages start tokenizing, ``meter.prefetch``,
        while the rest is planned), the documents, the invalidation plan and the leaf under it."""
        front = _front(events, cache, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
                       render_reasoning=render_reasoning, known=known)
        grouping = front.grouping
        documents = current_documents(grouping.documents)
        shown_documents, document_spans = bound_documents(documents.current, meter, item_cap_tokens)
        bounded, sizes = _bounded_results(front.views, front.known_counts, cache)
        w = cls(session=session, events=events, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
                previous_cut_seq=previous_cut_seq, render_reasoning=render_reasoning, cache=cache, known=known,
                fold=fold, options=options, front=front, documents=documents, shown_documents=shown_documents,
                document_spans=document_spans, plan_seqs=frozenset(p.seq for p in grouping.plans),
                forecasting=options.pass_due is None and fold is not None, bounded=bounded, sizes=sizes,
                raw_groups=[view.messages for view in front.views],
                pin=grouping.pinned if fold is not None else None)
        w.plan = w.planned(pass_due=True if w.forecasting else bool(options.pass_due), deferred=options.deferred)
        w.leaf_groups = w.with_plan(w.plan)
        return w

    @property
    def grouping(self) -> _Grouping:
        return self.front.grouping

    @property
    def groups(self) -> list[TurnGroup]:
        return self.front.groups

    def planned(self, *, pass_due: bool, deferred: frozenset[int], trunk_rewrite: bool = False) -> InvalidationPlan:
        """The invalidation plan of the session's graph under the options."""
        options = self.options
        return plan_invalidation(self.front.graph, mode=options.mode, pass_due=pass_due, trunk_rewrite=trunk_rewrite,
                                 deferred=deferred, shown_upto=options.shown_upto, states=self.front.observed,
                                 memo=self.cache)

    def anchored(self, current: InvalidationPlan) -> dict[int, list[str]]:
        """Notices by the index of the group they follow: the last group starting before
        the event that triggered them (the newest group when they first show)."""
        out: dict[int, list[str]] = {}
        for notice in current.notices:
            index = bisect_left(self.grouping.firsts, notice.anchor_seq) - 1  # the last group starting before it
            if index >= 0:
                out.setdefault(index, []).append(notice.text)
        return out

    def with_plan(self, current: InvalidationPlan) -> list[tuple[LeafMessage, ...]]:
        """Each group's leaf messages under the plan ``current``."""
        notes = self.anchored(current)
        raw_groups = self.raw_groups
        if not current.choices and not notes:
            return raw_groups
        touched = _touched_groups(current, self.grouping.firsts, raw_groups)
        views, control = self.front.views, self.meter.control_strings
        return [apply_invalidation(g, m, current, notes.get(i, ()), control, views[i].invalidated)
                if (touched is None or i in touched) or i in notes else m
                for i, (g, m) in enumerate(zip(self.groups, raw_groups))]

    def build(self, k: int, newest_messages: tuple[LeafMessage, ...] | None = None) -> tuple[Conversation, Measurement]:
        """The request with the groups before index ``k`` evicted or folded (``newest_messages``:
        the newest group's messages in place of its own), and its measurement."""
        leaf_groups, newest, pin, fold, meter = self.leaf_groups, self.newest, self.pin, self.fold, self.meter
        groups, session = self.groups, self.session
        kept = leaf_groups[k:] if newest_messages is None else \
            [*leaf_groups[k:newest], newest_messages, *leaf_groups[newest + 1:]]
        if pin is not None and pin < k:
            kept = [leaf_groups[pin], *kept]
        record_trunk = None
        if fold is not None:
            record, text = fold_record(session.contract, self.events, groups, k, watermarks=fold.watermarks,
                                       count=meter.count_text, memo=self.cache, pinned=pin)
            self.records[k], text = choose_record(fold, record, text, new_pass=k > self.first_kept,
                                                  contract=session.contract, count=meter.count_text)
            record_trunk = (text, self.records[k].index_payloads)
        conv, self.derived_by_k[k] = _conversation(session, kept, groups[:k], self.grouping.step, self.sizes,
                                                   meter.control_strings, self.cache, record_trunk=record_trunk,
                                                   documents=self.shown_documents)
        return conv, plan_roles(meter.measure(conv), conv, self.plan_seqs, meter)

    def take(self, k: int) -> None:
        """Settle on the request cut at ``k``."""
        self.k = k
        self.conversation, self.measurement = self.build(k)


def _first_request(w: _Window) -> None:
    """The request at the current cut and, under select, the pass forecast (the plan again
    without deferring new tombstones when no pass is due)."""
    groups, leaf_groups = w.groups, w.leaf_groups
    # The newest turn group that sends something is never evicted (nor a legacy cut past it
    # honoured); later groups send nothing (dropped, or pending calls without text).
    w.newest = next((i for i in range(len(groups) - 1, -1, -1) if leaf_groups[i]), len(groups) - 1)
    first_kept = bisect_left(w.grouping.firsts, w.previous_cut_seq)  # the first group at or after the cut
    w.first_kept = min(first_kept, max(w.newest, 0))
    w.take(w.first_kept)
    fold, options = w.fold, w.options
    if fold is not None:
        w.forecast = forecast_pass(w.measurement.total, _growth(w.leaf_groups, w.conversation, w.measurement,
                                                                first=w.first_kept, newest=w.newest, pin=w.pin,
                                                                memo=w.cache),
                                   t_hi=min(fold.watermarks.t_hi, w.budget.input_limit), calls=fold.due_calls)
        if w.forecasting and not w.forecast.due and w.plan.deferred - options.deferred:
            w.plan = w.planned(pass_due=False, deferred=options.deferred)
            w.leaf_groups = w.with_plan(w.plan)
            w.take(w.first_kept)
    w.pass_due = w.forecast.due if w.forecasting and w.forecast is not None else bool(options.pass_due)


def _search(w: _Window) -> None:
    """Over the limit (window) or past T_hi (select): the smallest k whose request fits the
    eviction target (binary search; the count is non-increasing in k up to the breadcrumb's
    growth, so verify and step after). k never passes the newest group. A fold (select)
    keeps the newest K groups and the pinned ones (fold_bounds) and aims at T_lo."""
    budget, fold, first_kept = w.budget, w.fold, w.first_kept
    unfolded, unfolded_conversation = w.measurement, w.conversation  # the request without a pass
    target = budget.eviction_target
    lo, hi = first_kept + 1, w.newest
    if fold is not None:
        target = fold.watermarks.t_lo
        lo, hi = fold_bounds(w.groups, newest=w.newest, first_kept=first_kept, keep_groups=fold.watermarks.keep_groups)
        hi = max(hi, first_kept)
    top = hi
    best: tuple[int, Conversation, Measurement] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        conv, meas = w.build(mid)
        if meas.total <= target:
            best, hi = (mid, conv, meas), mid - 1
        else:
            lo = mid + 1
    if best is None:
        last = max(top, first_kept)
        conv, meas = (w.conversation, w.measurement) if last == first_kept else w.build(last)
        best = (last, conv, meas)
    w.k, w.conversation, w.measurement = best
    while w.measurement.total > budget.input_limit and w.k < w.newest:
        w.take(w.k + 1)
    if fold is not None and w.k > first_kept:
        _reject_lossy_passes(w, fold)
        if w.k > first_kept and pass_without_progress(
                unfolded.total, w.measurement.total, t_hi=fold.watermarks.t_hi, t_lo=fold.watermarks.t_lo,
                input_limit=budget.input_limit):
            w.held_pass = {"tokens": unfolded.total, "after": w.measurement.total,
                           "frees": unfolded.total - w.measurement.total,
                           "needs": fold.watermarks.t_hi - fold.watermarks.t_lo}
            w.k, w.conversation, w.measurement = first_kept, unfolded_conversation, unfolded
    if w.measurement.total > budget.input_limit and w.groups:
        _fit_newest(w)
    elif w.measurement.total > budget.input_limit:
        check_pinned(budget, dict(w.measurement.by_role), w.measurement.total)


def _reject_lossy_passes(w: _Window, fold: Fold) -> None:
    """A fold point whose record loses or alters a protected field of what it folds is
    rejected; the pass keeps the larger raw slice (one group fewer folded)."""
    groups, session = w.groups, w.session
    findings = check_pass(fold, w.records[w.k], w.events, session.contract, w.conversation.trunk)
    while findings:
        w.rejected.append((groups[w.k].first_seq if w.k < len(groups) else 0, tuple(findings)))
        conv, meas = w.build(w.k - 1)  # k - 1 == first_kept: no pass (the accepted record stays)
        if meas.total > w.budget.input_limit:
            break
        w.k, w.conversation, w.measurement = w.k - 1, conv, meas
        findings = check_pass(fold, w.records[w.k], w.events, session.contract, w.conversation.trunk) \
            if w.k > w.first_kept else ()
    if findings:  # no smaller fold keeps them within input_limit: served, and said so
        w.warnings_extra.append(f"the pass at fold point seq {groups[w.k].first_seq if w.k < len(groups) else 0} "
                                f"loses protected fields: {'; '.join(str(f) for f in findings)[:2000]}")


def _fit_newest(w: _Window) -> None:
    """Every older group evicted and still over ``input_limit``: the newest group's results
    bounded as a whole (:func:`fit_newest_group`), or a 422 naming it."""
    group, meter, newest = w.groups[w.newest], w.meter, w.newest

    def measure_with(group_bounded: Mapping[str, BoundedResult]) -> tuple[Conversation, Measurement]:
        messages = _leaf_messages(group, group_bounded, w.render_reasoning, meter.control_strings, w.front.bindings)
        return w.build(newest, apply_invalidation(group, messages, w.plan, w.anchored(w.plan).get(newest, ()),
                                                  meter.control_strings))

    try:
        w.fitted = fit_newest_group(group, budget=w.budget, meter=meter, item_cap_tokens=w.item_cap_tokens,
                                    excess_tokens=w.measurement.total - w.budget.input_limit,
                                    measure_with=measure_with, payload_tokens=w.known)
    except NewestGroupOverBudget:
        _, pinned = w.build(len(w.groups))
        check_pinned(w.budget, dict(pinned.by_role), pinned.total)  # the pinned content alone is over
        raise
    w.conversation, w.measurement = w.fitted.conversation, w.fitted.measurement


def _rewrite_deferred(w: _Window) -> None:
    """A request that evicts or folds rewrites the trunk anyway: the deferred tombstones
    replace their outputs now."""
    if w.k > w.first_kept and w.plan.deferred and w.fitted is None:
        w.plan = w.planned(pass_due=w.pass_due, trunk_rewrite=True, deferred=w.options.deferred | w.plan.deferred)
        w.leaf_groups = w.with_plan(w.plan)
        w.take(w.k)
        while w.measurement.total > w.budget.input_limit and w.k < w.newest:
            w.take(w.k + 1)


def _over_target(w: _Window) -> str | None:
    """Why this request's pass ended above T_lo (:func:`pass_over_target`), None otherwise."""
    fold, k, pin = w.fold, w.k, w.pin
    if fold is None or k <= w.first_kept or w.measurement.total <= fold.watermarks.t_lo:
        return None
    pinned_now = sum(w.meter.count_text(m.content) for m in w.leaf_groups[pin]) if pin is not None and pin < k else 0
    return pass_over_target(w.measurement, fold.watermarks.t_lo, rejected=bool(w.rejected),
                            newest_only=k >= w.newest, pinned_message_tokens=pinned_now,
                            user_text_tokens=w.records[k].user_text.tokens if k in w.records else 0)


def _older_ranges(w: _Window, older: int, boundary: int, folded_now: frozenset[int],
                  side_events: Sequence[Event]) -> list[EventRange]:
    """The events before ``boundary`` (the groups the note or record names through its index
    payload, and the bookkeeping before them), accounted as one range; kept in the memo with
    what names them (older events are fixed once named by the index)."""
    groups, grouping, fold, cache = w.groups, w.grouping, w.fold, w.cache
    derived = w.derived_by_k.get(w.k, {})
    pinned_at = groups[w.pin] if w.pin is not None else None
    note_events = grouping.notes
    range_key = (tuple(groups[:older]), grouping.step, tuple(w.front.known_counts[:older]), next(iter(derived), None),
                 fold is not None, w.pin, tuple(e.seq for e in note_events if e.seq < boundary),
                 tuple((e.seq, e.seq in folded_now) for e in side_events if e.seq < boundary))
    kept_ranges: list[tuple[Any, tuple[EventRange, ...]]] = cache.event_ranges
    found_range = next((value for key, value in kept_ranges if key == range_key), None)
    if found_range is not None:
        return list(found_range)
    ranges: list[EventRange] = []
    if older:
        gone = Representation.ELIDED if fold is None else Representation.FOLDED
        counts = {gone: sum(1 + len(g.results) for g in groups[:older] if g is not pinned_at)}
        seqs = [seq for g in groups[:older] if g is not pinned_at for seq in g.seqs]
        for event in (*grouping.writes, *(e for e in grouping.steps if e is not grouping.step), *note_events):
            if event.seq < boundary:
                kind = Representation.NOT_RENDERED if isinstance(event, ArtifactWriteEvent) else Representation.SUPERSEDED
                kind = kind if fold is None else Representation.FOLDED
                counts[kind] = counts.get(kind, 0) + 1
                seqs.append(event.seq)
        for side in side_events:
            if side.seq < boundary:
                kind = Representation.FOLDED if side.seq in folded_now else \
                    Representation.NOT_RENDERED if isinstance(side, ConclusionEvent) else Representation.SUPERSEDED
                counts[kind] = counts.get(kind, 0) + 1
                seqs.append(side.seq)
        results = [w.bounded[r.handle] for g in groups[:older] if g is not pinned_at for r in g.results]
        ranges.append(EventRange(
            seq_from=min(seqs), seq_to=max(seqs), events=len(seqs), representations=counts,
            tokens=sum(b.payload_tokens or 0 for b in results), bytes=sum(b.payload_bytes for b in results),
            tokens_known=all(b.payload_tokens is not None for b in results),
            index=next(iter(derived), None),
            why=f"{older} oldest turn groups evicted to fit the budget (eq. 1), named with their handles in the "
                "index payload; superseded steps and artifact writes before them" if fold is None else
                f"{older} oldest turn groups folded into the progress record by earlier passes (listed by seq in the "
                "record, their handles in its index payload), with the writes, notes and steps before them"))
    cache.event_ranges = [(range_key, tuple(ranges)), *kept_ranges[:NOTES_KEPT - 1]]
    return ranges


@dataclass
class _Loop:
    """What the items loop builds: the window's items, the elided ones, the invalidation
    summary and the revisions presented as current."""

    items: list[Item]
    elided: list[Item]
    summary: dict[str, int]
    presented: set[str]


def _window_items(w: _Window, older: int) -> _Loop:
    """Each turn group's items from the group, its view, its place (folded, evicted, kept),
    its known counts, its results' bindings, states and choices. The last GET's outcome up to
    its newest groups is reused when all of those are unchanged for them (compared at once:
    the same objects, and maps that agree on every key they had; a key new since may only
    belong to a later event), so an extending GET visits only its newest groups. Equal to
    the full loop in every case (tests/unit/test_assembly_memo.py)."""
    groups, views, known_counts, bindings = w.groups, w.front.views, w.front.known_counts, w.front.bindings
    fold, k, pin, plan, cache = w.fold, w.k, w.pin, w.plan, w.cache
    loop = _Loop([], [], {"historical": 0, "tombstones": 0, "tombstone_tokens": 0, "replaced_tokens": 0, "noticed": 0,
                          "stale_tokens_kept": 0}, set())
    states, choices = plan.states, plan.choices
    indices: Sequence[int] = range(older, len(groups)) if pin is None or pin >= older \
        else [pin, *range(older, len(groups))]
    loop_key = (older, k, pin, fold is not None, w.previous_cut_seq, w.cut_seq, bool(states))
    snapshot_at = min(len(groups) - 1, w.newest)
    resumed: _ItemsLoop | None = cache.items_loop
    if resumed is not None and isinstance(indices, range) and resumed.key == loop_key \
            and older < resumed.upto <= snapshot_at and resumed.matches(groups, views, known_counts, older,
                                                                        states, choices, bindings):
        loop = _Loop(list(resumed.items), list(resumed.elided), dict(resumed.summary), set(resumed.presented))
        indices = range(resumed.upto, len(groups))
    else:
        resumed = None
    for index in indices:
        if index == snapshot_at and isinstance(indices, range) and index > older:
            cache.items_loop = _ItemsLoop.taken(loop_key, index, groups, views, known_counts, older, states,
                                                   choices, bindings, loop.items, loop.elided, loop.summary,
                                                   loop.presented, resumed)
        group, view = groups[index], views[index]
        if index < k and fold is not None and index != pin:  # folded: the record holds it (no state shown)
            why = folded_why(group.first_seq, w.previous_cut_seq, w.cut_seq)
            loop.elided.extend(held_item(view.invalidated, ("folded", i.seq, why), i,
                                         partial(replace, i, representation=Representation.FOLDED, why=why))
                               for i in view.items(group, EVICTED, known_counts[index], bindings))
            continue
        if index < k and index != pin:
            evicted = view.items(group, EVICTED, known_counts[index], bindings)
            loop.elided.extend(_with_invalidation(i, plan, None, str, None, view.invalidated)
                               if i.kind == "tool_result" and i.seq in states else i for i in evicted)
            continue
        if w.fitted is not None and index == w.newest:
            group_seqs = set(group.seqs)
            group_items: Sequence[Item] = _group_items(group, w.bounded,
                                                       [m for m in w.conversation.leaf if m.seq in group_seqs],
                                                       KEPT, bindings, fitted=w.fitted)
        else:
            found_items = view._items.get((KEPT, known_counts[index]))  # inline: once per group and GET
            group_items = found_items if found_items is not None else \
                view.items(group, KEPT, known_counts[index], bindings)
        if not states:
            loop.items.extend(group_items)
            continue
        _kept_group_items(w, loop, index, group_items)
    return loop


def _kept_group_items(w: _Window, loop: _Loop, index: int, group_items: Sequence[Item]) -> None:
    """A kept group's items under the invalidation plan, added to ``loop``: the view's last
    outcome when its items, states and choices are the same as then."""
    view, plan, summary, items = w.front.views[index], w.plan, loop.summary, loop.items
    states, choices = plan.states, plan.choices
    kept = view.kept
    if kept is not None and kept[0] is group_items and tuple(map(states.get, kept[1])) == kept[2] \
            and tuple(map(choices.get, kept[1])) == kept[3]:
        # the same items under states and choices equal to the last GET's: its outcome
        # (per item a function of the item, its state and choice, see _with_invalidation)
        items.extend(kept[4])
        for name, value in kept[5]:
            summary[name] += value
        loop.presented.update(kept[6])
        return
    held_states = view.invalidated
    start, before = len(items), dict(summary)
    presented_here: list[str] = []
    for item in group_items:
        if item.kind == "tool_result" and item.zone == "leaf":
            state = states.get(item.seq)
            if state is None:
                items.append(item)
                continue
            # inline: _with_invalidation's memo hit (the same item, state and choice; the
            # text it shows is then the same too: it is the view's own message)
            choice = choices.get(item.seq)
            held = held_states.get((id(item), choice is not None))
            if held is not None and held[0] is item and held[1] is state and held[2] is choice:
                item = held[4]
                for name, value in held[5]:
                    summary[name] += value
            else:
                item = _with_invalidation(item, plan, w.meter, partial(_tool_text, w.raw_groups[index], item.seq),
                                          summary, held_states)
            if item.state == "current":
                presented_here.extend(item.bindings)  # those naming a revision kept below
        items.append(item)
    loop.presented.update(presented_here)
    if w.fitted is None or index != w.newest:
        result_seqs = tuple(i.seq for i in group_items if i.kind == "tool_result" and i.zone == "leaf")
        view.kept = (group_items, result_seqs, tuple(map(states.get, result_seqs)), tuple(map(choices.get, result_seqs)),
                     tuple(items[start:]),
                     tuple((name, summary[name] - before[name]) for name in summary if summary[name] != before[name]),
                     tuple(presented_here))


def _bookkeeping_items(w: _Window, items: list[Item], boundary: int, folded_now: frozenset[int],
                       side_events: Sequence[Event]) -> list[Item]:
    """``items`` with the bookkeeping from ``boundary`` on: artifact writes, the next step and
    the steps it replaced, notes, documents and conclusions; under select, what is before the
    fold point marked folded."""
    grouping, previous_cut_seq, cut_seq = w.grouping, w.previous_cut_seq, w.cut_seq
    step, conversation = grouping.step, w.conversation
    made = w.cache.bookkeeping_items  # held_item's memo (this GET's keys kept)
    used = len(made)
    for write in grouping.writes:
        if write.seq >= boundary:
            items.append(held_item(made, ("write", write.seq), write, partial(
                Item, seq=write.seq, event_id=write.event_id, kind=write.kind, zone=None,
                representation=Representation.NOT_RENDERED,
                why=f"artifact revision bookkeeping ({write.artifact} r{write.revision})")))
    if step is not None:
        last_message = conversation.leaf[-1] if conversation.leaf else None
        broken = last_message.neutralised if last_message is not None and last_message.seq == step.seq else 0
        cut = elided_note(step.text)  # shown as head + tail (bounded_note)
        items.append(Item(seq=step.seq, event_id=step.event_id, kind="step", zone="leaf",
                          representation=Representation.HEAD_TAIL if cut else Representation.VERBATIM,
                          why="the next bounded step, last in the leaf" + (
                              f" (over {NOTE_CHARS:,} characters: head + tail)" if cut else ""),
                          tokens_known=False if cut else None,  # its elided tokens are not counted
                          elided_bytes=len(step.text[cut].encode("utf-8", "surrogatepass")) if cut else None,
                          transforms=(neutralise_transform(broken),) if broken else ()))
    for earlier in grouping.steps:
        if earlier is not step and earlier.seq >= boundary:
            items.append(Item(seq=earlier.seq, event_id=earlier.event_id, kind="step", zone=None,
                              representation=Representation.SUPERSEDED,
                              why=f"a later step (seq {step.seq if step else '-'}) replaced it"))
    items.extend(Item(seq=n["seq"], event_id=n["event_id"], kind=n["kind"], zone=n["zone"],
                      representation=Representation(n["representation"]), why=n["why"])
                 for n in grouping.note_items() if n["seq"] >= boundary)
    items.extend(_side_items(w.documents, side_events, conversation, boundary=boundary, folded=folded_now,
                             why_folded=lambda seq: folded_why(seq, previous_cut_seq, cut_seq),
                             document_spans=w.document_spans))
    if w.fold is not None:  # bookkeeping before the fold point (writes, notes, older steps) is in the record
        items = [held_item(made, ("folded", i.seq, i.kind, previous_cut_seq, cut_seq), i, partial(
                     replace, i, representation=Representation.FOLDED, zone="trunk",
                     why=f"{i.why}; " + folded_why(i.seq, previous_cut_seq, cut_seq)))
                 if i.seq < cut_seq and i.representation in (Representation.NOT_RENDERED, Representation.SUPERSEDED)
                 and i.kind not in ("document", "conclusion")  # _side_items placed them
                 else i for i in items]
    if len(made) > 2 * used + 256:  # keys of events gone from the window (folded, evicted) pile up: drop them
        live = {i.seq for i in items}
        for key in [key for key in made if key[1] not in live]:
            del made[key]
    return items


def _warnings(w: _Window) -> list[str]:
    """The request's warnings: the meter's, the kept groups' call warnings, rejected passes
    and a fitted newest group."""
    declared = declared_tools(w.session)
    warnings = list(w.measurement.warnings)
    for group, view in zip(w.groups[w.k:], w.front.views[w.k:]):
        held = view._warnings  # inline: once per group and GET
        warnings.extend(held[1] if held is not None and held[0] == declared else view.warnings(group, declared))
    warnings += w.warnings_extra
    warnings += [f"pass rejected at fold point seq {seq}: {len(found)} protected fields lost or altered "
                 f"({'; '.join(sorted({str(getattr(f, 'field', f)) for f in found}))[:500]}); kept the larger raw slice"
                 for seq, found in w.rejected]
    if w.fitted is not None:
        warnings.append(f"seq {w.groups[w.newest].first_seq}: the newest turn group does not fit input_limit with its "
                        f"results at the per-item cap; they share {w.fitted.share_tokens} tokens as head + tail")
    return warnings


def _report(w: _Window, loop: _Loop) -> InvalidationReport:
    """The manifest's invalidation summary."""
    plan, options = w.plan, w.options
    notes = w.anchored(plan)
    tombstoned = [c.key for c in plan.choices.values() if c.choice == "tombstone"]
    return InvalidationReport(
        mode=options.mode, pass_due=w.pass_due, deferred=tuple(sorted(plan.deferred)),
        shown_upto=max([options.shown_upto, *tombstoned]),
        notices=tuple(NoticeRef(after_seq=w.groups[i].first_seq, tokens=w.meter.count_text(text))
                      for i, texts in sorted(notes.items()) if i >= w.k for text in texts),
        # the revisions the request presents as current (what an action planned on it assumes;
        # a tool runner checks them with POST /preconditions)
        presented=tuple(sorted(x for x in loop.presented if "@r" in x)), **loop.summary)
