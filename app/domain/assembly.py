"""The walking-skeleton context policy ("window"): pin root and trunk, keep the newest
turn groups, evict the oldest complete turn groups when over budget.

Sources: seed 000 eq. 1 (budget) and section 4.4 (layout by change rate); seed 001
(pinning, elision breadcrumbs, ``bound_tool_output`` head + tail); seed 003
(``B_input = W - O - M``, assembly manifest).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import islice, pairwise
from operator import attrgetter
from typing import Any

from app.domain.budget import Budget, check_pinned, split_share
from app.domain.compaction.fold import Fold, check_pass, choose_record, fold_bounds, fold_record
from app.domain.compaction.forecast import GROWTH_WINDOW, PassForecast, forecast_pass, recent_growth
from app.domain.compaction.record import ProgressRecord, longest
from app.domain.cuts import ElidedSpan, elided_span, payload_size
from app.domain.errors import NewestGroupOverBudget
from app.domain.framing import frame, revision_attribute
from app.domain.invalidation import DependencyGraph, GraphBuilder, ItemState
from app.domain.layout import (
    Conversation,
    LeafMessage,
    LeafToolCall,
    arguments_problem,
    assistant_text,
    begins_with,
    canonical_tools,
    function_name,
    render_contract,
    tool_arguments,
)
from app.domain.manifest import (
    EventRange,
    InvalidationChoice,
    InvalidationReport,
    Item,
    NoticeRef,
    Representation,
    Transform,
    WriteRef,
)
from app.domain.notes import NOTE_CHARS, bounded_note, elided_note, note_items
from app.domain.ports import Measurement, TokenMeter
from app.domain.redaction import redaction_transform
from app.domain.scratchpad import Documents, current_documents, document_text, leaf_message
from app.domain.supersession import InvalidationOptions, InvalidationPlan, plan_invalidation
from app.domain.text import neutralise_control_text, neutralise_transform
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
    Session,
    StepEvent,
    ToolResultEvent,
    TurnGroup,
)

_SEQ = attrgetter("seq")
_HANDLE = attrgetter("handle")
SHORT_HANDLE = 12  # hex chars of a handle printed in breadcrumbs (48 bits; the API resolves prefixes)


@dataclass(frozen=True)
class BoundedResult:
    """A tool result as it enters the request: verbatim or head + marker + tail.

    ``payload_tokens``: the whole payload's tokens when known (counted once and stored,
    or counted here for a payload within the cap), else None; ``elided_tokens``: those
    left out by the cut, when known (0 for a verbatim result); ``span``: what the cut
    leaves out in bytes and lines (None when verbatim); ``payload_bytes`` (UTF-8) and
    ``payload_lines`` (split on "\n") of the whole payload; ``neutralised``: control
    strings broken in the payload before it was measured."""

    text: str
    payload_tokens: int | None
    elided_tokens: int | None
    span: ElidedSpan | None = None
    payload_bytes: int = 0
    payload_lines: int = 0
    neutralised: int = 0

    @property
    def representation(self) -> Representation:
        return Representation.HEAD_TAIL if self.span is not None else Representation.VERBATIM


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


def cached_turn_groups(events: Sequence[Event], cache: MutableMapping[Any, Any]) -> list[TurnGroup]:
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
    def of(cls, events: Sequence[Event], cache: MutableMapping[Any, Any]) -> _Grouping:
        """The grouping of ``events``: the one kept in ``cache`` when it has seen exactly
        ``events``; that one extended when ``events`` starts with exactly the events it has
        seen (the same objects, or equal ones) and goes on in increasing seq order; else
        built afresh. The result is kept in ``cache``."""
        kept: _Grouping | None = cache.get("turn groups")
        if kept is not None and len(events) >= len(kept.seen) and events[:len(kept.seen)] == kept.seen:
            new = events[len(kept.seen):]
            if not new:
                return kept
            seqs = [kept.last_seq, *(e.seq for e in new)]
            if all(a < b for a, b in pairwise(seqs)):
                grown = kept.copy()
                grown.extend(new)
                cache["turn groups"] = grown
                return grown
        fresh = cls()
        fresh.extend(sorted(events, key=_SEQ))
        cache["turn groups"] = fresh
        return fresh


def cached_graph(events: Sequence[Event], cache: MutableMapping[Any, Any]) -> DependencyGraph:
    """:func:`app.domain.invalidation.build_graph` of ``events``, kept in ``cache`` (the
    session's memo, an explicit value) as the builder that has seen them and the graph it
    gave: the same graph when ``events`` are exactly the events seen; a copy of the builder
    extended with the new ones when ``events`` starts with them and goes on in increasing
    seq order (a GET adds only its new events, O(new events) but for copying the builder's
    mappings); else built afresh. Equal to ``build_graph(events)`` in every case."""
    kept: tuple[GraphBuilder, DependencyGraph] | None = cache.get("invalidation graph")
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
                cache["invalidation graph"] = (grown, graph)
                return graph
    fresh = GraphBuilder()
    fresh.extend(sorted(events, key=_SEQ))
    graph = fresh.graph()
    cache["invalidation graph"] = (fresh, graph)
    return graph


def cached_states(graph: DependencyGraph, cache: MutableMapping[Any, Any]
                  ) -> tuple[dict[int, ItemState], dict[int, tuple[Binding, ...]]]:
    """``graph.observation_states()`` and each observation's bindings (by seq), for
    ``graph`` as :func:`cached_graph` gave it from ``cache``: kept there with the graph
    they belong to, and carried over from the previous GET's graph when this one extends
    it (:meth:`GraphBuilder.states_after`: only what the new events can change is judged
    again, and an unchanged state is the same object from GET to GET). Equal to a fresh
    computation in every case."""
    kept = cache.get("observation states")
    if kept is not None and kept[0] is graph:
        return kept[1], kept[2]
    builder = cache.get("invalidation graph", (None, None))
    if kept is not None and builder[1] is graph and builder[0].seen[:len(kept[3])] == kept[3]:
        states = builder[0].states_after(graph, kept[0], kept[1])
        bindings = dict(kept[2])
        for seq in list(graph.observations)[len(kept[0].observations):]:
            bindings[seq] = graph.observations[seq].bindings
    else:
        states = graph.observation_states()
        bindings = {seq: node.bindings for seq, node in graph.observations.items()}
    if builder[1] is graph:  # the events it saw: the next graph extends this one only if it starts with them
        cache["observation states"] = (graph, states, bindings, builder[0].seen)
    return states, bindings


def head_tail_cut(meter: TokenMeter, text: str, cap_tokens: int) -> tuple[str, str, ElidedSpan] | None:
    """``text``'s head and tail (half of ``cap_tokens`` each, an exact prefix and suffix cut
    between characters, tokenizing only windows at the ends: ``meter.cut_ends``) and the
    span they leave out; None when the text is within the cap. The one cut of tool outputs,
    documents and user messages."""
    cut = meter.cut_ends(text, cap_tokens // 2, cap_tokens - cap_tokens // 2)
    if cut is None:
        return None
    head, tail = cut
    return head, tail, elided_span(text, head, tail)


def bound_tool_output(meter: TokenMeter, result: ToolResultEvent, cap_tokens: int, *,
                      payload_tokens: int | None = None) -> BoundedResult:
    """Seed 001 ``bound_tool_output``: the text unchanged if within ``cap_tokens``, else
    a head and a tail (half the cap each) joined by a marker naming the handle and the
    elided size in lines and bytes. The marker's own tokens are not charged to the cap.

    The payload's control strings (``meter.control_strings``) are neutralised first, so
    the cap bounds the text that is rendered (a control string grows from one token to
    several once broken); head and tail are an exact prefix and suffix of that text,
    cut between characters. The cut tokenizes only a window at each end
    (``meter.cut_ends``), and the marker says only what is cheap and deterministic (bytes
    and "\n"-lines of the elided span of the text as rendered whole, the line range to
    read back by handle), so a 2 MB output costs no more than a small one and the body
    never depends on whether a token count is known yet. ``payload_tokens``: the
    payload's exact count when known (stored after its POST); the elided tokens are then
    that less the head's and the tail's (reported in the manifest only)."""
    payload, neutralised = neutralise_control_text(result.payload, meter.control_strings)
    size, lines = payload_size(result.payload)
    known = payload_tokens if payload_tokens is not None and not neutralised else None  # the count of ``payload``
    # a known count within the cap says the cut would keep it whole: it is not tokenized again
    cut = None if known is not None and known <= cap_tokens else head_tail_cut(meter, payload, cap_tokens)
    if cut is None:  # within the cap: its count costs no more than the cap
        tokens = known if known is not None else meter.count_text(payload)
        return BoundedResult(payload, tokens, 0, None, size, lines, neutralised)
    head, tail, span = cut
    elided = None
    if payload_tokens is not None:
        elided = max(0, payload_tokens - meter.count_text(head) - meter.count_text(tail))
    marker = (
        f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) elided by ctxd; the whole output is handle "
        f"{result.handle}: GET /v1/handles/{result.handle}?lines={span.first_line}:{span.last_line} ...]\n"
    )
    return BoundedResult(head + marker + tail, payload_tokens, elided, span, size, lines, neutralised)


def bound_documents(documents: Sequence[DocumentEvent], meter: TokenMeter,
                    cap_tokens: int) -> tuple[tuple[DocumentEvent, ...], dict[int, ElidedSpan]]:
    """The current retrieved documents as the leaf shows them (issue 16 item 3): a text
    within ``cap_tokens`` (the per-item cap of tool outputs) unchanged; a longer one cut to
    a head and a tail (half the cap each) around a marker naming the document's handle and
    the elided lines and bytes, like :func:`bound_tool_output`. Returns the documents and
    the elided span by seq of those cut. Before: a 37,559-token document was pinned whole,
    and every GET of its session was a 422 until the agent replaced it."""
    shown: list[DocumentEvent] = []
    spans: dict[int, ElidedSpan] = {}
    for doc in documents:
        cut = head_tail_cut(meter, doc.text, cap_tokens)
        if cut is None:
            shown.append(doc)
            continue
        head, tail, span = cut
        spans[doc.seq] = span
        marker = (f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) elided by ctxd; the whole document is handle "
                  f"{doc.handle}: GET /v1/handles/{doc.handle}?lines={span.first_line}:{span.last_line} ...]\n")
        shown.append(replace(doc, text=head + marker + tail))
    return tuple(shown), spans


def bound_user_message(meter: TokenMeter, message: MessageEvent,
                       cap_tokens: int) -> tuple[MessageEvent, ElidedSpan | None]:
    """A user message as the leaf shows it: unchanged within ``cap_tokens`` (the
    observations role's share of input_limit; input_limit without shares), else a head and a tail (half the cap each)
    around a marker naming the message's handle and the elided lines and bytes, like
    :func:`bound_tool_output`. Returns the message and the elided span (None: not cut).
    A text of at most ``cap_tokens`` characters is not tokenized.

    Before: the newest user message is pinned, so one of ~30,300 tokens (over qwen3's
    input_limit of 28,160) made every GET of its session a 422 until another user message
    came (the peer fault of gi-dellav/zerostack#132: an oversized message stayed in the
    history and was refused on every following turn)."""
    if message.role != "user" or len(message.content) <= cap_tokens:
        return message, None
    cut = head_tail_cut(meter, message.content, cap_tokens)
    if cut is None:
        return message, None
    head, tail, span = cut
    # no line range here: the message's handle holds its JSON event (one line), so ``?lines=``
    # cannot reach the elided lines; the recall tool's query searches the text
    marker = (f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) of this message elided by ctxd; the whole message "
              f"is handle {message.handle}: GET /v1/handles/{message.handle} returns it as JSON (its text is the "
              "content field); search a phrase of it to find the elided lines ...]\n")
    return replace(message, content=head + marker + tail), span


def capped_tokens(meter: TokenMeter, text: str, cap_tokens: int) -> int:
    """``min(tokens of text, cap_tokens)``, tokenizing at most windows at the ends of a long
    text (``meter.cut_ends``, memoized): a 2 MB output is not tokenized whole to learn that
    it exceeds the cap."""
    if meter.cut_ends(text, cap_tokens // 2, cap_tokens - cap_tokens // 2) is not None:
        return cap_tokens
    return meter.count_text(text)


def _cut_is_shorter(meter: TokenMeter, payload: str, cut_text: str) -> bool:
    """Whether a head + marker + tail has fewer tokens than the payload it stands for, without
    tokenizing a long payload: a token is at least one byte, and a payload of more than 8
    bytes a token of the cut is taken as longer (an estimate only for runs of very long
    tokens, where keeping the cut is still within the cap)."""
    cut_tokens = meter.count_text(cut_text)
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size <= cut_tokens:
        return False
    return size > 8 * cut_tokens or meter.count_text(payload) > cut_tokens


def bound_group(meter: TokenMeter, group: TurnGroup, share_tokens: int, item_cap_tokens: int, *,
                payload_tokens: Mapping[str, int] | None = None) -> dict[str, BoundedResult]:
    """The results of ``group`` bounded as a whole: ``share_tokens`` split max-min fair
    (:func:`app.domain.budget.split_share`) over their sizes ``s_i = min(tokens_i,
    item_cap_tokens)``, each result cut to head + tail at its cap (:func:`bound_tool_output`).

    A result whose cut text (marker included) would not be shorter than the result itself
    stays verbatim. Results with equal payloads (one handle) take the smaller of their caps.
    ``payload_tokens``: the outputs' known token counts (manifest figures only).
    Returns ``{handle: BoundedResult}`` for the group's results.
    """
    sizes = [capped_tokens(meter, r.payload, item_cap_tokens) for r in group.results]
    cap_of: dict[str, int] = {}
    for result, cap in zip(group.results, split_share(sizes, share_tokens)):
        cap_of[result.handle] = min(cap, cap_of.get(result.handle, cap))
    out: dict[str, BoundedResult] = {}
    for result in group.results:
        if result.handle not in out:
            b = bound_tool_output(meter, result, cap_of[result.handle],
                                  payload_tokens=(payload_tokens or {}).get(result.handle))
            if b.span is not None and not _cut_is_shorter(meter, result.payload, b.text):
                payload, neutralised = neutralise_control_text(result.payload, meter.control_strings)
                b = BoundedResult(payload, meter.count_text(payload), 0, None, b.payload_bytes, b.payload_lines,
                                  neutralised)
            out[result.handle] = b
    return out


FIT_ROUNDS = 8  # measured shrink steps before the newest group's results fall back to their markers


@dataclass(frozen=True)
class FittedGroup:
    """The newest turn group bounded so the request fits: its results' bounded texts,
    the tokens they share (``share_tokens``) and the request that fits."""

    bounded: dict[str, BoundedResult]
    share_tokens: int
    conversation: Conversation
    measurement: Measurement


def fit_newest_group(group: TurnGroup, *, budget: Budget, meter: TokenMeter, item_cap_tokens: int,
                     excess_tokens: int,
                     measure_with: Callable[[Mapping[str, BoundedResult]], tuple[Conversation, Measurement]],
                     payload_tokens: Mapping[str, int] | None = None) -> FittedGroup:
    """Bound the newest turn group as a whole so the request fits ``input_limit`` with it
    present (eq. 1); it is never evicted silently.

    ``excess_tokens``: how far the request with only this group in the leaf (its results
    each under ``item_cap_tokens``) exceeds ``input_limit``. ``measure_with(bounded)``
    renders and measures the request with the group's results as ``bounded``.
    ``payload_tokens``: the outputs' known token counts (manifest figures only).

    Equation: the results share ``S`` tokens, ``c = split_share(s, S)`` with
    ``s_i = min(tokens_i, item_cap_tokens)``. ``S_0 = min(B_obs, sum(s) - excess_tokens)``
    (``B_obs`` = the observations share of ``input_limit``, or all of it when the profile
    sets no share); while the measured request ``T(S)`` exceeds ``input_limit``,
    ``S <- max(0, S - (T(S) - input_limit))`` (at most ``FIT_ROUNDS`` rounds, then
    ``S = 0``: each result is its marker alone, or its text when that is shorter).

    Invariant: the result's ``measurement.total <= budget.input_limit`` with every message
    and result of ``group`` in the leaf, or :class:`NewestGroupOverBudget` is raised.

    Raises:
        NewestGroupOverBudget: even ``T(0) > input_limit``; names the group (seq, seqs,
        event ids) and ``over_by = T(0) - input_limit`` tokens.
    """
    limit = budget.input_limit
    observations = budget.role_limits()["observations"] if budget.shares.get("observations") else limit
    sizes = sum(capped_tokens(meter, r.payload, item_cap_tokens) for r in group.results)
    share = max(0, min(observations, sizes - excess_tokens))
    for rounds in range(FIT_ROUNDS + 1):
        bounded = bound_group(meter, group, share, item_cap_tokens, payload_tokens=payload_tokens)
        conversation, measurement = measure_with(bounded)
        if measurement.total <= limit:
            return FittedGroup(bounded, share, conversation, measurement)
        if share == 0:
            break
        share = 0 if rounds == FIT_ROUNDS - 1 else max(0, share - (measurement.total - limit))
    events: tuple[MessageEvent | ToolResultEvent, ...] = (group.message, *group.results)
    over_by = measurement.total - limit
    raise NewestGroupOverBudget(
        f"the newest turn group (seq {group.first_seq}, events {', '.join(e.event_id for e in events)}) does not fit "
        f"input_limit {limit} = W - O - M even with every older group evicted and each tool result cut to its "
        f"marker: the request needs {measurement.total} tokens, {over_by} over; shorten the group's message "
        "or the pinned content (system, tools, task contract, next step)",
        seq=group.first_seq, seqs=list(group.seqs), event_ids=[e.event_id for e in events],
        over_by=over_by, input_limit=limit, total=measurement.total,
    )


def observation_text(result: ToolResultEvent, body: str) -> str:
    """A tool message's content: run facts the agent needs (exit code, a result posted as an
    error, exception), then the output. The payload itself is never re-encoded (seed 000
    section 4.4.2). ``is_error: true`` (a result posted with Anthropic's ``is_error``) is a
    line of every format's content, so a failure shows in the openai body and the tokens
    prompt too (the anthropic body also keeps the block's ``is_error``)."""
    header = []
    if result.exit_code is not None:
        header.append(f"exit_code: {result.exit_code}")
    if result.conditions and result.conditions.get("is_error") is True:
        header.append("is_error: true")
    exception = result.conditions.get("exception_info") if result.conditions else None
    if exception:
        header.append(f"exception: {exception}")
    return ("\n".join(header) + "\n" + body) if header else body


def call_warnings(session: Session, groups: Sequence[TurnGroup]) -> list[str]:
    """Layout warnings for tool calls the request shows that the model could not have made
    validly: a tool the session does not declare, a name outside ``^[a-zA-Z0-9_-]{1,64}$``
    (sent as :func:`~app.domain.layout.function_name` rewrites it), or arguments that are
    not a JSON object (sent wrapped, :func:`~app.domain.layout.tool_arguments`). The event
    log keeps what the agent reported."""
    declared = declared_tools(session)
    return [line for group in groups for line in group_call_warnings(group, declared)]


def declared_tools(session: Session) -> frozenset[str]:
    """The function names the session declares."""
    return frozenset(str(t.get("function", t).get("name")) for t in session.tools)


def group_call_warnings(group: TurnGroup, declared: frozenset[str]) -> list[str]:
    """:func:`call_warnings` for one turn group, given the declared tool names."""
    out = []
    for call in group.message.tool_calls:
        if declared and call.name not in declared:
            out.append(f"seq {group.message.seq}: call {call.call_id} names undeclared tool {call.name!r}")
        if function_name(call.name) != call.name:
            out.append(f"seq {group.message.seq}: call {call.call_id} name {call.name!r} is not a valid function "
                       f"name; sent as {function_name(call.name)!r}")
        problem = arguments_problem(call.arguments)
        if problem:
            out.append(f"seq {group.message.seq}: call {call.call_id} arguments are not a JSON object ({problem}); "
                       'sent wrapped as {"arguments": <the text>}')
    return out


#: Names of the provider-rule transforms (README "Provider rules", rules L1-L3).
TRIM_TRAILING_WHITESPACE = "trim_trailing_whitespace"  # L3
FUNCTION_NAME = "function_name"  # L2
ARGUMENTS_OBJECT = "arguments_object"  # L1


def leaf_transforms(group: TurnGroup) -> list[Transform]:
    """What the leaf-level rules (README "Provider rules") changed in the group's message as
    the request carries it (its text, and the calls sent: those with a result), for the
    manifest item's ``transforms``: ``trim_trailing_whitespace`` (L3), ``function_name``
    (L2) and ``arguments_object`` (L1, per call), each with a note saying what was sent."""
    message = group.message
    resolved = {r.call_id for r in group.results}
    out = []
    if message.role == "assistant" and assistant_text(message.content) != message.content:
        out.append(Transform(TRIM_TRAILING_WHITESPACE, "trailing whitespace of the text trimmed"))
    for call in (c for c in message.tool_calls if c.call_id in resolved):
        if function_name(call.name) != call.name:
            out.append(Transform(FUNCTION_NAME, f"call {call.call_id}: name sent as {function_name(call.name)!r}"))
        if tool_arguments(call.arguments) != call.arguments:
            out.append(Transform(ARGUMENTS_OBJECT, f"call {call.call_id}: arguments sent as "
                                 + ("{}" if not arguments_problem(call.arguments) else '{"arguments": <the text>}')))
    return out


def _call_preview(arguments: str, limit: int = 80) -> str:
    flat = " ".join(arguments.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


NOTE_MAX_GROUPS = 32  # turn groups the elision note lists one by one; older ones go to an index payload


#: A payload's (UTF-8 bytes, "\n"-lines) by handle: what breadcrumbs say of a tool output's
#: size (cheap and deterministic; token counts may not be known yet, see bound_tool_output).
Sizes = Mapping[str, tuple[int, int]]


def _group_line(group: TurnGroup, sizes: Sizes) -> str:
    message = group.message
    calls = {r.call_id: r for r in group.results}
    parts = [f"- seq {message.seq} {message.role} turn {message.handle[:SHORT_HANDLE]}"]
    for call in message.tool_calls:
        result = calls.get(call.call_id)
        if result is None:
            continue
        exit_part = f", exit {result.exit_code}" if result.exit_code is not None else ""
        parts.append(
            f": {call.name} {_call_preview(call.arguments)} -> result "
            f"{result.handle[:SHORT_HANDLE]} ({sizes.get(result.handle, (0, 0))[0]:,} bytes{exit_part})"
        )
    return "".join(parts)


def elision_index(groups: Sequence[TurnGroup], sizes: Sizes) -> bytes:
    """The index payload of older dropped groups: canonical JSON, one entry per group with
    its turn handle and each call's result handle, size in bytes and lines."""
    entries = []
    for group in groups:
        results = {r.call_id: r for r in group.results}
        entries.append({
            "seq": group.message.seq, "role": group.message.role, "turn": group.message.handle,
            "calls": [{"call_id": c.call_id, "name": c.name, "arguments": c.arguments,
                       "result": results[c.call_id].handle,
                       "bytes": sizes.get(results[c.call_id].handle, (0, 0))[0],
                       "lines": sizes.get(results[c.call_id].handle, (0, 0))[1],
                       "exit_code": results[c.call_id].exit_code}
                      for c in group.message.tool_calls if c.call_id in results],
        })
    return json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def elision_note(dropped: Sequence[TurnGroup], sizes: Sizes, *,
                 max_groups: int = NOTE_MAX_GROUPS) -> tuple[str, dict[str, bytes]]:
    """One breadcrumb naming every dropped turn group's handles (seed 001).

    The newest ``max_groups`` dropped groups are listed line by line; older ones are named
    through one index payload (content-addressed, so its handle is its sha256) listing
    their handles, which keeps the note, and so the pinned trunk, bounded. Returns the
    note and the index payloads to store ({handle: bytes})."""
    if not dropped:
        return "", {}
    first, last = dropped[0].first_seq, max(max(g.seqs) for g in dropped)
    total = sum(sizes.get(r.handle, (0, 0))[0] for g in dropped for r in g.results)
    lines = [
        "## Elided history",
        (f"{len(dropped)} earlier turn groups (events seq {first}-{last}, tool output {total:,} bytes) "
        "were removed from this request to fit the token budget. Nothing is lost: read any of them "
        "back by handle (GET /v1/handles/<handle>, prefixes accepted)."),
    ]
    derived: dict[str, bytes] = {}
    older, recent = dropped[: max(0, len(dropped) - max_groups)], dropped[max(0, len(dropped) - max_groups):]
    if older:
        index = elision_index(older, sizes)
        handle = hashlib.sha256(index).hexdigest()
        derived[handle] = index
        older_last = max(max(g.seqs) for g in older)
        lines.append(f"- seq {older[0].first_seq}-{older_last}: {len(older)} older turn groups; their turn and "
                     f"result handles are listed in index {handle[:SHORT_HANDLE]} (JSON)")
    lines.extend(_group_line(group, sizes) for group in recent)
    plan = next((g.message for g in reversed(dropped) if g.message.kind == "plan"), None)
    if plan is not None:  # the scratchpad survives eviction (seed 001): its latest evicted version
        lines += ["", (f"Plan as of seq {plan.seq}, the latest version among the evicted turns (a later version "
                       "below, if any, replaces it):"), plan.content]
    return "\n".join(lines), derived


def unsent_reason(group: TurnGroup) -> str | None:
    """Why the group's message is sent in no wire format, or None when it is sent.

    A message is sent when it has non-blank text or a tool call with a result. An empty
    message has nothing to send (Qwen3 and Mistral renders would show an empty turn, the
    Anthropic API rejects it); a whitespace-only text is skipped by the Anthropic serializer
    (blank text blocks are rejected), so ctxd drops it from every format alike and the
    counts stay those of the bodies sent. Calls all awaiting their results are not a reason
    given here: that message is ``pending`` and enters with the first result.
    """
    message = group.message
    if message.content.strip() or group.results:
        return None
    if message.tool_calls:
        return None  # every call awaits its result: the manifest says "pending"
    if message.content:
        return "whitespace-only text and no tool call: blank text is rejected by the Anthropic API, so no format sends it"
    return "empty message (no text, no tool call): no format sends it"


def _leaf_messages(group: TurnGroup, bounded: Mapping[str, BoundedResult], render_reasoning: bool,
                   control: Sequence[str], bindings: Mapping[int, tuple[Binding, ...]] | None = None) -> list[LeafMessage]:
    """The group's leaf messages; every text in them (content, reasoning, tool-call names
    and arguments, tool output with its header) has its control strings neutralised. Each
    tool output is framed as untrusted data with its source and the revisions it read
    (``bindings`` by result seq; :mod:`app.domain.framing`)."""
    message = group.message
    resolved = {r.call_id for r in group.results}
    broken = 0

    def clean(text: str) -> str:
        nonlocal broken
        text, n = neutralise_control_text(text, control)
        broken += n
        return text

    names = {c.call_id: function_name(clean(c.name)) for c in message.tool_calls if c.call_id in resolved}
    calls = tuple(
        LeafToolCall(c.call_id, names[c.call_id], clean(tool_arguments(c.arguments)))
        for c in message.tool_calls if c.call_id in resolved
    )
    content = assistant_text(message.content) if message.role == "assistant" else message.content
    out: list[LeafMessage] = []
    if calls or content.strip():
        content = clean(content)
        reasoning = clean(message.reasoning) if render_reasoning and message.reasoning else None
        out.append(LeafMessage(role=message.role, content=content, tool_calls=calls, reasoning=reasoning,
                               seq=message.seq, neutralised=broken, thinking=message.thinking))
    for result in group.results:
        broken = bounded[result.handle].neutralised  # the header (exception text) is checked here
        framed, _ = frame(observation_text(result, bounded[result.handle].text), tool=names[result.call_id],
                          call_id=result.call_id, bindings=(bindings or {}).get(result.seq, ()))
        content = clean(framed)
        out.append(LeafMessage(role="tool", content=content, call_id=result.call_id, name=names[result.call_id],
                               seq=result.seq, neutralised=broken,
                               is_error=(result.conditions or {}).get("is_error") is True))
    return out


NOTES_KEPT = 8  # elision notes kept in a leaf cache (the cuts one GET's search tries, and the last one)


def _canonical_tools(tools: tuple[dict[str, Any], ...], cache: MutableMapping[Any, Any] | None
                     ) -> tuple[dict[str, Any], ...]:
    """:func:`~app.domain.layout.canonical_tools` of the session's declarations, kept in
    ``cache`` while they are equal (the same tuple from GET to GET: the root's prefix
    digest then compares by identity)."""
    held = cache.get(_TOOLS) if cache is not None else None
    if held is not None and (held[0] is tools or held[0] == tools):
        return held[1]  # type: ignore[no-any-return]
    canonical = canonical_tools(tools)
    if cache is not None:
        cache[_TOOLS] = (tools, canonical)
    return canonical


#: key of the session leaf cache's entry of :func:`_canonical_tools`
_TOOLS = "canonical tools"


def _conversation(session: Session, leaf_groups: Sequence[tuple[LeafMessage, ...]], dropped: Sequence[TurnGroup],
                  step: StepEvent | None, sizes: Sizes, control: Sequence[str] = (),
                  cache: MutableMapping[Any, Any] | None = None, *,
                  record_trunk: tuple[str, Mapping[str, bytes]] | None = None,
                  documents: Sequence[DocumentEvent] = ()) -> tuple[Conversation, dict[str, bytes]]:
    """The conversation with ``dropped`` elided, and the index payloads its note names.
    The note's argument previews and the step text have their ``control`` strings
    neutralised; the contract is verbatim (session create refuses one that spells any).
    ``cache``: the session's leaf cache, where the last few notes are kept with the
    dropped groups they name (the same objects from GET to GET while the cut stays).
    ``record_trunk``: the trunk text (contract + progress record) and its index payloads
    when a progress record replaces the elision note (select); the record's text has its
    control strings neutralised, and the note cache is not used. ``documents``: the current
    retrieved documents, placed next to the instruction: after the kept turns, before the
    next step (issue 16; seed 004 section 3.1.2), one user message each."""
    contract = render_contract(session.contract)
    if record_trunk is not None:
        text = record_trunk[0]
        if text.startswith(contract):
            trunk = contract + neutralise_control_text(text[len(contract):], control)[0]
        else:
            trunk = neutralise_control_text(text, control)[0]
        derived = dict(record_trunk[1])
    else:
        trunk = contract
        notes: list[tuple[tuple[TurnGroup, ...], str, dict[str, bytes]]] = \
            cache.setdefault("elision notes", []) if cache is not None else []
        groups = tuple(dropped)
        found = next((entry for entry in notes if len(entry[0]) == len(groups) and entry[0] == groups), None)
        if found is None:
            note, derived = elision_note(dropped, sizes)
            found = (groups, neutralise_control_text(note, control)[0] if note else "", derived)
            if cache is not None:
                cache["elision notes"] = [found, *notes[:NOTES_KEPT - 1]]
        note, derived = found[1], dict(found[2])
        if note:
            trunk = trunk + "\n\n" + note
    leaf: list[LeafMessage] = []
    for messages in leaf_groups:
        leaf.extend(messages)
    for document in documents:
        text, broken = neutralise_control_text(document_text(document), control)
        leaf.append(LeafMessage(role="user", content=text, seq=document.seq, neutralised=broken))
    if step is not None:
        text, broken = neutralise_control_text(bounded_note(step.text, step.seq, "step"), control)
        leaf.append(LeafMessage(role="user", content=f"Next step: {text}", seq=step.seq, neutralised=broken))
    conversation = Conversation(system=session.system, tools=_canonical_tools(session.tools, cache), trunk=trunk,
                                leaf=tuple(leaf))
    return conversation, derived


def plan_roles(measurement: Measurement, conversation: Conversation, plan_seqs: frozenset[int],
               meter: TokenMeter) -> Measurement:
    """``measurement`` with the text tokens of the plan versions in the leaf counted under
    ``task_state`` instead of ``observations`` (issue 16 item 1: the plan is task state
    wherever it sits; its chat framing stays with the leaf's observations). Totals and
    zones unchanged; itself when the leaf holds no plan."""
    if not plan_seqs:
        return measurement
    moved = sum(meter.count_text(m.content) for m in conversation.leaf if m.seq in plan_seqs and m.role == "user")
    if not moved:
        return measurement
    roles = dict(measurement.by_role)
    moved = min(moved, roles.get("observations", 0))
    roles["observations"] = roles.get("observations", 0) - moved
    roles["task_state"] = roles.get("task_state", 0) + moved
    return replace(measurement, by_role=roles)


def folded_why(seq: int, previous_cut_seq: int, cut_seq: int) -> str:
    """Which pass folded event ``seq`` into the progress record (the manifest's ``why``)."""
    if seq >= previous_cut_seq:
        return f"folded into the progress record by this request's pass (fold point seq {cut_seq})"
    return f"folded into the progress record by an earlier pass (fold point seq {previous_cut_seq} or before)"


def _invalidation_fields(seq: int, plan: InvalidationPlan, meter: TokenMeter | None, shown: str,
                         summary: dict[str, int] | None) -> dict[str, Any]:
    """The :class:`Item` fields of a tool result's state (issue 11): ``state`` (current,
    historical, possibly_stale, unknown), for a historical one ``superseded_by`` (the
    writes, ``path@rN``) and ``write`` (the first), ``fetched_at`` / ``expires_at`` for a
    binding with a TTL and, when it is in the request (``meter`` given; ``shown`` its
    text before the plan), ``invalidation``: the choice (tombstone, notice, deferred), its
    tokens and its cache effect, with ``representation`` and ``why`` for it. ``summary``
    accumulates the request's counts (:class:`InvalidationReport` fields)."""
    state = plan.states.get(seq)
    if state is None:
        return {}
    out: dict[str, Any] = {"state": state.state}
    if state.superseded:
        out["superseded_by"] = tuple(state.writes)
        first = min(state.superseded, key=lambda x: x.change.seq).change
        out["write"] = WriteRef(artifact=first.artifact, revision=first.revision, seq=first.seq,
                                event_id=first.event_id, cause=first.cause)
    if state.fetched_at is not None:
        out["fetched_at"] = float(state.fetched_at)
        out["expires_at"] = None if state.expires_at is None else float(state.expires_at)
    choice = plan.choices.get(seq)
    if choice is None or meter is None or summary is None:
        return out
    old_tokens = meter.count_text(shown)
    summary["historical"] += state.state == "historical"
    if choice.choice == "tombstone":
        tokens = meter.count_text(choice.text or "")
        summary["tombstones"] += 1
        summary["tombstone_tokens"] += tokens
        summary["replaced_tokens"] += old_tokens
        out["representation"] = Representation.TOMBSTONE
        out["why"] = "historical: a superseded read of an artifact the agent is editing, replaced in place"
        out["invalidation"] = InvalidationChoice(
            choice="tombstone", tokens=tokens, replaced_tokens=old_tokens,
            cache="in place: the request diverges from the previous one at this message on the call that first "
                  "shows the tombstone; later calls reuse it")
    else:
        summary["noticed"] += 1
        summary["stale_tokens_kept"] += old_tokens
        out["why"] = ("historical: inert history, kept with a notice naming the write" if choice.choice == "notice"
                      else "historical: tombstone deferred to the next trunk rewrite (a pass is due); a notice "
                           "names the write meanwhile") if state.state == "historical" \
            else "possibly stale: its TTL has passed; a notice gives its fetch time"
        out["invalidation"] = InvalidationChoice(
            choice=choice.choice, stale_tokens_kept=old_tokens,
            cache="appended: earlier tokens unchanged (the prefix is kept); the stale text stays in the request")
    return out


def apply_invalidation(group: TurnGroup, messages: Sequence[LeafMessage], plan: InvalidationPlan,
                       notices: Sequence[str], control: Sequence[str],
                       memo: dict[Any, Any] | None = None) -> tuple[LeafMessage, ...]:
    """The group's leaf messages with the plan applied (seed 000 table 9): a tombstoned
    result's content replaced in place by its tombstone, and ``notices`` (those anchored
    after this group) appended: to the group's last tool message when it ends with one,
    else as a user message after it. ctxd's texts have their control strings neutralised
    (artifact names come from clients). ``memo`` (the group view's): a message replaced by
    the same text as at the last GET is the same object (with what the renderer, the meter
    and the wire format derived from it, ``LeafMessage.memo``)."""
    out = []
    for m in messages:
        choice = plan.choices.get(m.seq) if m.role == "tool" and m.seq is not None else None
        if choice is not None and choice.text is not None:
            m = _replaced(m, "tombstone", choice.text, control, memo)
        out.append(m)
    if notices:
        text = "\n".join(notices)
        if out and out[-1].role == "tool":
            out[-1] = _replaced(out[-1], "notice", text, control, memo)
        else:
            held = memo.get(("notice message",)) if memo is not None else None
            if held is None or held[0] != text:
                held = (text, LeafMessage(role="user", content=neutralise_control_text(text, control)[0]))
                if memo is not None:
                    memo[("notice message",)] = held
            out.append(held[1])
    return tuple(out)


def _replaced(message: LeafMessage, how: str, text: str, control: Sequence[str],
              memo: dict[Any, Any] | None) -> LeafMessage:
    """``message`` with its content replaced by ``text`` (``how`` "tombstone") or with ``text``
    appended as a notice (``how`` "notice"), control strings neutralised; the same object as
    at the last call with this message and text (``memo``, one entry per message and kind)."""
    key = (how, id(message))
    held = memo.get(key) if memo is not None else None
    if held is not None and held[0] is message and held[1] == text:
        return held[2]  # type: ignore[no-any-return]
    safe = neutralise_control_text(text, control)[0]
    out = replace(message, content=safe if how == "tombstone" else message.content + "\n\n" + safe)
    if memo is not None:
        memo[key] = (message, text, out)
    return out


def _side_items(documents: Documents, side_events: Sequence[Event], conversation: Conversation, *, boundary: int,
                folded: frozenset[int], why_folded: Callable[[int], str],
                document_spans: Mapping[int, ElidedSpan] | None = None) -> list[Item]:
    """Manifest items of the retrieved documents and a child's conclusions (issue 16): a
    current document is verbatim in the leaf next to the instruction (any seq); a replaced
    one (and a conclusion) from ``boundary`` on is folded when the record lists its seq
    (``folded``), else superseded (a conclusion: not rendered here), each naming its handle."""
    neutralised = {m.seq: m.neutralised for m in conversation.leaf if m.seq is not None and m.neutralised}
    out = []
    for doc in documents.current:
        broken = neutralised.get(doc.seq, 0)
        span = (document_spans or {}).get(doc.seq)
        why = f"current retrieved document [{doc.key}]: next to the instruction, at the end of the leaf"
        out.append(Item(seq=doc.seq, event_id=doc.event_id, kind="document", handle=doc.handle, zone="leaf",
                        representation=Representation.HEAD_TAIL if span else Representation.VERBATIM,
                        tokens_known=False if span else None,  # a cut's elided tokens are not counted
                        why=why + (" (over the per-item cap: head + tail)" if span else ""),
                        transforms=(neutralise_transform(broken),) if broken else (),
                        elided_bytes=span.bytes if span else None,
                        elided_lines=(span.first_line, span.last_line) if span else None))
    for event in side_events:
        if event.seq < boundary:
            continue
        if isinstance(event, ConclusionEvent):
            why = f"returned to the parent session as its event seq {event.parent_seq}"
            rep = Representation.NOT_RENDERED
        else:
            assert isinstance(event, DocumentEvent)
            later = documents.replaced_by(event)
            why = f"a later document with key {event.key!r} (seq {later.seq if later else '-'}) replaced it"
            rep = Representation.SUPERSEDED
        if event.seq in folded:
            why, rep = f"{why}; {why_folded(event.seq)}", Representation.FOLDED
        out.append(Item(seq=event.seq, event_id=event.event_id, kind=event.kind, handle=event.handle,
                        zone="trunk" if rep is Representation.FOLDED else None, representation=rep, why=why))
    return out


KEPT = "kept"  # _group_items: the group is in the request
EVICTED = "evicted"  # _group_items: the group is named in the elision note


_LEAF_WHY = {  # issue 16: events that enter the leaf as a user message of their own
    "plan": "plan version, appended to the leaf at its seq (counted under task_state; a pass folds the latest "
            "folded version into the progress record)",
    "child_conclusion": "a child session's conclusion, one observation at its seq (the child's own events never "
                        "enter this session's requests)",
}


def _group_items(group: TurnGroup, bounded: Mapping[str, BoundedResult], messages: Sequence[LeafMessage],
                 placement: str, bindings: Mapping[int, tuple[Binding, ...]],
                 fitted: FittedGroup | None = None, message_span: ElidedSpan | None = None) -> list[Item]:
    """The manifest items of ``group``'s events, before invalidation (which
    :func:`_with_invalidation` adds per request): ``placement`` KEPT (in the leaf) or
    EVICTED. ``bounded``: its results at the per-item cap (their sizes and counts);
    ``bindings``: what each result read (by seq); ``fitted``: the newest group bounded as a
    whole (its results' cuts). ``messages``: the group's leaf messages as the request
    carries them (before invalidation), whose neutralised control strings become each
    item's transform, followed by the redaction of secrets at ingest."""
    neutralised = {m.seq: m.neutralised for m in messages if m.neutralised}
    items: list[Item] = []
    events: tuple[MessageEvent | ToolResultEvent, ...] = (group.message, *group.results)
    for event in events:
        result = event if isinstance(event, ToolResultEvent) else None
        b = bounded[result.handle] if result is not None else None
        known: dict[str, Any] = {"seq": event.seq, "event_id": event.event_id, "kind": event.kind,
                                 "handle": event.handle}
        if result is not None and b is not None:
            known |= {"call_id": result.call_id, "tokens": b.payload_tokens, "bytes": b.payload_bytes,
                      "lines": b.payload_lines, "tokens_known": b.payload_tokens is not None}
            if bindings.get(result.seq):
                known["bindings"] = tuple(revision_attribute(bindings[result.seq]).split(", "))
        if placement == EVICTED:
            item = Item(**known, zone="trunk", representation=Representation.ELIDED,
                        why="oldest complete turn group evicted to fit the budget (eq. 1)")
        elif result is not None and b is not None:
            if fitted is not None:
                b = fitted.bounded[result.handle]
            span = b.span
            if fitted is not None:
                why = ("newest turn group, bounded as a whole to fit input_limit: its results share "
                       f"{fitted.share_tokens} tokens" + (" (head + tail)" if span else ""))
            else:
                why = "recent observation" + (" (over the per-item cap: head + tail)" if span else "")
            item = Item(**known, zone="leaf", representation=b.representation, why=why,
                        elided_tokens=(b.elided_tokens or 0) if span else 0,
                        elided_bytes=span.bytes if span else None,
                        elided_lines=(span.first_line, span.last_line) if span else None)
        elif group.pending and not group.results and not group.message.content.strip():
            item = Item(**known, zone=None, representation=Representation.PENDING, pending_calls=group.pending,
                        why="every tool call of this turn still awaits its result; it enters with the first result")
        elif (reason := unsent_reason(group)) is not None:
            item = Item(**known, zone=None, representation=Representation.DROPPED, why=reason)
        elif message_span is not None and event is group.message:
            item = Item(**known, zone="leaf", representation=Representation.HEAD_TAIL,
                        tokens_known=False,  # its elided tokens are not counted: elided_tokens_exact is false
                        transforms=tuple(leaf_transforms(group)),
                        why=_LEAF_WHY.get(group.message.kind, "recent turn") + " (over the observations share of "
                            "input_limit: head + tail)",
                        elided_bytes=message_span.bytes,
                        elided_lines=(message_span.first_line, message_span.last_line))
        else:
            item = Item(**known, zone="leaf", representation=Representation.VERBATIM, pending_calls=group.pending,
                        transforms=tuple(leaf_transforms(group)) if event is group.message else (),
                        why=_LEAF_WHY.get(group.message.kind, "recent turn") + (
                            " (calls awaiting a result are left out until it arrives)" if group.pending else ""))
        if placement == KEPT and event.seq in neutralised:  # the leaf's texts with control strings broken
            item = replace(item, transforms=(*item.transforms, neutralise_transform(neutralised[event.seq])))
        if placement == KEPT and event.redactions:  # secrets redacted at ingest (issue 12): its text in requests
            item = replace(item, transforms=(*item.transforms, redaction_transform(event.redactions)))
        items.append(item)
    return items


def held_item(memo: MutableMapping[Any, Any], key: Any, source: Any, build: Callable[[], Item]) -> Item:
    """The item ``build()`` makes of ``source`` (an event or an item), kept in ``memo``
    under ``key`` (which names everything else it depends on): the same object from GET
    to GET while ``source`` is, so its manifest entry is too (:meth:`Item.to_json`), and
    the stored delta finds it by identity instead of comparing and serializing it."""
    held = memo.get(key)
    if held is not None and held[0] is source:
        return held[1]  # type: ignore[no-any-return]
    item = build()
    memo[key] = (source, item)
    return item


def _tool_text(messages: Sequence[LeafMessage], seq: int) -> str:
    """The text of the tool message of ``seq`` among ``messages`` ("" when there is none)."""
    return next((m.content for m in messages if m.role == "tool" and m.seq == seq), "")


def _with_invalidation(item: Item, plan: InvalidationPlan, meter: TokenMeter | None, shown: Callable[[], str],
                       summary: dict[str, int] | None, memo: dict[Any, Any] | None = None) -> Item:
    """A tool result's ``item`` with its state under ``plan`` (:func:`_invalidation_fields`;
    ``shown()``: its text before the plan, read only when the plan chose a representation
    for it); itself when the plan says nothing of it. ``memo`` (its group view's): the
    fields are a function of the item, its state, the plan's choice for it and the text
    shown, so an item whose state and choice are equal to the last GET's is the same object
    from GET to GET (its manifest entry then too), and its counts are added to ``summary``
    again without counting its texts."""
    state = plan.states.get(item.seq)
    if state is None:
        return item
    choice = plan.choices.get(item.seq) if meter is not None and summary is not None else None
    text = shown() if choice is not None else None
    key = (id(item), choice is not None)
    held = memo.get(key) if memo is not None else None
    if held is not None and held[0] is item and (held[1] is state or held[1] == state) \
            and (held[2] is choice or held[2] == choice) and (held[3] is text or held[3] == text):
        if held[5]:
            for name, value in held[5]:
                summary[name] += value  # type: ignore[index]
        return held[4]  # type: ignore[no-any-return]
    added: dict[str, int] | None = None
    if choice is None:
        fields = _invalidation_fields(item.seq, plan, None, "", None)  # the state alone
    else:
        added = dict.fromkeys(summary or (), 0)
        fields = _invalidation_fields(item.seq, plan, meter, text or "", added)
        for name, value in added.items():
            summary[name] += value  # type: ignore[index]
    out = replace(item, **fields) if fields else item
    if memo is not None:
        memo[key] = (item, state, choice, text, out, tuple((k, v) for k, v in (added or {}).items() if v))
    return out


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


def _group_views(groups: Sequence[TurnGroup], cache: MutableMapping[Any, Any], meter: TokenMeter,
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
    views: dict[tuple[Any, ...], _GroupView] = cache.setdefault(("group views", *params), {})
    out: list[_GroupView] = []
    all_counts: list[tuple[int | None, ...]] = []
    keys = []
    # The last call's answer, reused for the groups it shares with this one (the same group
    # objects, in the same places) when the known counts and the bindings are equal: a
    # GET then looks up only the groups after them (the newest, usually one or two).
    last: _LastViews | None = cache.get(("group views, last call", *params))
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
                bkey = ("bounded", meter, item_cap_tokens, result.handle, result.payload, count)
                b = cache.get(bkey)
                if b is None:
                    b = cache[bkey] = bound_tool_output(meter, result, item_cap_tokens, payload_tokens=count)
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
    cache[("group views, last call", *params)] = _LastViews(list(groups), out, all_counts, keys, known, bindings,
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


def _extends(new: Mapping[Any, Any], old: Mapping[Any, Any]) -> bool:
    """Whether ``new`` holds ``old``'s entries first, unchanged, then others (mappings grown
    by adding keys: the request path's known counts and bindings). C-level compares."""
    if new is old:
        return True
    return len(new) >= len(old) and dict(islice(new.items(), len(old))) == old


def _shared_prefix(new: Sequence[Any], old: Sequence[Any]) -> int:
    """The length of the longest common prefix of two lists (elements compared as list ==
    does: by identity first), found with C-level slice compares."""
    n = min(len(new), len(old))
    if new[:n] == old[:n]:  # the usual case: one compare
        return n
    return longest(n - 1, lambda k: new[:k] == old[:k])


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


def warm_window(events: Sequence[Event], *, budget: Budget, meter: TokenMeter, item_cap_tokens: int,
                render_reasoning: bool = False, leaf_cache: MutableMapping[Any, Any],
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
                     cache: MutableMapping[Any, Any]) -> tuple[dict[str, BoundedResult], dict[str, tuple[int, int]]]:
    """Every group's bounded tool results by handle (built by :func:`_group_views`) and each
    one's payload (bytes, lines), for the views and known counts of this GET. Memoized in
    ``cache`` (``"bounded results"``): when the last GET's views and counts are a prefix of
    these (the same view objects, equal counts), only the new groups are added, to copies."""
    held = cache.get(_BOUNDED)
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
    cache[_BOUNDED] = (tuple(views), tuple(counts), bounded, sizes)
    return bounded, sizes


#: key of the session leaf cache's entry of :func:`_bounded_results`
_BOUNDED = "bounded results"


def _front(events: Sequence[Event], cache: MutableMapping[Any, Any], *, budget: Budget, meter: TokenMeter,
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


def assemble_window(
    session: Session,
    events: Sequence[Event],
    *,
    budget: Budget,
    meter: TokenMeter,
    item_cap_tokens: int,
    previous_cut_seq: int = 0,
    render_reasoning: bool = False,
    leaf_cache: MutableMapping[Any, Any] | None = None,
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
    cache: MutableMapping[Any, Any] = leaf_cache if leaf_cache is not None else {}
    known = payload_tokens or {}
    # the views first: their new messages start tokenizing (meter.prefetch) while the rest is planned
    front = _front(events, cache, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
                   render_reasoning=render_reasoning, known=known)
    grouping, graph, observed, bindings = front.grouping, front.graph, front.observed, front.bindings
    groups, views, known_counts = front.groups, front.views, front.known_counts
    step, writes = grouping.step, grouping.writes
    documents = current_documents(grouping.documents)
    shown_documents, document_spans = bound_documents(documents.current, meter, item_cap_tokens)
    plan_seqs = frozenset(p.seq for p in grouping.plans)
    options = invalidation or InvalidationOptions()
    # pass_due None: forecast from select's watermarks once the request is measured; planned
    # first as due (new tombstones deferred), re-planned below when the forecast says not due
    forecasting = options.pass_due is None and fold is not None
    plan = plan_invalidation(graph, mode=options.mode, pass_due=True if forecasting else bool(options.pass_due),
                             deferred=options.deferred, shown_upto=options.shown_upto, states=observed, memo=cache)
    bounded, sizes = _bounded_results(views, known_counts, cache)
    raw_groups = [view.messages for view in views]

    def anchored(current: InvalidationPlan) -> dict[int, list[str]]:
        """Notices by the index of the group they follow: the last group starting before
        the event that triggered them (the newest group when they first show)."""
        out: dict[int, list[str]] = {}
        for notice in current.notices:
            index = bisect_left(grouping.firsts, notice.anchor_seq) - 1  # the last group starting before it
            if index >= 0:
                out.setdefault(index, []).append(notice.text)
        return out

    def with_plan(current: InvalidationPlan) -> list[tuple[LeafMessage, ...]]:
        notes = anchored(current)
        if not current.choices and not notes:
            return raw_groups
        touched = _touched_groups(current, grouping.firsts, raw_groups)
        return [apply_invalidation(g, m, current, notes.get(i, ()), meter.control_strings, views[i].invalidated)
                if (touched is None or i in touched) or i in notes else m
                for i, (g, m) in enumerate(zip(groups, raw_groups))]

    leaf_groups = with_plan(plan)

    # The newest turn group that sends something is never evicted (nor a legacy cut past it
    # honoured); later groups send nothing (dropped, or pending calls without text).
    newest = next((i for i in range(len(groups) - 1, -1, -1) if leaf_groups[i]), len(groups) - 1)
    first_kept = bisect_left(grouping.firsts, previous_cut_seq)  # the first group at or after the cut
    first_kept = min(first_kept, max(newest, 0))

    derived_by_k: dict[int, dict[str, bytes]] = {}
    records: dict[int, ProgressRecord] = {}
    rejected: list[tuple[int, tuple[Any, ...]]] = []  # (fold point, findings) of passes rejected by the check
    warnings_extra: list[str] = []

    pin = grouping.pinned if fold is not None else None  # the newest user message: never folded (pinned_group)

    def build(k: int, newest_messages: tuple[LeafMessage, ...] | None = None) -> tuple[Conversation, Measurement]:
        kept = leaf_groups[k:] if newest_messages is None else \
            [*leaf_groups[k:newest], newest_messages, *leaf_groups[newest + 1:]]
        if pin is not None and pin < k:
            kept = [leaf_groups[pin], *kept]
        record_trunk = None
        if fold is not None:
            record, text = fold_record(session.contract, events, groups, k, watermarks=fold.watermarks,
                                       count=meter.count_text, memo=cache, pinned=pin)
            records[k], text = choose_record(fold, record, text, new_pass=k > first_kept, contract=session.contract,
                                             count=meter.count_text)
            record_trunk = (text, records[k].index_payloads)
        conv, derived_by_k[k] = _conversation(session, kept, groups[:k], step, sizes, meter.control_strings, cache,
                                              record_trunk=record_trunk, documents=shown_documents)
        return conv, plan_roles(meter.measure(conv), conv, plan_seqs, meter)

    conversation, measurement = build(first_kept)
    forecast: PassForecast | None = None
    if fold is not None:
        forecast = forecast_pass(measurement.total, _growth(leaf_groups, conversation, measurement,
                                                            first=first_kept, newest=newest, pin=pin, memo=cache),
                                 t_hi=min(fold.watermarks.t_hi, budget.input_limit), calls=fold.due_calls)
        if forecasting and not forecast.due and plan.deferred - options.deferred:
            plan = plan_invalidation(graph, mode=options.mode, pass_due=False, deferred=options.deferred,
                                     shown_upto=options.shown_upto, states=observed, memo=cache)
            leaf_groups = with_plan(plan)
            conversation, measurement = build(first_kept)
    pass_due = forecast.due if forecasting and forecast is not None else bool(options.pass_due)
    k = first_kept
    fitted: FittedGroup | None = None
    unfolded, unfolded_conversation = measurement, conversation  # the request without a pass
    held_pass: dict[str, int] | None = None  # a pass was due but would not make progress (pass_without_progress)
    if measurement.total > (budget.input_limit if fold is None else min(fold.watermarks.t_hi, budget.input_limit)):
        # Smallest k whose request fits the eviction target (binary search; the count is
        # non-increasing in k up to the breadcrumb's growth, so verify and step after).
        # k never passes the newest group. A fold (select) keeps the newest K groups and
        # the pinned ones (fold_bounds) and aims at T_lo.
        target = budget.eviction_target
        lo, hi = first_kept + 1, newest
        if fold is not None:
            target = fold.watermarks.t_lo
            lo, hi = fold_bounds(groups, newest=newest, first_kept=first_kept, keep_groups=fold.watermarks.keep_groups)
            hi = max(hi, first_kept)
        top = hi
        best: tuple[int, Conversation, Measurement] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            conv, meas = build(mid)
            if meas.total <= target:
                best, hi = (mid, conv, meas), mid - 1
            else:
                lo = mid + 1
        if best is None:
            last = max(top, first_kept)
            conv, meas = (conversation, measurement) if last == first_kept else build(last)
            best = (last, conv, meas)
        k, conversation, measurement = best
        while measurement.total > budget.input_limit and k < newest:
            k += 1
            conversation, measurement = build(k)
        if fold is not None and k > first_kept:
            # item 5: a fold point whose record loses or alters a protected field of what it
            # folds is rejected; the pass keeps the larger raw slice (one group fewer folded)
            findings = check_pass(fold, records[k], events, session.contract, conversation.trunk)
            while findings:
                rejected.append((groups[k].first_seq if k < len(groups) else 0, tuple(findings)))
                conv, meas = build(k - 1)  # k - 1 == first_kept: no pass (the accepted record stays)
                if meas.total > budget.input_limit:
                    break
                k, conversation, measurement = k - 1, conv, meas
                findings = check_pass(fold, records[k], events, session.contract, conversation.trunk) \
                    if k > first_kept else ()
            if findings:  # no smaller fold keeps them within input_limit: served, and said so
                warnings_extra.append(f"the pass at fold point seq {groups[k].first_seq if k < len(groups) else 0} "
                                      f"loses protected fields: {'; '.join(str(f) for f in findings)[:2000]}")
            if k > first_kept and pass_without_progress(
                    unfolded.total, measurement.total, t_hi=fold.watermarks.t_hi, t_lo=fold.watermarks.t_lo,
                    input_limit=budget.input_limit):
                held_pass = {"tokens": unfolded.total, "after": measurement.total,
                             "frees": unfolded.total - measurement.total,
                             "needs": fold.watermarks.t_hi - fold.watermarks.t_lo}
                k, conversation, measurement = first_kept, unfolded_conversation, unfolded
        if measurement.total > budget.input_limit and groups:
            group = groups[newest]

            def measure_with(group_bounded: Mapping[str, BoundedResult]) -> tuple[Conversation, Measurement]:
                messages = _leaf_messages(group, group_bounded, render_reasoning, meter.control_strings, bindings)
                return build(newest, apply_invalidation(group, messages, plan, anchored(plan).get(newest, ()),
                                                        meter.control_strings))

            try:
                fitted = fit_newest_group(group, budget=budget, meter=meter, item_cap_tokens=item_cap_tokens,
                                          excess_tokens=measurement.total - budget.input_limit,
                                          measure_with=measure_with, payload_tokens=known)
            except NewestGroupOverBudget:
                _, pinned = build(len(groups))
                check_pinned(budget, dict(pinned.by_role), pinned.total)  # the pinned content alone is over
                raise
            conversation, measurement = fitted.conversation, fitted.measurement
        elif measurement.total > budget.input_limit:
            check_pinned(budget, dict(measurement.by_role), measurement.total)
    if k > first_kept and plan.deferred and fitted is None:
        # this request rewrites the trunk anyway: the deferred tombstones replace their outputs now
        plan = plan_invalidation(graph, mode=options.mode, pass_due=pass_due, trunk_rewrite=True,
                                 deferred=options.deferred | plan.deferred, shown_upto=options.shown_upto,
                                 states=observed, memo=cache)
        leaf_groups = with_plan(plan)
        conversation, measurement = build(k)
        while measurement.total > budget.input_limit and k < newest:
            k += 1
            conversation, measurement = build(k)
    over_target = None
    if fold is not None and k > first_kept and measurement.total > fold.watermarks.t_lo:
        pinned_now = sum(meter.count_text(m.content) for m in leaf_groups[pin]) if pin is not None and pin < k else 0
        over_target = pass_over_target(measurement, fold.watermarks.t_lo, rejected=bool(rejected),
                                       newest_only=k >= newest, pinned_message_tokens=pinned_now,
                                       user_text_tokens=records[k].user_text.tokens if k in records else 0)
    cut_seq = groups[k].first_seq if k < len(groups) else 0
    cut_seq = max(cut_seq, previous_cut_seq)

    # The manifest lists the window one by one: the kept groups, the newest NOTE_MAX_GROUPS
    # dropped ones (the note's lines), and the steps and writes from the first of those on.
    # Older events (the groups the note names through its index payload) are one range.
    older = max(0, k - NOTE_MAX_GROUPS)
    boundary = groups[older].first_seq if older else 0
    derived = derived_by_k.get(k, {})
    ranges: list[EventRange] = []
    pinned_at = groups[pin] if pin is not None else None
    note_events = grouping.notes
    record_now = records.get(k)
    folded_now = frozenset(record_now.folded_seqs) if record_now is not None and fold is not None else frozenset()
    # bookkeeping accounted like notes: a child's conclusions (not rendered in its own requests)
    # and the replaced documents (issue 16)
    side_events: list[Event] = [*grouping.conclusions, *documents.replaced]
    range_key = (tuple(groups[:older]), step, tuple(known_counts[:older]), next(iter(derived), None),
                 fold is not None, pin, tuple(e.seq for e in note_events if e.seq < boundary),
                 tuple((e.seq, e.seq in folded_now) for e in side_events if e.seq < boundary))
    kept_ranges: list[tuple[Any, tuple[EventRange, ...]]] = cache.get("event ranges", [])
    found_range = next((value for key, value in kept_ranges if key == range_key), None)
    if found_range is not None:
        ranges = list(found_range)
    elif older:
        gone = Representation.ELIDED if fold is None else Representation.FOLDED
        counts = {gone: sum(1 + len(g.results) for g in groups[:older] if g is not pinned_at)}
        seqs = [seq for g in groups[:older] if g is not pinned_at for seq in g.seqs]
        for event in (*writes, *(e for e in grouping.steps if e is not step), *note_events):
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
        results = [bounded[r.handle] for g in groups[:older] if g is not pinned_at for r in g.results]
        ranges.append(EventRange(
            seq_from=min(seqs), seq_to=max(seqs), events=len(seqs), representations=counts,
            tokens=sum(b.payload_tokens or 0 for b in results), bytes=sum(b.payload_bytes for b in results),
            tokens_known=all(b.payload_tokens is not None for b in results),
            index=next(iter(derived), None),
            why=f"{older} oldest turn groups evicted to fit the budget (eq. 1), named with their handles in the "
                "index payload; superseded steps and artifact writes before them" if fold is None else
                f"{older} oldest turn groups folded into the progress record by earlier passes (listed by seq in the "
                "record, their handles in its index payload), with the writes, notes and steps before them"))
    if found_range is None:  # older events are fixed once named by the index: kept with what names them
        cache["event ranges"] = [(range_key, tuple(ranges)), *kept_ranges[:NOTES_KEPT - 1]]
    notes = anchored(plan)
    summary = {"historical": 0, "tombstones": 0, "tombstone_tokens": 0, "replaced_tokens": 0, "noticed": 0,
               "stale_tokens_kept": 0}
    presented: set[str] = set()
    items: list[Item] = []
    elided: list[Item] = []
    states, choices = plan.states, plan.choices
    indices: Sequence[int] = range(older, len(groups)) if pin is None or pin >= older \
        else [pin, *range(older, len(groups))]
    # The loop below gives each group's items from the group, its view, its place (folded,
    # evicted, kept), its known counts, its results' bindings, states and choices. The last
    # GET's outcome up to its newest groups is reused when all of those are unchanged for
    # them (compared at once: the same objects, and maps that agree on every key they had;
    # a key new since may only belong to a later event), so an extending GET visits only
    # its newest groups. Equal to the full loop in every case (tests/unit/test_assembly_memo.py).
    loop_key = (older, k, pin, fold is not None, previous_cut_seq, cut_seq, bool(states))
    snapshot_at = min(len(groups) - 1, newest)
    resumed: _ItemsLoop | None = cache.get("items loop")
    if resumed is not None and isinstance(indices, range) and resumed.key == loop_key \
            and older < resumed.upto <= snapshot_at and resumed.matches(groups, views, known_counts, older,
                                                                        states, choices, bindings):
        items, elided = list(resumed.items), list(resumed.elided)
        summary, presented = dict(resumed.summary), set(resumed.presented)
        indices = range(resumed.upto, len(groups))
    else:
        resumed = None
    for index in indices:
        if index == snapshot_at and isinstance(indices, range) and index > older:
            cache["items loop"] = _ItemsLoop.taken(loop_key, index, groups, views, known_counts, older, states,
                                                   choices, bindings, items, elided, summary, presented, resumed)
        group, view = groups[index], views[index]
        if index < k and fold is not None and index != pin:  # folded: the record holds it (no state shown)
            why = folded_why(group.first_seq, previous_cut_seq, cut_seq)
            elided.extend(held_item(view.invalidated, ("folded", i.seq, why), i,
                                    partial(replace, i, representation=Representation.FOLDED, why=why))
                          for i in view.items(group, EVICTED, known_counts[index], bindings))
            continue
        if index < k and index != pin:
            evicted = view.items(group, EVICTED, known_counts[index], bindings)
            elided.extend(_with_invalidation(i, plan, None, str, None, view.invalidated)
                          if i.kind == "tool_result" and i.seq in states else i for i in evicted)
            continue
        if fitted is not None and index == newest:
            group_seqs = set(group.seqs)
            group_items: Sequence[Item] = _group_items(group, bounded,
                                                       [m for m in conversation.leaf if m.seq in group_seqs],
                                                       KEPT, bindings, fitted=fitted)
        else:
            found_items = view._items.get((KEPT, known_counts[index]))  # inline: once per group and GET
            group_items = found_items if found_items is not None else \
                view.items(group, KEPT, known_counts[index], bindings)
        if not states:
            items.extend(group_items)
            continue
        kept = view.kept
        if kept is not None and kept[0] is group_items and tuple(map(states.get, kept[1])) == kept[2] \
                and tuple(map(choices.get, kept[1])) == kept[3]:
            # the same items under states and choices equal to the last GET's: its outcome
            # (per item a function of the item, its state and choice, see _with_invalidation)
            items.extend(kept[4])
            for name, value in kept[5]:
                summary[name] += value
            presented.update(kept[6])
            continue
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
                    item = _with_invalidation(item, plan, meter, partial(_tool_text, raw_groups[index], item.seq),
                                              summary, held_states)
                if item.state == "current":
                    presented_here.extend(item.bindings)  # those naming a revision kept below
            items.append(item)
        presented.update(presented_here)
        if fitted is None or index != newest:
            result_seqs = tuple(i.seq for i in group_items if i.kind == "tool_result" and i.zone == "leaf")
            view.kept = (group_items, result_seqs, tuple(map(states.get, result_seqs)), tuple(map(choices.get, result_seqs)),
                         tuple(items[start:]),
                         tuple((name, summary[name] - before[name]) for name in summary if summary[name] != before[name]),
                         tuple(presented_here))
    made: dict[Any, Any] = cache.setdefault("bookkeeping items", {})  # held_item's memo (this GET's keys kept)
    used = len(made)
    for write in writes:
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
    items.extend(_side_items(documents, side_events, conversation, boundary=boundary, folded=folded_now,
                             why_folded=lambda seq: folded_why(seq, previous_cut_seq, cut_seq),
                             document_spans=document_spans))
    if fold is not None:  # bookkeeping before the fold point (writes, notes, older steps) is in the record
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
    items.sort(key=_SEQ)
    items = _with_message_tokens(items, conversation, measurement, cache)
    declared = declared_tools(session)
    warnings = list(measurement.warnings)
    for group, view in zip(groups[k:], views[k:]):
        held = view._warnings  # inline: once per group and GET
        warnings.extend(held[1] if held is not None and held[0] == declared else view.warnings(group, declared))
    warnings += warnings_extra
    warnings += [f"pass rejected at fold point seq {seq}: {len(found)} protected fields lost or altered "
                 f"({'; '.join(sorted({str(getattr(f, 'field', f)) for f in found}))[:500]}); kept the larger raw slice"
                 for seq, found in rejected]
    if fitted is not None:
        warnings.append(f"seq {groups[newest].first_seq}: the newest turn group does not fit input_limit with its "
                        f"results at the per-item cap; they share {fitted.share_tokens} tokens as head + tail")
    tombstoned = [c.key for c in plan.choices.values() if c.choice == "tombstone"]
    report = InvalidationReport(
        mode=options.mode, pass_due=pass_due, deferred=tuple(sorted(plan.deferred)),
        shown_upto=max([options.shown_upto, *tombstoned]),
        notices=tuple(NoticeRef(after_seq=groups[i].first_seq, tokens=meter.count_text(text))
                      for i, texts in sorted(notes.items()) if i >= k for text in texts),
        # the revisions the request presents as current (what an action planned on it assumes;
        # a tool runner checks them with POST /preconditions, seed 000 section 4.7.2)
        presented=tuple(sorted(x for x in presented if "@r" in x)), **summary)
    return Assembly(
        invalidation=report,
        conversation=conversation,
        measurement=measurement,
        budget=budget,
        cut_seq=cut_seq,
        items=tuple(items),
        elided=tuple(elided),
        ranges=tuple(ranges),
        evicted_now=k - first_kept,
        warnings=tuple(warnings),
        derived_payloads=derived_by_k.get(k, {}),
        record=records.get(k),
        over_target=over_target,
        held=held_pass,
        forecast=forecast,
    )


#: key of the session leaf cache's entry of :func:`_with_message_tokens`: the last GET's leaf,
#: counts, items in and out, its {seq: tokens} and {(seq, tokens): (item, item with tokens)}
_MESSAGE_TOKENS = ("assembly", "message tokens")


def _with_message_tokens(items: list[Item], conversation: Conversation, measurement: Measurement,
                         memo: MutableMapping[Any, Any]) -> list[Item]:
    """``items`` with each user or assistant message in the leaf given ``tokens``: what it
    adds to the rendered request, its chat framing included, exactly as the meter measured
    it (``Measurement.leaf_tokens``, read off the request's one encoding: nothing is
    tokenized again). A message that owns no tokens of its own (merged by mistral-common
    into the message before it), and every message when the meter cannot attribute them,
    keep none.

    ``memo`` (the session's leaf cache) keeps the last GET's outcome: the items before the
    first seq whose leaf message or count changed since (and that are the same objects) are
    taken from it whole, so an extending GET visits only its newest items; an item whose
    count is the last one's is the same object as then (its manifest entry too,
    :meth:`Item.to_json`). The same items either way."""
    counts = measurement.leaf_tokens
    leaf = conversation.leaf
    if counts is None or len(counts) != len(leaf):
        memo.pop(_MESSAGE_TOKENS, None)
        return items
    held = memo.get(_MESSAGE_TOKENS)
    if held is not None:
        last_leaf, last_counts, last_items, last_out, last_by_seq, made = held
        same = min(_shared_prefix(leaf, last_leaf), _shared_prefix(counts, last_counts))
        by_seq = dict(last_by_seq)
        for m in last_leaf[same:]:
            by_seq.pop(m.seq, None)
        changed = [m.seq for m in (*leaf[same:], *last_leaf[same:]) if m.seq is not None]
        shared = _shared_prefix(items, last_items)
        # items are in seq order: those before the first changed seq, and the same as then, are as then
        done = bisect_left(items, min(changed), 0, shared, key=_SEQ) if changed else shared
        out = list(last_out[:done])
    else:
        by_seq, made, same, done, out = {}, {}, 0, 0, []
    for m, n in zip(leaf[same:], counts[same:]):
        if n is not None and m.seq is not None:
            by_seq[m.seq] = n
    fresh: dict[Any, Any] = {}  # new entries of made (the held one may be read by another thread: never changed)
    for item in items[done:]:
        if item.kind == "message" and item.zone == "leaf" and (n := by_seq.get(item.seq)) is not None:
            key = (item.seq, n)
            found = made.get(key)
            if found is None or found[0] is not item:
                found = fresh[key] = (item, replace(item, tokens=n))
            item = found[1]
        out.append(item)
    if fresh:
        made = made | fresh
    if len(made) > 2 * len(items) + 256:  # entries of messages gone from the window pile up: drop them
        live = {i.seq for i in items}
        made = {key: value for key, value in made.items() if key[0] in live}
    memo[_MESSAGE_TOKENS] = (leaf, counts, list(items), out, by_seq, made)
    return out


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


def _leaf_size(leaf: tuple[LeafMessage, ...], memo: MutableMapping[Any, Any] | None) -> int:
    """:func:`_size` of a whole leaf; with ``memo`` (the session's), from the last GET's when
    this leaf begins with that one's messages but its last (the next step, replaced each
    call): the same objects, compared in C, so only the new messages are visited."""
    if memo is not None and (held := memo.get(_LEAF_CHARS)) is not None:
        last, total = held
        shared = len(last) - 1
        if shared > 0 and begins_with(leaf, last[:shared]):
            size = int(total) - _size(last[shared:]) + _size(leaf[shared:])
            memo[_LEAF_CHARS] = (leaf, size)
            return size
    size = _size(leaf)
    if memo is not None:
        memo[_LEAF_CHARS] = (leaf, size)
    return size


_LEAF_CHARS = ("assembly", "leaf chars")  # the session memo: (the last leaf measured, its characters)


def _growth(leaf_groups: Sequence[Sequence[LeafMessage]], conversation: Conversation, measurement: Measurement, *,
            first: int, newest: int, pin: int | None, memo: MutableMapping[Any, Any] | None = None) -> int:
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
