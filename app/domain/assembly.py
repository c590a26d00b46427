"""The walking-skeleton context policy ("window"): pin root and trunk, keep the newest
turn groups, evict the oldest complete turn groups when over budget.

Sources: seed 000 eq. 1 (budget) and section 4.4 (layout by change rate); seed 001
(pinning, elision breadcrumbs, ``bound_tool_output`` head + tail); seed 003
(``B_input = W - O - M``, assembly manifest).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from app.domain.budget import Budget, check_pinned, split_share
from app.domain.cuts import ElidedSpan, elided_span, payload_size
from app.domain.errors import NewestGroupOverBudget
from app.domain.framing import frame, revision_attribute
from app.domain.invalidation import build_graph
from app.domain.supersession import InvalidationOptions, InvalidationPlan, plan_invalidation
from app.domain.layout import (
    Conversation,
    LeafMessage,
    LeafToolCall,
    arguments_problem,
    assistant_text,
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
from app.domain.redaction import redaction_transform
from app.domain.ports import Measurement, TokenMeter
from app.domain.text import neutralise_control_text, neutralise_transform
from app.domain.types import (
    ArtifactWriteEvent,
    Binding,
    Event,
    MessageEvent,
    Session,
    StepEvent,
    ToolResultEvent,
    TurnGroup,
)

_SEQ = attrgetter("seq")
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
    invalidation: InvalidationReport = field(default_factory=InvalidationReport)  # the manifest's summary


def build_turn_groups(events: Sequence[Event]) -> tuple[list[TurnGroup], StepEvent | None, list[ArtifactWriteEvent]]:
    """Group events into turn groups in seq order.

    An assistant message opens a group that collects the results of its tool calls
    (parallel calls included, whatever their arrival order); a user message or an
    assistant message without calls is a group of its own. Returns the groups, the
    latest step (shown at the end of the leaf) and the artifact writes (bookkeeping).
    """
    messages: list[MessageEvent] = []
    owner: dict[str, int] = {}
    got: list[dict[str, ToolResultEvent]] = []
    step: StepEvent | None = None
    writes: list[ArtifactWriteEvent] = []
    for event in sorted(events, key=_SEQ):
        if isinstance(event, MessageEvent):
            index = len(messages)
            messages.append(event)
            got.append({})
            for call in event.tool_calls:
                owner[call.call_id] = index
        elif isinstance(event, ToolResultEvent):
            index = owner.get(event.call_id, -1)
            if index >= 0:  # ingestion guarantees it; stay total anyway
                got[index][event.call_id] = event
        elif isinstance(event, StepEvent):
            step = event
        else:
            writes.append(event)
    out = []
    for message, results in zip(messages, got):
        if not message.tool_calls:
            out.append(TurnGroup(message=message))
            continue
        ordered = tuple(results[c.call_id] for c in message.tool_calls if c.call_id in results)
        pending = tuple(c.call_id for c in message.tool_calls if c.call_id not in results)
        out.append(TurnGroup(message=message, results=ordered, pending=pending))
    return out, step, writes


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
    head_tokens = cap_tokens // 2
    cut = meter.cut_ends(payload, head_tokens, cap_tokens - head_tokens)
    if cut is None:  # within the cap: its count costs no more than the cap
        tokens = payload_tokens if payload_tokens is not None and not neutralised else meter.count_text(payload)
        return BoundedResult(payload, tokens, 0, None, size, lines, neutralised)
    head, tail = cut
    span = elided_span(payload, head, tail)
    elided = None
    if payload_tokens is not None:
        elided = max(0, payload_tokens - meter.count_text(head) - meter.count_text(tail))
    marker = (
        f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) elided by ctxd; the whole output is handle "
        f"{result.handle}: GET /v1/handles/{result.handle}?lines={span.first_line}:{span.last_line} ...]\n"
    )
    return BoundedResult(head + marker + tail, payload_tokens, elided, span, size, lines, neutralised)


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
    events = (group.message, *group.results)
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
    """A tool message's content: run facts the agent needs (exit code, exception), then the
    output. The payload itself is never re-encoded (seed 000 section 4.4.2)."""
    header = []
    if result.exit_code is not None:
        header.append(f"exit_code: {result.exit_code}")
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
    declared = {str(t.get("function", t).get("name")) for t in session.tools}
    out = []
    for group in groups:
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
        f"{len(dropped)} earlier turn groups (events seq {first}-{last}, tool output {total:,} bytes) "
        "were removed from this request to fit the token budget. Nothing is lost: read any of them "
        "back by handle (GET /v1/handles/<handle>, prefixes accepted).",
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
                               seq=message.seq, neutralised=broken))
    for result in group.results:
        broken = bounded[result.handle].neutralised  # the header (exception text) is checked here
        framed, _ = frame(observation_text(result, bounded[result.handle].text), tool=names[result.call_id],
                          call_id=result.call_id, bindings=(bindings or {}).get(result.seq, ()))
        content = clean(framed)
        out.append(LeafMessage(role="tool", content=content, call_id=result.call_id, name=names[result.call_id],
                               seq=result.seq, neutralised=broken))
    return out


def _conversation(session: Session, leaf_groups: Sequence[tuple[LeafMessage, ...]], dropped: Sequence[TurnGroup],
                  step: StepEvent | None, sizes: Sizes,
                  control: Sequence[str] = ()) -> tuple[Conversation, dict[str, bytes]]:
    """The conversation with ``dropped`` elided, and the index payloads its note names.
    The note's argument previews and the step text have their ``control`` strings
    neutralised; the contract is verbatim (session create refuses one that spells any)."""
    trunk = render_contract(session.contract)
    note, derived = elision_note(dropped, sizes)
    if note:
        trunk = trunk + "\n\n" + neutralise_control_text(note, control)[0]
    leaf: list[LeafMessage] = []
    for messages in leaf_groups:
        leaf.extend(messages)
    if step is not None:
        text, broken = neutralise_control_text(step.text, control)
        leaf.append(LeafMessage(role="user", content=f"Next step: {text}", seq=step.seq, neutralised=broken))
    conversation = Conversation(system=session.system, tools=canonical_tools(session.tools), trunk=trunk,
                                leaf=tuple(leaf))
    return conversation, derived


def _result_key(result: ToolResultEvent, bindings: Mapping[int, tuple[Binding, ...]]) -> tuple[Any, ...]:
    """What a tool message's text depends on besides the meter and the cap."""
    exception = result.conditions.get("exception_info") if result.conditions else None
    return (result.seq, result.call_id, result.handle, result.payload, result.exit_code,
            str(exception) if exception else None, bindings.get(result.seq, ()))


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
                       notices: Sequence[str], control: Sequence[str]) -> tuple[LeafMessage, ...]:
    """The group's leaf messages with the plan applied (seed 000 table 9): a tombstoned
    result's content replaced in place by its tombstone, and ``notices`` (those anchored
    after this group) appended: to the group's last tool message when it ends with one,
    else as a user message after it. ctxd's texts have their control strings neutralised
    (artifact names come from clients)."""
    out = []
    for m in messages:
        choice = plan.choices.get(m.seq) if m.role == "tool" and m.seq is not None else None
        if choice is not None and choice.text is not None:
            m = replace(m, content=neutralise_control_text(choice.text, control)[0])
        out.append(m)
    if notices:
        text = neutralise_control_text("\n".join(notices), control)[0]
        if out and out[-1].role == "tool":
            out[-1] = replace(out[-1], content=out[-1].content + "\n\n" + text)
        else:
            out.append(LeafMessage(role="user", content=text))
    return tuple(out)


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
    session in its bounded memo, app/services/memo.py) from what a turn group's leaf
    messages and bounded tool outputs depend on (meter, per-item cap, reasoning switch,
    the message event, each result's seq, call id, handle, payload, exit code and
    exception) to those values. A session's
    leaf is mostly its previous request's, so most groups are then not rebuilt, and equal
    messages are the same objects (cheap to hash for the layout digest).

    ``payload_tokens``: exact token counts of tool outputs known so far (handle -> tokens,
    stored after their POST). They go into the manifest only (items' ``tokens`` and
    ``elided_tokens``, with ``tokens_known``); the request body never depends on them.

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
    groups, step, writes = build_turn_groups(events)
    options = invalidation or InvalidationOptions()
    graph = build_graph(events)
    bindings = {seq: node.bindings for seq, node in graph.observations.items()}
    plan = plan_invalidation(graph, mode=options.mode, pass_due=options.pass_due, deferred=options.deferred,
                             shown_upto=options.shown_upto)
    cache: MutableMapping[Any, Any] = leaf_cache if leaf_cache is not None else {}
    bounded: dict[str, BoundedResult] = {}
    sizes: dict[str, tuple[int, int]] = {}
    known = payload_tokens or {}
    for group in groups:
        for result in group.results:
            if result.handle not in bounded:
                count = known.get(result.handle)
                key = ("bounded", meter, item_cap_tokens, result.handle, result.payload, count)
                b = cache.get(key)
                if b is None:
                    b = cache[key] = bound_tool_output(meter, result, item_cap_tokens, payload_tokens=count)
                bounded[result.handle] = b
                sizes[result.handle] = (b.payload_bytes, b.payload_lines)

    # each group's leaf messages, built once (and, with a leaf_cache, once per session)
    raw_groups: list[tuple[LeafMessage, ...]] = []
    for group in groups:
        key = ("leaf", meter, item_cap_tokens, render_reasoning, group.message,
               tuple(_result_key(r, bindings) for r in group.results))
        messages = cache.get(key)
        if messages is None:
            messages = cache[key] = tuple(_leaf_messages(group, bounded, render_reasoning, meter.control_strings,
                                                         bindings))
        raw_groups.append(messages)

    def anchored(current: InvalidationPlan) -> dict[int, list[str]]:
        """Notices by the index of the group they follow: the last group starting before
        the event that triggered them (the newest group when they first show)."""
        out: dict[int, list[str]] = {}
        for notice in current.notices:
            index = next((i for i in range(len(groups) - 1, -1, -1) if groups[i].first_seq < notice.anchor_seq), -1)
            if index >= 0:
                out.setdefault(index, []).append(notice.text)
        return out

    def with_plan(current: InvalidationPlan) -> list[tuple[LeafMessage, ...]]:
        notes = anchored(current)
        return [apply_invalidation(g, m, current, notes.get(i, ()), meter.control_strings)
                if current.choices or i in notes else m for i, (g, m) in enumerate(zip(groups, raw_groups))]

    leaf_groups = with_plan(plan)

    # The newest turn group that sends something is never evicted (nor a legacy cut past it
    # honoured); later groups send nothing (dropped, or pending calls without text).
    newest = next((i for i in range(len(groups) - 1, -1, -1) if leaf_groups[i]), len(groups) - 1)
    first_kept = next((i for i, g in enumerate(groups) if g.first_seq >= previous_cut_seq), len(groups))
    first_kept = min(first_kept, max(newest, 0))

    derived_by_k: dict[int, dict[str, bytes]] = {}

    def build(k: int, newest_messages: tuple[LeafMessage, ...] | None = None) -> tuple[Conversation, Measurement]:
        kept = leaf_groups[k:] if newest_messages is None else \
            [*leaf_groups[k:newest], newest_messages, *leaf_groups[newest + 1:]]
        conv, derived_by_k[k] = _conversation(session, kept, groups[:k], step, sizes, meter.control_strings)
        return conv, meter.measure(conv)

    conversation, measurement = build(first_kept)
    k = first_kept
    fitted: FittedGroup | None = None
    if measurement.total > budget.input_limit:
        # Smallest k whose request fits the eviction target (binary search; the count is
        # non-increasing in k up to the breadcrumb's growth, so verify and step after).
        # k never passes the newest group.
        target = budget.eviction_target
        lo, hi = first_kept + 1, newest
        best: tuple[int, Conversation, Measurement] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            conv, meas = build(mid)
            if meas.total <= target:
                best, hi = (mid, conv, meas), mid - 1
            else:
                lo = mid + 1
        if best is None:
            last = max(newest, first_kept)
            conv, meas = (conversation, measurement) if last == first_kept else build(last)
            best = (last, conv, meas)
        k, conversation, measurement = best
        while measurement.total > budget.input_limit and k < newest:
            k += 1
            conversation, measurement = build(k)
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
        plan = plan_invalidation(graph, mode=options.mode, pass_due=options.pass_due, trunk_rewrite=True,
                                 deferred=options.deferred | plan.deferred, shown_upto=options.shown_upto)
        leaf_groups = with_plan(plan)
        conversation, measurement = build(k)
        while measurement.total > budget.input_limit and k < newest:
            k += 1
            conversation, measurement = build(k)
    cut_seq = groups[k].first_seq if k < len(groups) else 0
    cut_seq = max(cut_seq, previous_cut_seq)

    # The manifest lists the window one by one: the kept groups, the newest NOTE_MAX_GROUPS
    # dropped ones (the note's lines), and the steps and writes from the first of those on.
    # Older events (the groups the note names through its index payload) are one range.
    older = max(0, k - NOTE_MAX_GROUPS)
    boundary = groups[older].first_seq if older else 0
    derived = derived_by_k.get(k, {})
    ranges: list[EventRange] = []
    if older:
        counts = {Representation.ELIDED: sum(1 + len(g.results) for g in groups[:older])}
        seqs = [seq for g in groups[:older] for seq in g.seqs]
        for event in (*writes, *(e for e in events if isinstance(e, StepEvent) and e is not step)):
            if event.seq < boundary:
                kind = Representation.NOT_RENDERED if isinstance(event, ArtifactWriteEvent) else Representation.SUPERSEDED
                counts[kind] = counts.get(kind, 0) + 1
                seqs.append(event.seq)
        results = [bounded[r.handle] for g in groups[:older] for r in g.results]
        ranges.append(EventRange(
            seq_from=min(seqs), seq_to=max(seqs), events=len(seqs), representations=counts,
            tokens=sum(b.payload_tokens or 0 for b in results), bytes=sum(b.payload_bytes for b in results),
            tokens_known=all(b.payload_tokens is not None for b in results),
            index=next(iter(derived), None),
            why=f"{older} oldest turn groups evicted to fit the budget (eq. 1), named with their handles in the "
                "index payload; superseded steps and artifact writes before them"))
    notes = anchored(plan)
    summary = {"historical": 0, "tombstones": 0, "tombstone_tokens": 0, "replaced_tokens": 0, "noticed": 0,
               "stale_tokens_kept": 0}
    presented: set[str] = set()
    items: list[Item] = []
    elided: list[Item] = []
    for index, group in enumerate(groups[older:], start=older):
        kept = index >= k
        for event in (group.message, *group.results):
            result = event if isinstance(event, ToolResultEvent) else None
            b = bounded[result.handle] if result is not None else None
            known: dict[str, Any] = {"seq": event.seq, "event_id": event.event_id, "kind": event.kind,
                                     "handle": event.handle}
            if result is not None and b is not None:
                known |= {"call_id": result.call_id, "tokens": b.payload_tokens, "bytes": b.payload_bytes,
                          "lines": b.payload_lines, "tokens_known": b.payload_tokens is not None}
                if bindings.get(result.seq):
                    known["bindings"] = tuple(revision_attribute(bindings[result.seq]).split(", "))
            if not kept:
                elided.append(Item(**known, zone="trunk", representation=Representation.ELIDED,
                                   why="oldest complete turn group evicted to fit the budget (eq. 1)",
                                   **(_invalidation_fields(result.seq, plan, None, "", None) if result else {})))
            elif result is not None and b is not None:
                newest_fitted = fitted is not None and index == newest
                if fitted is not None and newest_fitted:
                    b = fitted.bounded[result.handle]
                span = b.span
                if fitted is not None and newest_fitted:
                    why = ("newest turn group, bounded as a whole to fit input_limit: its results share "
                           f"{fitted.share_tokens} tokens" + (" (head + tail)" if span else ""))
                else:
                    why = "recent observation" + (" (over the per-item cap: head + tail)" if span else "")
                shown = next((m.content for m in raw_groups[index] if m.role == "tool" and m.seq == result.seq), "")
                fields: dict[str, Any] = {"representation": b.representation, "why": why}
                fields |= _invalidation_fields(result.seq, plan, meter, shown, summary)
                if fields.get("state") == "current":
                    presented.update(x for x in known.get("bindings", ()) if "@r" in x)
                items.append(Item(**known, zone="leaf", **fields,
                                  elided_tokens=(b.elided_tokens or 0) if span else 0,
                                  elided_bytes=span.bytes if span else None,
                                  elided_lines=(span.first_line, span.last_line) if span else None))
            elif group.pending and not group.results and not event.content.strip():
                items.append(Item(**known, zone=None, representation=Representation.PENDING, pending_calls=group.pending,
                                  why="every tool call of this turn still awaits its result; it enters with the "
                                      "first result"))
            elif (reason := unsent_reason(group)) is not None:
                items.append(Item(**known, zone=None, representation=Representation.DROPPED, why=reason))
            else:
                items.append(Item(**known, zone="leaf", representation=Representation.VERBATIM, pending_calls=group.pending,
                                  transforms=tuple(leaf_transforms(group)) if event is group.message else (),
                                  why="recent turn" + (" (calls awaiting a result are left out until it arrives)"
                                                       if group.pending else "")))
    for write in writes:
        if write.seq >= boundary:
            items.append(Item(seq=write.seq, event_id=write.event_id, kind=write.kind, zone=None,
                              representation=Representation.NOT_RENDERED,
                              why=f"artifact revision bookkeeping ({write.artifact} r{write.revision})"))
    if step is not None:
        items.append(Item(seq=step.seq, event_id=step.event_id, kind="step", zone="leaf",
                          representation=Representation.VERBATIM, why="the next bounded step, last in the leaf"))
    for earlier in events:
        if isinstance(earlier, StepEvent) and earlier is not step and earlier.seq >= boundary:
            items.append(Item(seq=earlier.seq, event_id=earlier.event_id, kind="step", zone=None,
                              representation=Representation.SUPERSEDED,
                              why=f"a later step (seq {step.seq if step else '-'}) replaced it"))
    neutralised = {m.seq: m.neutralised for m in conversation.leaf if m.neutralised}
    if neutralised:  # the leaf's texts with control strings broken (after the provider rules)
        items = [replace(i, transforms=(*i.transforms, neutralise_transform(neutralised[i.seq])))
                 if i.seq in neutralised else i for i in items]
    redacted = {e.seq: e.redactions for e in events if isinstance(e, (MessageEvent, ToolResultEvent)) and e.redactions}
    if redacted:  # secrets redacted at ingest (issue 12): the event's text as it enters requests
        items = [replace(i, transforms=(*i.transforms, redaction_transform(redacted[i.seq])))
                 if i.seq in redacted else i for i in items]
    items.sort(key=_SEQ)
    warnings = list(measurement.warnings) + call_warnings(session, groups[k:])
    if fitted is not None:
        warnings.append(f"seq {groups[newest].first_seq}: the newest turn group does not fit input_limit with its "
                        f"results at the per-item cap; they share {fitted.share_tokens} tokens as head + tail")
    tombstoned = [c.key for c in plan.choices.values() if c.choice == "tombstone"]
    report = InvalidationReport(
        mode=options.mode, pass_due=options.pass_due, deferred=tuple(sorted(plan.deferred)),
        shown_upto=max([options.shown_upto, *tombstoned]),
        notices=tuple(NoticeRef(after_seq=groups[i].first_seq, tokens=meter.count_text(text))
                      for i, texts in sorted(notes.items()) if i >= k for text in texts),
        # the revisions the request presents as current (what an action planned on it assumes;
        # a tool runner checks them with POST /preconditions, seed 000 section 4.7.2)
        presented=tuple(sorted(presented)), **summary)
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
    )
