"""Group views: what assembly derives from each turn group, kept in the session memo, and the
first steps of a window shared with the warm-up after a POST.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, Protocol

from app.domain.assembly.base import _HANDLE, _SEQ, BoundedResult, _extends, _shared_prefix
from app.domain.assembly.bounding import bound_tool_output, bound_user_message
from app.domain.assembly.grouping import GroupingMemo, _Grouping, cached_graph, cached_states
from app.domain.assembly.items import _group_items
from app.domain.assembly.leaf import _leaf_messages, group_call_warnings
from app.domain.budget import Budget
from app.domain.cuts import ElidedSpan
from app.domain.invalidation import DependencyGraph, ItemState
from app.domain.layout import (
    LeafMessage,
)
from app.domain.manifest import (
    Item,
)
from app.domain.ports import TokenMeter
from app.domain.supersession import InvalidationPlan
from app.domain.types import (
    Binding,
    Event,
    ToolResultEvent,
    TurnGroup,
)

#: (meter, per-item cap, reasoning shown, per-message cap): what a group's view depends on
#: beside its events
ViewParams = tuple[Any, int, bool, int]


class ViewsMemo(GroupingMemo, Protocol):
    """The session memo's fields this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    group_views: dict[ViewParams, dict[tuple[Any, ...], _GroupView]]
    last_views: dict[ViewParams, _LastViews]
    bounded_outputs: dict[tuple[Any, ...], BoundedResult]
    bounded_results: tuple[tuple[_GroupView, ...], tuple[tuple[int | None, ...], ...], dict[str, BoundedResult],
                           dict[str, tuple[int, int]]] | None



class _GroupView:
    """What assembly derives from one turn group, kept in the session's leaf cache from GET
    to GET: its leaf messages and, per known token counts of its results, its bounded tool
    results (by handle) and its manifest items kept or evicted; its call warnings. Keyed by
    the identity of the group's events (held here, so the key cannot be reused by other
    objects): a session's events are the same objects from GET to GET (the service's event
    memo) and what its results read (their bindings, part of the key), so an unchanged group
    costs one lookup. The messages do not depend on the counts (the body never does), so a
    count learnt later changes the items only. Invalidation is applied per request, on top
    (``apply_invalidation``, ``_with_invalidation``)."""

    __slots__ = ("_bounded", "_items", "_warnings", "events", "invalidated", "kept", "message_span", "messages")

    def __init__(self, events: tuple[Event, ...], messages: tuple[LeafMessage, ...],
                 counts: tuple[int | None, ...], bounded: dict[str, BoundedResult]) -> None:
        self.events = events
        self.messages = messages
        self._bounded: dict[tuple[int | None, ...], dict[str, BoundedResult]] = {counts: bounded}
        self._items: dict[tuple[str, tuple[int | None, ...]], tuple[Item, ...]] = {}
        self._warnings: tuple[frozenset[str], tuple[str, ...]] | None = None
        self.invalidated: dict[Any, Any] = {}  # _with_invalidation's memo
        # its kept items with the plan applied at the last GET: (its items before, the seqs of
        # their leaf tool results, those seqs' states and choices, the items after, the summary
        # counts they added, the bindings they presented); assemble_window's items loop
        self.kept: tuple[Any, ...] | None = None
        self.message_span: ElidedSpan | None = None  # a user message cut to head + tail (bound_user_message)

    def items(self, group: TurnGroup, placement: str, counts: tuple[int | None, ...],
              bindings: Mapping[int, tuple[Binding, ...]]) -> tuple[Item, ...]:
        found = self._items.get((placement, counts))
        if found is None:
            bounded = self._bounded[counts]
            found = self._items[(placement, counts)] = tuple(_group_items(group, bounded, self.messages, placement,
                                                                          bindings, message_span=self.message_span))
        return found

    def warnings(self, group: TurnGroup, declared: frozenset[str]) -> tuple[str, ...]:
        if self._warnings is None or self._warnings[0] != declared:
            self._warnings = (declared, tuple(group_call_warnings(group, declared)))
        return self._warnings[1]


