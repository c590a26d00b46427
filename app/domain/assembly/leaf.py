"""Leaf rendering: a turn group's leaf messages, call warnings, the elision note that names
evicted groups, the conversation, and invalidation applied to the leaf.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from app.domain.assembly.base import NOTES_KEPT, SHORT_HANDLE, BoundedResult
from app.domain.framing import frame
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
    InvalidationChoice,
    Representation,
    Transform,
    WriteRef,
)
from app.domain.notes import bounded_note
from app.domain.ports import Measurement, TokenMeter
from app.domain.scratchpad import document_text
from app.domain.supersession import InvalidationPlan
from app.domain.text import neutralise_control_text
from app.domain.types import (
    Binding,
    DocumentEvent,
    Session,
    StepEvent,
    ToolResultEvent,
    TurnGroup,
)


class LeafMemo(Protocol):
    """The session memo's fields this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    canonical_tools: tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]] | None
    elision_notes: list[tuple[tuple[TurnGroup, ...], str, dict[str, bytes]]]



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


def _canonical_tools(tools: tuple[dict[str, Any], ...], cache: LeafMemo | None
                     ) -> tuple[dict[str, Any], ...]:
    """:func:`~app.domain.layout.canonical_tools` of the session's declarations, kept in
    ``cache`` while they are equal (the same tuple from GET to GET: the root's prefix
    digest then compares by identity)."""
    held = cache.canonical_tools if cache is not None else None
    if held is not None and (held[0] is tools or held[0] == tools):
        return held[1]
    canonical = canonical_tools(tools)
    if cache is not None:
        cache.canonical_tools = (tools, canonical)
    return canonical


#: key of the session leaf cache's entry of :func:`_canonical_tools`
_TOOLS = "canonical tools"


def _conversation(session: Session, leaf_groups: Sequence[tuple[LeafMessage, ...]], dropped: Sequence[TurnGroup],
                  step: StepEvent | None, sizes: Sizes, control: Sequence[str] = (),
                  cache: LeafMemo | None = None, *,
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
            cache.elision_notes if cache is not None else []
        groups = tuple(dropped)
        found = next((entry for entry in notes if len(entry[0]) == len(groups) and entry[0] == groups), None)
        if found is None:
            note, derived = elision_note(dropped, sizes)
            found = (groups, neutralise_control_text(note, control)[0] if note else "", derived)
            if cache is not None:
                cache.elision_notes = [found, *notes[:NOTES_KEPT - 1]]
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
