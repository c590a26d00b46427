"""Manifest items: what each event became in the request (kept, evicted, folded, invalidated),
and the memo of the items loop.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from app.domain.assembly.base import _SEQ, BoundedResult, _shared_prefix
from app.domain.assembly.bounding import FittedGroup
from app.domain.assembly.leaf import _invalidation_fields, leaf_transforms, unsent_reason
from app.domain.cuts import ElidedSpan
from app.domain.framing import revision_attribute
from app.domain.layout import (
    Conversation,
    LeafMessage,
)
from app.domain.manifest import (
    Item,
    Representation,
)
from app.domain.ports import Measurement, TokenMeter
from app.domain.redaction import redaction_transform
from app.domain.scratchpad import Documents
from app.domain.supersession import InvalidationPlan
from app.domain.text import neutralise_transform
from app.domain.types import (
    Binding,
    ConclusionEvent,
    DocumentEvent,
    Event,
    MessageEvent,
    ToolResultEvent,
    TurnGroup,
)


class ItemsMemo(Protocol):
    """The session memo's field this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    message_tokens: tuple[tuple[LeafMessage, ...], tuple[int | None, ...], list[Item], list[Item], dict[int | None, int],
                          dict[tuple[int, int], tuple[Item, Item]]] | None




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


def held_item(memo: dict[Any, Any], key: Any, source: Any, build: Callable[[], Item]) -> Item:
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


#: key of the session leaf cache's entry of :func:`_with_message_tokens`: the last GET's leaf,
#: counts, items in and out, its {seq: tokens} and {(seq, tokens): (item, item with tokens)}
_MESSAGE_TOKENS = ("assembly", "message tokens")


def _with_message_tokens(items: list[Item], conversation: Conversation, measurement: Measurement,
                         memo: ItemsMemo) -> list[Item]:
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
        memo.message_tokens = None
        return items
    held = memo.message_tokens
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
    memo.message_tokens = (leaf, counts, list(items), out, by_seq, made)
    return out