@dataclass(frozen=True)
class _ItemsLoop:
    """Where :func:`assemble_window`'s items loop stood before its newest groups at the
    last GET (its memo ``"items loop"``): the groups it had visited (``older`` up to
    ``upto``), their views and known counts, the invalidation states, choices and bindings
    it saw, and what it had built of items, elided items, the summary and the revisions
    presented."""

    key: tuple[Any, ...]
    upto: int
    groups: tuple[TurnGroup, ...]
    views: tuple[_GroupView, ...]
    counts: tuple[tuple[int | None, ...], ...]
    last_seq: int  # the last seq of any event of those groups
    states: Mapping[int, Any]
    choices: Mapping[int, Any]
    bindings: Mapping[int, Any]
    items: tuple[Item, ...]
    elided: tuple[Item, ...]
    summary: Mapping[str, int]
    presented: frozenset[str]

    @classmethod
    def taken(cls, key: tuple[Any, ...], upto: int, groups: Sequence[TurnGroup], views: Sequence[_GroupView],
              counts: Sequence[tuple[int | None, ...]], older: int, states: Mapping[int, Any],
              choices: Mapping[int, Any], bindings: Mapping[int, Any], items: Sequence[Item],
              elided: Sequence[Item], summary: Mapping[str, int], presented: set[str],
              before: _ItemsLoop | None = None) -> _ItemsLoop:
        """The loop's state before index ``upto``; ``before``: the snapshot this loop
        resumed from (its groups are a prefix of these)."""
        return cls(key, upto, tuple(groups[older:upto]), tuple(views[older:upto]), tuple(counts[older:upto]),
                   _last_seq(groups, older, upto, before), states, choices, bindings,
                   tuple(items), tuple(elided), dict(summary), frozenset(presented))

    def matches(self, groups: Sequence[TurnGroup], views: Sequence[_GroupView],
                counts: Sequence[tuple[int | None, ...]], older: int, states: Mapping[int, Any],
                choices: Mapping[int, Any], bindings: Mapping[int, Any]) -> bool:
        """Whether the groups it visited are the same now, and all they depend on too."""
        upto = self.upto
        return (tuple(groups[older:upto]) == self.groups and tuple(views[older:upto]) == self.views
                and tuple(counts[older:upto]) == self.counts
                and _agree(states, self.states, self.last_seq) and _agree(choices, self.choices, self.last_seq)
                and _agree(bindings, self.bindings, self.last_seq))


def _last_seq(groups: Sequence[TurnGroup], older: int, upto: int, before: _ItemsLoop | None) -> int:
    """The last seq of any event of ``groups[older:upto]`` (a group's results are in its
    calls' order, not in seq order); from ``before``'s for the groups it covered."""
    start, last = (before.upto, before.last_seq) if before is not None else (older, 0)
    for g in groups[start:upto]:
        last = max(last, g.message.seq, *(r.seq for r in g.results))
    return last


def _agree(now: Mapping[int, Any], then: Mapping[int, Any], last_seq: int) -> bool:
    """``now`` has every entry ``then`` had, equal, and no new key up to ``last_seq``
    (C-level set and dict-view operations: no Python loop over the entries)."""
    if now is then:
        return True
    if not then.items() <= now.items():
        return False
    return len(now) == len(then) or all(seq > last_seq for seq in now.keys() - then.keys())


