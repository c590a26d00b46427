"""A session's memo: what one plan of the session's next request keeps for the next one.

A session's events only grow, and its next request is mostly its previous one, so most
of what a plan derives (turn groups, the dependency graph, each group's leaf messages and
items, the progress record's entries, the layout digest, the wire body's leaf JSON) is
the same from GET to GET. :class:`SessionMemo` holds each such artefact in a typed field
of its own, named for what it keeps; the phase that derives it reads the field, checks
that what it holds was derived from inputs equal to its own, and otherwise derives it
again and sets it. Nothing here is a result: a plan with an empty memo gives the same
body and manifest as one with a full memo (tests/golden holds this on real traces).

The service keeps one memo per session in its bounded per-worker cache
(app/services/memo.py) and holds the session's plan lock while a plan or a warm-up uses
it: a memo is not thread-safe. A memo of its own (``SessionMemo()``) serves one-off plans
and tests.

The memo is bounded by its owner, in bytes: :attr:`SessionMemo.nbytes` is counted as
fields are set (:meth:`SessionMemo.charge`: each phase charges what it adds, estimated
from the sizes of the texts and the number of entries it keeps, not by walking objects).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the artefacts' own modules import this one
    from app.domain.assembly.base import BoundedResult
    from app.domain.assembly.grouping import _Grouping
    from app.domain.assembly.views import ViewParams, _GroupView, _ItemsLoop, _LastViews
    from app.domain.compaction.forecast import PassForecast
    from app.domain.compaction.record import FoldedEntry, ProgressRecord
    from app.domain.compaction.user_text import _Parsed
    from app.domain.compaction.written import RecordSource
    from app.domain.invalidation import DependencyGraph, GraphBuilder, ItemState
    from app.domain.layout import LeafMessage
    from app.domain.manifest import EventRange, Item
    from app.domain.supersession import Choice
    from app.domain.types import Binding, Event, TurnGroup

@dataclass(eq=False)
class SessionMemo:
    """One typed field per artefact a plan reuses (module docstring). Each field's comment
    says what it holds; the function that sets it says what it is checked against."""

    # -- grouping and invalidation (app.domain.assembly.grouping) --
    #: the turn groups of the events seen so far, extended as events are appended
    turn_groups: _Grouping | None = None
    #: the dependency graph's builder (the events it has seen) and the graph it gave
    invalidation_graph: tuple[GraphBuilder, DependencyGraph] | None = None
    #: (graph, observation states, their bindings by seq, the events the builder had seen)
    observation_states: tuple[DependencyGraph, dict[int, ItemState], dict[int, tuple[Binding, ...]],
                              list[Event]] | None = None
    #: plan_invalidation's last choice per observation seq (the same object while equal)
    invalidation_choices: dict[int, Choice] = field(default_factory=dict)
    #: plan_invalidation's last judgement per observation seq: (state, node, key, editing)
    invalidation_judgements: dict[int, tuple[Any, ...]] = field(default_factory=dict)

    # -- group views (app.domain.assembly.views) --
    #: per view parameters, each turn group's view by the identity of its events and bindings
    group_views: dict[ViewParams, dict[tuple[Any, ...], _GroupView]] = field(default_factory=dict)
    #: per view parameters, the last call's views (an extending GET looks up only its newest groups)
    last_views: dict[ViewParams, _LastViews] = field(default_factory=dict)
    #: a tool output's bounded form by (meter, cap, handle, payload, known count)
    bounded_outputs: dict[tuple[Any, ...], BoundedResult] = field(default_factory=dict)
    #: (views, their counts, bounded results by handle, payload (bytes, lines) by handle)
    bounded_results: tuple[tuple[_GroupView, ...], tuple[tuple[int | None, ...], ...], dict[str, BoundedResult],
                           dict[str, tuple[int, int]]] | None = None

    # -- leaf rendering (app.domain.assembly.leaf) --
    #: the session's tool declarations and their canonical form (the same tuple while equal)
    canonical_tools: tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]] | None = None
    #: the last few elision notes: (dropped groups, note text, index payloads)
    elision_notes: list[tuple[tuple[TurnGroup, ...], str, dict[str, bytes]]] = field(default_factory=list)

    # -- manifest items (app.domain.assembly.items, .window) --
    #: the last few ranges of older events, by what names them
    event_ranges: list[tuple[tuple[Any, ...], tuple[EventRange, ...]]] = field(default_factory=list)
    #: where the items loop stood before its newest groups at the last GET
    items_loop: _ItemsLoop | None = None
    #: bookkeeping items (writes, folded ones) by key: (the source they were made of, item)
    bookkeeping_items: dict[tuple[Any, ...], tuple[object, Item]] = field(default_factory=dict)
    #: the last GET's message tokens: (leaf, counts, items in, items out, tokens by seq,
    #: {(seq, tokens): (item, item with tokens)})
    message_tokens: tuple[tuple[LeafMessage, ...], tuple[int | None, ...], list[Item], list[Item], dict[int | None, int],
                          dict[tuple[int, int], tuple[Item, Item]]] | None = None

    # -- the fold and eviction search (app.domain.assembly.passes) --
    #: the last leaf measured for growth and its characters
    leaf_chars: tuple[tuple[LeafMessage, ...], int] | None = None

    # -- compaction (app.domain.compaction) --
    #: the progress record and its text by (fold seq, budgets, contract, pinned seq)
    progress_records: dict[tuple[Any, ...], tuple[ProgressRecord, str]] = field(default_factory=dict)
    #: each folded turn group's record entry by its seqs and handles
    record_entries: dict[tuple[Any, ...], FoldedEntry] = field(default_factory=dict)
    #: each folded user message's sentences and flags by (seq, handle, per-message cap)
    user_texts: dict[tuple[Any, ...], _Parsed] = field(default_factory=dict)

    # -- the plan (app.domain.planner, app.domain.prefix_layout) --
    #: the last request's items, the sum of their elided tokens, whether all cut counts are known
    cut_items: tuple[tuple[Item, ...], int, bool] | None = None
    #: the last root's system text, tools and hash
    root_digest: tuple[str, tuple[dict[str, Any], ...], str] | None = None
    #: the last layout digest's leaf, its entries, its trunk and the trunk's hash
    layout_digest: tuple[tuple[LeafMessage, ...], tuple[Any, ...], str, str] | None = None

    # -- the wire layer's slot (app.wire) --
    #: the last body's leaf, its message dicts, the body's bytes and where the leaf's JSON lies in them
    wire_leaf: tuple[tuple[LeafMessage, ...], list[dict[str, Any]], bytes, int, int] | None = None

    # -- the service's (app.services.requests) --
    #: the pass forecast of the last plan (what the summarizer's scheduling reads)
    forecast: PassForecast | None = None
    #: the summarizer's outcome a pass used, by (cut seq, passes)
    record_sources: dict[tuple[int, int], RecordSource | None] = field(default_factory=dict)
    #: the profile the last GET planned with (what a warm-up after the next POST plans with)
    warm_profile: str | None = None
    #: exact token counts of tool outputs by (tokenizer id, handle)
    payload_tokens: dict[tuple[str, str], int] = field(default_factory=dict)
    #: the handle of a redacted output's view, by the output's handle
    view_handles: dict[str, str] = field(default_factory=dict)
    #: per tokenizer id, how far the events were scanned for counts: (events, counts, still unknown)
    payload_scans: dict[str, tuple[list[Event], dict[str, int], tuple[tuple[str, str], ...]]] = \
        field(default_factory=dict)
    #: GETs that looked a missing count up, by (tokenizer id, handle)
    count_lookups: dict[tuple[str, str], int] = field(default_factory=dict)

    #: bytes charged so far (:meth:`charge`)
    nbytes: int = 0

    def charge(self, nbytes: int) -> None:
        """Count ``nbytes`` more held (what a phase adds as it sets a field)."""
        self.nbytes += nbytes
