"""Turn groups and the dependency graph of a session's events, kept up to date from GET to GET
as events are appended (the session memo).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Protocol

from app.domain.assembly.base import _SEQ
from app.domain.invalidation import DependencyGraph, GraphBuilder, ItemState
from app.domain.notes import note_items
from app.domain.scratchpad import leaf_message
from app.domain.types import (
    ArtifactWriteEvent,
    Binding,
    ChildConclusionEvent,
    ConclusionEvent,
    DocumentEvent,
    Event,
    HypothesisEvent,
    MessageEvent,
    ObligationEvent,
    PlanEvent,
    StepEvent,
    ToolResultEvent,
    TurnGroup,
)


class GroupingMemo(Protocol):
    """The session memo's fields this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    turn_groups: _Grouping | None
    invalidation_graph: tuple[GraphBuilder, DependencyGraph] | None
    observation_states: tuple[DependencyGraph, dict[int, ItemState], dict[int, tuple[Binding, ...]],
                              list[Event]] | None



def build_turn_groups(events: Sequence[Event]) -> tuple[list[TurnGroup], StepEvent | None, list[ArtifactWriteEvent]]:
    """Group events into turn groups in seq order.

    An assistant message opens a group that collects the results of its tool calls
    (parallel calls included, whatever their arrival order); a user message or an
    assistant message without calls is a group of its own. Returns the groups, the
    latest step (shown at the end of the leaf) and the artifact writes (bookkeeping).
    """
    grouping = _Grouping()
    grouping.extend(sorted(events, key=_SEQ))
    return list(grouping.groups), grouping.step, list(grouping.writes)


def cached_turn_groups(events: Sequence[Event], cache: GroupingMemo) -> list[TurnGroup]:
    """:func:`build_turn_groups`' groups, through the grouping kept in ``cache`` (a session's
    leaf cache: the one :func:`assemble_window` extends from GET to GET)."""
    return list(_Grouping.of(events, cache).groups)


class _Grouping:
    """:func:`build_turn_groups`, kept up to date as events are appended: a session's events
    only grow (dense seqs), so a GET groups only the events the previous one had not seen.
    A group a new result completes is rebuilt; the others stay the same objects. A grouping
    in a cache is never changed (another thread may be reading it): it is copied, then
    extended."""

    __slots__ = ("conclusions", "documents", "firsts", "got", "groups", "last_seq", "messages", "note_entries", "notes",
                 "owner", "pinned", "plans", "seen", "step", "steps", "writes")

    def __init__(self) -> None:
        self.seen: list[Event] = []
        self.last_seq = -1
        self.messages: list[MessageEvent] = []
        self.firsts: list[int] = []  # each group's first seq (its message's), increasing
        self.owner: dict[str, int] = {}
        self.got: list[dict[str, ToolResultEvent]] = []
        self.groups: list[TurnGroup] = []
        self.step: StepEvent | None = None
        self.steps: list[StepEvent] = []  # every step, the latest last
        self.writes: list[ArtifactWriteEvent] = []
        self.documents: list[DocumentEvent] = []  # every retrieved document (issue 16), in seq order
        self.plans: list[PlanEvent] = []  # every plan version, in seq order
        self.notes: list[Event] = []  # every hypothesis and obligation event, in seq order
        self.note_entries: list[dict[str, Any]] | None = None  # note_items(notes), once asked
        self.conclusions: list[ConclusionEvent] = []  # a child's conclusions in its own session, in seq order
        self.pinned: int | None = None  # the newest user message's group (compaction.fold.pinned_group)

    def extend(self, events: Sequence[Event]) -> None:
        """Add ``events`` (in seq order, after every event seen so far)."""
        touched: set[int] = set()
        for event in events:
            if isinstance(event, (HypothesisEvent, ObligationEvent)):
                self.notes.append(event)
                self.note_entries = None
            elif isinstance(event, ConclusionEvent):
                self.conclusions.append(event)
            if isinstance(event, (PlanEvent, ChildConclusionEvent)):
                # a plan version or a child's conclusion: a user message of its own at its seq
                # (app/domain/scratchpad.py), so the leaf stays append-only when one arrives
                if isinstance(event, PlanEvent):
                    self.plans.append(event)
                event = leaf_message(event)
            if isinstance(event, MessageEvent):
                index = len(self.messages)
                self.messages.append(event)
                self.firsts.append(event.seq)
                self.got.append({})
                self.groups.append(TurnGroup(message=event))
                if event.role == "user" and event.kind == "message":
                    self.pinned = index
                for call in event.tool_calls:
                    self.owner[call.call_id] = index
                if event.tool_calls:
                    touched.add(index)
            elif isinstance(event, ToolResultEvent):
                index = self.owner.get(event.call_id, -1)
                if index >= 0:  # ingestion guarantees it; stay total anyway
                    self.got[index] = {**self.got[index], event.call_id: event}  # copied: shared with older copies
                    touched.add(index)
            elif isinstance(event, StepEvent):
                self.step = event
                self.steps.append(event)
            elif isinstance(event, ArtifactWriteEvent):
                self.writes.append(event)
            elif isinstance(event, DocumentEvent):
                self.documents.append(event)
            # hypothesis and obligation events are not rendered in the leaf (README "Hypotheses
            # and obligations"): the progress record carries their current values
        for index in touched:
            message, results = self.messages[index], self.got[index]
            ordered = tuple(results[c.call_id] for c in message.tool_calls if c.call_id in results)
            pending = tuple(c.call_id for c in message.tool_calls if c.call_id not in results)
            self.groups[index] = TurnGroup(message=message, results=ordered, pending=pending)
        self.seen.extend(events)
        if events:
            self.last_seq = events[-1].seq

    def copy(self) -> _Grouping:
        out = _Grouping()
        out.seen, out.last_seq, out.messages = list(self.seen), self.last_seq, list(self.messages)
        out.firsts = list(self.firsts)
        out.owner, out.got, out.groups = dict(self.owner), list(self.got), list(self.groups)
        out.step, out.steps, out.writes = self.step, list(self.steps), list(self.writes)
        out.documents, out.plans = list(self.documents), list(self.plans)
        out.notes, out.note_entries, out.conclusions = list(self.notes), self.note_entries, list(self.conclusions)
        out.pinned = self.pinned
        return out

    def note_items(self) -> list[dict[str, Any]]:
        """:func:`app.domain.notes.note_items` of the notes seen so far (kept until one more
        arrives: a GET without a new note does not scan the session's events for them)."""
        if self.note_entries is None:
            self.note_entries = note_items(self.notes)
        return self.note_entries

    @classmethod
    def of(cls, events: Sequence[Event], cache: GroupingMemo) -> _Grouping:
        """The grouping of ``events``: the one kept in ``cache`` when it has seen exactly
        ``events``; that one extended when ``events`` starts with exactly the events it has
        seen (the same objects, or equal ones) and goes on in increasing seq order; else
        built afresh. The result is kept in ``cache``."""
        kept: _Grouping | None = cache.turn_groups
        if kept is not None and len(events) >= len(kept.seen) and events[:len(kept.seen)] == kept.seen:
            new = events[len(kept.seen):]
            if not new:
                return kept
            seqs = [kept.last_seq, *(e.seq for e in new)]
            if all(a < b for a, b in pairwise(seqs)):
                grown = kept.copy()
                grown.extend(new)
                cache.turn_groups = grown
                return grown
        fresh = cls()
        fresh.extend(sorted(events, key=_SEQ))
        cache.turn_groups = fresh
        return fresh