def _group_views(groups: Sequence[TurnGroup], cache: ViewsMemo, meter: TokenMeter,
                 item_cap_tokens: int, render_reasoning: bool, known: Mapping[str, int],
                 bindings: Mapping[int, tuple[Binding, ...]],
                 message_cap_tokens: int, *, handoff: bool = True
                 ) -> tuple[list[_GroupView], list[tuple[int | None, ...]]]:
    """Each group's :class:`_GroupView` (from ``cache``, the session's leaf cache, or built)
    and its results' known token counts. A payload's bounded form is also kept by value
    (meter, cap, handle, payload, known count), so an output posted again in another group
    is cut once. Views not used by this call are dropped once they outnumber the groups
    (events read again as new objects would otherwise pile up)."""
    params = (meter, item_cap_tokens, render_reasoning, message_cap_tokens)
    views: dict[tuple[Any, ...], _GroupView] = cache.group_views.setdefault(params, {})
    out: list[_GroupView] = []
    all_counts: list[tuple[int | None, ...]] = []
    keys = []
    # The last call's answer, reused for the groups it shares with this one (the same group
    # objects, in the same places) when the known counts and the bindings are equal: a
    # GET then looks up only the groups after them (the newest, usually one or two).
    last: _LastViews | None = cache.last_views.get(params)
    start = 0
    where: dict[str, int] = {}  # result handle -> index of its group
    if last is not None and _extends(bindings, last.bindings) and _extends(known, last.known):
        start = _shared_prefix(groups, last.groups)
        # a count learnt since for an output of a shared group changes that group's view
        for handle in islice(known, len(last.known), None):
            start = min(start, last.where.get(handle, start))
        start = max(0, start - 1)  # the last shared group may have gained results: looked up again
        out, keys, all_counts = last.views[:start], last.keys[:start], last.counts[:start]
        where = dict(last.where)  # entries of later groups are set again below (a stale one only lowers start)

    def bound(results: Sequence[ToolResultEvent]) -> dict[str, BoundedResult]:
        bounded: dict[str, BoundedResult] = {}
        for result in results:
            if result.handle not in bounded:
                count = known.get(result.handle)
                bkey = (meter, item_cap_tokens, result.handle, result.payload, count)
                b = cache.bounded_outputs.get(bkey)
                if b is None:
                    b = cache.bounded_outputs[bkey] = bound_tool_output(meter, result, item_cap_tokens, payload_tokens=count)
                bounded[result.handle] = b
        return bounded

    fresh: list[LeafMessage] = []  # messages of the views built now
    for group in groups[start:]:
        results = group.results
        if results:
            key: tuple[Any, ...] = (id(group.message), *map(id, results),
                                    tuple(map(bindings.get, map(_SEQ, results))))
            counts: tuple[int | None, ...] = tuple(map(known.get, map(_HANDLE, results)))
        else:
            key, counts = (id(group.message),), ()
        keys.append(key)
        all_counts.append(counts)
        for result in results:
            where[result.handle] = len(out)
        view = views.get(key)
        if view is None:
            bounded = bound(results)
            message, span = bound_user_message(meter, group.message, message_cap_tokens)
            shown = replace(group, message=message) if span is not None else group
            messages = tuple(_leaf_messages(shown, bounded, render_reasoning, meter.control_strings, bindings))
            view = views[key] = _GroupView((group.message, *results), messages, counts, bounded)
            view.message_span = span
            fresh.extend(messages)
        elif counts not in view._bounded:
            view._bounded[counts] = bound(results)
        out.append(view)
    if fresh:
        meter.prefetch(fresh, handoff=handoff)
    if len(views) > 2 * len(groups) + 64:
        kept = {key: views[key] for key in keys}
        views.clear()
        views.update(kept)
    cache.last_views[params] = _LastViews(list(groups), out, all_counts, keys, known, bindings,
                                                           where)
    return list(out), list(all_counts)


@dataclass(frozen=True)
class _LastViews:
    """:func:`_group_views`' last answer in a session's memo: the groups it was for, their
    views, counts and keys, the ``known`` counts and ``bindings`` it was given (mappings the
    caller never changes afterwards) and each result handle's group index."""

    groups: list[TurnGroup]
    views: list[_GroupView]
    counts: list[tuple[int | None, ...]]
    keys: list[tuple[Any, ...]]
    known: Mapping[str, int]
    bindings: Mapping[int, tuple[Binding, ...]]
    where: dict[str, int]


def _touched_groups(plan: InvalidationPlan, firsts: Sequence[int],
                    raw_groups: Sequence[tuple[LeafMessage, ...]]) -> set[int] | None:
    """The indices of the groups whose leaf messages ``plan`` replaces (a tool message whose
    choice has a text: a tombstone), found by the group starting at or before each seq
    (``firsts``: the groups' first seqs); None when one is not found there (every group is
    then looked at). :func:`apply_invalidation` returns any other group's messages as they
    are (with no notice after it), so it need not run on them."""
    out: set[int] = set()
    for seq, choice in plan.choices.items():
        if choice.text is None:
            continue
        index = bisect_right(firsts, seq) - 1
        if index < 0 or not any(m.seq == seq and m.role == "tool" for m in raw_groups[index]):
            return None
        out.add(index)
    return out


