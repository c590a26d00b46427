"""The walking-skeleton context policy ("window"): pin root and trunk, keep the newest
turn groups, evict the oldest complete turn groups when over budget.

Sources: seed 000 eq. 1 (budget) and section 4.4 (layout by change rate); seed 001
(pinning, elision breadcrumbs, ``bound_tool_output`` head + tail); seed 003
(``B_input = W - O - M``, assembly manifest).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from app.domain.budget import Budget, check_pinned
from app.domain.layout import Conversation, LeafMessage, LeafToolCall, canonical_tools, render_contract
from app.domain.manifest import EventRange, Item, Representation
from app.domain.ports import Measurement, TokenMeter
from app.domain.types import (
    ArtifactWriteEvent,
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
    """A tool result as it enters the request: verbatim or head + marker + tail."""

    text: str
    payload_tokens: int
    elided_tokens: int

    @property
    def representation(self) -> Representation:
        return Representation.HEAD_TAIL if self.elided_tokens else Representation.VERBATIM


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


def bound_tool_output(meter: TokenMeter, result: ToolResultEvent, cap_tokens: int) -> BoundedResult:
    """Seed 001 ``bound_tool_output``: the text unchanged if within ``cap_tokens``, else
    a head and a tail (half the cap each) joined by a marker naming the handle and the
    elided token count. The marker's own tokens are not charged to the cap."""
    tokens = meter.count_text(result.payload)
    if tokens <= cap_tokens:
        return BoundedResult(result.payload, tokens, 0)
    head_tokens = cap_tokens // 2
    head, tail, elided = meter.head_tail(result.payload, head_tokens, cap_tokens - head_tokens)
    marker = (
        f"\n[... {elided} tokens elided by ctxd; the whole output is kept as handle "
        f"{result.handle} (GET /v1/handles/{result.handle}) ...]\n"
    )
    return BoundedResult(head + marker + tail, tokens, elided)


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


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def call_warnings(session: Session, groups: Sequence[TurnGroup],
                  memo: MutableMapping[Any, Any] | None = None) -> list[str]:
    """Layout warnings for tool calls the request shows that the model could not have made
    validly: a tool the session does not declare, or arguments that are not a JSON object.
    They are recorded as the agent reported them (the log keeps what happened).
    ``memo``: an optional mapping kept across calls (the session's leaf cache), where each
    argument string's check is kept under ``("json_object", text)``."""
    declared = {str(t.get("function", t).get("name")) for t in session.tools}
    checked: MutableMapping[Any, Any] = memo if memo is not None else {}
    out = []
    for group in groups:
        for call in group.message.tool_calls:
            if declared and call.name not in declared:
                out.append(f"seq {group.message.seq}: call {call.call_id} names undeclared tool {call.name!r}")
            is_object = checked.get(("json_object", call.arguments))
            if is_object is None:
                is_object = checked[("json_object", call.arguments)] = _is_json_object(call.arguments)
            if not is_object:
                out.append(f"seq {group.message.seq}: call {call.call_id} arguments are not a JSON object; "
                           "rendered as the text given")
    return out


def _call_preview(arguments: str, limit: int = 80) -> str:
    flat = " ".join(arguments.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


NOTE_MAX_GROUPS = 32  # turn groups the elision note lists one by one; older ones go to an index payload


def _group_line(group: TurnGroup, payload_tokens: dict[str, int]) -> str:
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
            f"{result.handle[:SHORT_HANDLE]} ({payload_tokens.get(result.handle, 0)} tokens{exit_part})"
        )
    return "".join(parts)