def cached_graph(events: Sequence[Event], cache: GroupingMemo) -> DependencyGraph:
    """:func:`app.domain.invalidation.build_graph` of ``events``, kept in ``cache`` (the
    session's memo, an explicit value) as the builder that has seen them and the graph it
    gave: the same graph when ``events`` are exactly the events seen; a copy of the builder
    extended with the new ones when ``events`` starts with them and goes on in increasing
    seq order (a GET adds only its new events, O(new events) but for copying the builder's
    mappings); else built afresh. Equal to ``build_graph(events)`` in every case."""
    kept: tuple[GraphBuilder, DependencyGraph] | None = cache.invalidation_graph
    if kept is not None:
        builder, graph = kept
        seen = builder.seen
        if len(events) >= len(seen) and events[:len(seen)] == seen:
            new = events[len(seen):]
            if not new:
                return graph
            if all(a < b for a, b in pairwise([builder.last_seq, *(e.seq for e in new)])):
                grown = builder.copy()
                grown.extend(new)
                graph = grown.graph()
                cache.invalidation_graph = (grown, graph)
                return graph
    fresh = GraphBuilder()
    fresh.extend(sorted(events, key=_SEQ))
    graph = fresh.graph()
    cache.invalidation_graph = (fresh, graph)
    return graph


def cached_states(graph: DependencyGraph, cache: GroupingMemo
                  ) -> tuple[dict[int, ItemState], dict[int, tuple[Binding, ...]]]:
    """``graph.observation_states()`` and each observation's bindings (by seq), for
    ``graph`` as :func:`cached_graph` gave it from ``cache``: kept there with the graph
    they belong to, and carried over from the previous GET's graph when this one extends
    it (:meth:`GraphBuilder.states_after`: only what the new events can change is judged
    again, and an unchanged state is the same object from GET to GET). Equal to a fresh
    computation in every case."""
    kept = cache.observation_states
    if kept is not None and kept[0] is graph:
        return kept[1], kept[2]
    held = cache.invalidation_graph
    builder = held[0] if held is not None and held[1] is graph else None  # the builder that gave graph
    if kept is not None and builder is not None and builder.seen[:len(kept[3])] == kept[3]:
        states = builder.states_after(graph, kept[0], kept[1])
        bindings = dict(kept[2])
        for seq in list(graph.observations)[len(kept[0].observations):]:
            bindings[seq] = graph.observations[seq].bindings
    else:
        states = graph.observation_states()
        bindings = {seq: node.bindings for seq, node in graph.observations.items()}
    if builder is not None:  # the events it saw: the next graph extends this one only if it starts with them
        cache.observation_states = (graph, states, bindings, builder.seen)
    return states, bindings