def warm_window(events: Sequence[Event], *, budget: Budget, meter: TokenMeter, item_cap_tokens: int,
                render_reasoning: bool = False, leaf_cache: ViewsMemo,
                payload_tokens: Mapping[str, int] | None = None) -> None:
    """The first steps of :func:`assemble_window` for ``events``, taken ahead of the GET
    that will assemble them (after a POST): the grouping, the dependency graph and its
    observations' states and bindings, and each turn group's bounded outputs and leaf
    messages, kept in ``leaf_cache`` exactly as :func:`assemble_window` keeps them with the
    same arguments; the messages of groups not seen before start tokenizing
    (``meter.prefetch``, on another thread: the encode releases the GIL).

    Nothing here is a result: each step is a memo that :func:`assemble_window` checks
    against its own inputs (equal to a fresh computation in every case), and the segment
    cache holds exactly what encoding a segment gives, whoever encodes it. Called with
    other arguments than the GET's (a count learnt in between, another profile), it only
    wasted its work. Not thread-safe for one ``leaf_cache``: the caller holds the
    session's plan lock (app/services/memo.py)."""
    _front(events, leaf_cache, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
           render_reasoning=render_reasoning, known=payload_tokens or {}, handoff=False)


@dataclass(frozen=True)
class _Front:
    """The first steps of :func:`assemble_window` (:func:`_front`)."""

    grouping: _Grouping
    groups: list[TurnGroup]
    graph: DependencyGraph
    observed: dict[int, ItemState]
    bindings: dict[int, tuple[Binding, ...]]
    views: list[_GroupView]
    known_counts: list[tuple[int | None, ...]]


def _bounded_results(views: Sequence[_GroupView], counts: Sequence[tuple[int | None, ...]],
                     cache: ViewsMemo) -> tuple[dict[str, BoundedResult], dict[str, tuple[int, int]]]:
    """Every group's bounded tool results by handle (built by :func:`_group_views`) and each
    one's payload (bytes, lines), for the views and known counts of this GET. Memoized in
    ``cache`` (``"bounded results"``): when the last GET's views and counts are a prefix of
    these (the same view objects, equal counts), only the new groups are added, to copies."""
    held = cache.bounded_results
    start = 0
    if held is not None and len(held[0]) <= len(views) and tuple(views[:len(held[0])]) == held[0] \
            and tuple(counts[:len(held[0])]) == held[1]:
        start = len(held[0])
        bounded, sizes = dict(held[2]), dict(held[3])
    else:
        bounded, sizes = {}, {}
    for view, group_counts in zip(views[start:], counts[start:]):
        found = view._bounded[group_counts]
        bounded.update(found)
        sizes.update((handle, (b.payload_bytes, b.payload_lines)) for handle, b in found.items())
    cache.bounded_results = (tuple(views), tuple(counts), bounded, sizes)
    return bounded, sizes


#: key of the session leaf cache's entry of :func:`_bounded_results`
_BOUNDED = "bounded results"


def _front(events: Sequence[Event], cache: ViewsMemo, *, budget: Budget, meter: TokenMeter,
           item_cap_tokens: int, render_reasoning: bool, known: Mapping[str, int], handoff: bool = True) -> _Front:
    """The grouping, the dependency graph with its observations' states and bindings, and
    each turn group's view, from ``cache`` (the session's leaf cache) or built there; the
    new views' messages handed to ``meter.prefetch`` (``handoff``: see
    ``TokenMeter.prefetch``). One function for :func:`assemble_window` and
    :func:`warm_window`, so a warm-up takes exactly the GET's first steps."""
    grouping = _Grouping.of(events, cache)
    groups = list(grouping.groups)
    graph = cached_graph(events, cache)
    observed, bindings = cached_states(graph, cache)
    views, known_counts = _group_views(groups, cache, meter, item_cap_tokens, render_reasoning, known, bindings,
                                       budget.role_limits()["observations"] or budget.input_limit, handoff=handoff)
    return _Front(grouping, groups, graph, observed, bindings, views, known_counts)