def elision_index(groups: Sequence[TurnGroup], payload_tokens: dict[str, int]) -> bytes:
    """The index payload of older dropped groups: canonical JSON, one entry per group with
    its turn handle and each call's result handle and token count."""
    entries = []
    for group in groups:
        results = {r.call_id: r for r in group.results}
        entries.append({
            "seq": group.message.seq, "role": group.message.role, "turn": group.message.handle,
            "calls": [{"call_id": c.call_id, "name": c.name, "arguments": c.arguments,
                       "result": results[c.call_id].handle, "tokens": payload_tokens.get(results[c.call_id].handle, 0),
                       "exit_code": results[c.call_id].exit_code}
                      for c in group.message.tool_calls if c.call_id in results],
        })
    return json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def elision_note(dropped: Sequence[TurnGroup], payload_tokens: dict[str, int], *,
                 max_groups: int = NOTE_MAX_GROUPS) -> tuple[str, dict[str, bytes]]:
    """One breadcrumb naming every dropped turn group's handles (seed 001).

    The newest ``max_groups`` dropped groups are listed line by line; older ones are named
    through one index payload (content-addressed, so its handle is its sha256) listing
    their handles, which keeps the note, and so the pinned trunk, bounded. Returns the
    note and the index payloads to store ({handle: bytes})."""
    if not dropped:
        return "", {}
    first, last = dropped[0].first_seq, max(max(g.seqs) for g in dropped)
    total = sum(payload_tokens.get(r.handle, 0) for g in dropped for r in g.results)
    lines = [
        "## Elided history",
        f"{len(dropped)} earlier turn groups (events seq {first}-{last}, tool output {total} tokens) "
        "were removed from this request to fit the token budget. Nothing is lost: read any of them "
        "back by handle (GET /v1/handles/<handle>, prefixes accepted).",
    ]
    derived: dict[str, bytes] = {}
    older, recent = dropped[: max(0, len(dropped) - max_groups)], dropped[max(0, len(dropped) - max_groups):]
    if older:
        index = elision_index(older, payload_tokens)
        handle = hashlib.sha256(index).hexdigest()
        derived[handle] = index
        older_last = max(max(g.seqs) for g in older)
        lines.append(f"- seq {older[0].first_seq}-{older_last}: {len(older)} older turn groups; their turn and "
                     f"result handles are listed in index {handle[:SHORT_HANDLE]} (JSON)")
    lines.extend(_group_line(group, payload_tokens) for group in recent)
    return "\n".join(lines), derived


def _leaf_messages(group: TurnGroup, bounded: dict[str, BoundedResult], render_reasoning: bool) -> list[LeafMessage]:
    message = group.message
    resolved = {r.call_id for r in group.results}
    calls = tuple(
        LeafToolCall(c.call_id, c.name, c.arguments) for c in message.tool_calls if c.call_id in resolved
    )
    out: list[LeafMessage] = []
    if message.content or calls or message.role == "user":
        out.append(
            LeafMessage(
                role=message.role,
                content=message.content,
                tool_calls=calls,
                reasoning=message.reasoning if render_reasoning else None,
                seq=message.seq,
            )
        )
    names = {c.call_id: c.name for c in message.tool_calls}
    for result in group.results:
        out.append(
            LeafMessage(
                role="tool",
                content=observation_text(result, bounded[result.handle].text),
                call_id=result.call_id,
                name=names[result.call_id],
                seq=result.seq,
            )
        )
    return out


def _conversation(session: Session, leaf_groups: Sequence[tuple[LeafMessage, ...]], dropped: Sequence[TurnGroup],
                  step: StepEvent | None, payload_tokens: dict[str, int]) -> tuple[Conversation, dict[str, bytes]]:
    """The conversation with ``dropped`` elided, and the index payloads its note names."""
    trunk = render_contract(session.contract)
    note, derived = elision_note(dropped, payload_tokens)
    if note:
        trunk = trunk + "\n\n" + note
    leaf: list[LeafMessage] = []
    for messages in leaf_groups:
        leaf.extend(messages)
    if step is not None:
        leaf.append(LeafMessage(role="user", content=f"Next step: {step.text}", seq=step.seq))
    conversation = Conversation(system=session.system, tools=canonical_tools(session.tools), trunk=trunk,
                                leaf=tuple(leaf))
    return conversation, derived


def _result_key(result: ToolResultEvent) -> tuple[Any, ...]:
    """What a tool message's text depends on besides the meter and the cap."""
    exception = result.conditions.get("exception_info") if result.conditions else None
    return (result.seq, result.call_id, result.handle, result.payload, result.exit_code,
            str(exception) if exception else None)


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
) -> Assembly:
    """Select and lay out the next request under the window policy.

    Invariants: the result's ``measurement.total <= budget.input_limit`` (eq. 1, counted
    on the rendered request); evicted turn groups are whole (a call never loses its
    result); every dropped group is named with its handles in the trunk's elision note;
    the cut only moves forward (``previous_cut_seq``), so the leaf is append-only between
    evictions and, once over the limit, the request shrinks to ``budget.eviction_target``.

    ``leaf_cache``: an optional mapping kept across calls (the service keeps one per
    session in its bounded memo, app/services/memo.py) from what a turn group's leaf
    messages and bounded tool outputs depend on (meter, per-item cap, reasoning switch,
    the message event, each result's seq, call id, handle, payload, exit code and
    exception) to those values. A session's
    leaf is mostly its previous request's, so most groups are then not rebuilt, and equal
    messages are the same objects (cheap to hash for the layout digest).

    Raises:
        PinnedOverBudget: root + trunk + next step alone exceed ``input_limit``.
    """
    groups, step, writes = build_turn_groups(events)
    cache: MutableMapping[Any, Any] = leaf_cache if leaf_cache is not None else {}
    bounded: dict[str, BoundedResult] = {}
    payload_tokens: dict[str, int] = {}
    for group in groups:
        for result in group.results:
            if result.handle not in bounded:
                key = ("bounded", meter, item_cap_tokens, result.handle, result.payload)
                b = cache.get(key)
                if b is None:
                    b = cache[key] = bound_tool_output(meter, result, item_cap_tokens)
                bounded[result.handle] = b
                payload_tokens[result.handle] = b.payload_tokens

    # each group's leaf messages, built once (and, with a leaf_cache, once per session)
    leaf_groups: list[tuple[LeafMessage, ...]] = []
    for group in groups:
        key = ("leaf", meter, item_cap_tokens, render_reasoning, group.message,
               tuple(_result_key(r) for r in group.results))
        messages = cache.get(key)
        if messages is None:
            messages = cache[key] = tuple(_leaf_messages(group, bounded, render_reasoning))
        leaf_groups.append(messages)

    first_kept = next((i for i, g in enumerate(groups) if g.first_seq >= previous_cut_seq), len(groups))

    derived_by_k: dict[int, dict[str, bytes]] = {}

    def build(k: int) -> tuple[Conversation, Measurement]:
        conv, derived_by_k[k] = _conversation(session, leaf_groups[k:], groups[:k], step, payload_tokens)
        return conv, meter.measure(conv)

    conversation, measurement = build(first_kept)
    k = first_kept
    if measurement.total > budget.input_limit:
        # Smallest k whose request fits the eviction target (binary search; the count is
        # non-increasing in k up to the breadcrumb's growth, so verify and step after).
        target = budget.eviction_target
        lo, hi = first_kept + 1, len(groups)
        best: tuple[int, Conversation, Measurement] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            conv, meas = build(mid)
            if meas.total <= target:
                best, hi = (mid, conv, meas), mid - 1
            else:
                lo = mid + 1
        if best is None:
            conv, meas = build(len(groups))
            best = (len(groups), conv, meas)
        k, conversation, measurement = best
        while measurement.total > budget.input_limit and k < len(groups):
            k += 1
            conversation, measurement = build(k)
        if measurement.total > budget.input_limit:
            pinned = dict(measurement.by_role)
            check_pinned(budget, pinned, measurement.total)
    cut_seq = groups[k].first_seq if k < len(groups) else (groups[-1].first_seq + 1 if groups else 0)
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
        ranges.append(EventRange(
            seq_from=min(seqs), seq_to=max(seqs), events=len(seqs), representations=counts,
            tokens=sum(payload_tokens[r.handle] for g in groups[:older] for r in g.results),
            index=next(iter(derived), None),
            why=f"{older} oldest turn groups evicted to fit the budget (eq. 1), named with their handles in the "
                "index payload; superseded steps and artifact writes before them"))
    items: list[Item] = []
    elided: list[Item] = []
    for index, group in enumerate(groups[older:], start=older):
        kept = index >= k
        for event in (group.message, *group.results):
            result = event if isinstance(event, ToolResultEvent) else None
            known = {"seq": event.seq, "event_id": event.event_id, "kind": event.kind, "handle": event.handle,
                     "call_id": result.call_id if result else None,
                     "tokens": payload_tokens[result.handle] if result else None}
            if not kept:
                elided.append(Item(**known, zone="trunk", representation=Representation.ELIDED,
                                   why="oldest complete turn group evicted to fit the budget (eq. 1)"))
            elif result is not None:
                b = bounded[result.handle]
                items.append(Item(**known, zone="leaf", elided_tokens=b.elided_tokens, representation=b.representation,
                                  why="recent observation" + (" (over the per-item cap: head + tail)"
                                                              if b.elided_tokens else "")))
            elif group.pending and not group.results and not group.message.content:
                items.append(Item(**known, zone=None, representation=Representation.PENDING, pending_calls=group.pending,
                                  why="every tool call of this turn still awaits its result; it enters with the "
                                      "first result"))
            else:
                items.append(Item(**known, zone="leaf", representation=Representation.VERBATIM, pending_calls=group.pending,
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
    items.sort(key=_SEQ)
    warnings = list(measurement.warnings) + call_warnings(session, groups[k:], cache)
    return Assembly(
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
