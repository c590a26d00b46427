"""Plans, sub-agent conclusions and retrieved documents in the request (issue 16; seed 004
sections 3.1.2 and 3.7, seed 001 "The scratchpad / plan file" and "Sub-agents as context
isolation").

Where each goes, with the cache in mind (seed 000 section 4.4: stable first, volatile last):

* ``plan`` {text}: a new version is a user message appended to the leaf at its seq (the
  previous request stays a prefix of the next one); earlier versions stay where they are
  until a pass folds them; at a pass the latest folded version is written into the
  progress record (``## Plan``). Its text tokens count under ``task_state``.
* ``child_conclusion`` (made by ingest from a child session's ``conclusion``): a user
  message at its seq naming the child and the handle of its text; an observation.
* ``document`` {source, text, key}: while current (no later document with its key) it is
  placed next to the instruction, after the last turn group and before the next step;
  counted under ``observations``. A replaced document leaves the leaf (it was at its end,
  so only the tail changes); at a pass the replaced documents before the fold point are
  folded to one line each with their handle.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.domain.types import (
    ChildConclusionEvent,
    ConclusionEvent,
    DocumentEvent,
    Event,
    MessageEvent,
    PlanEvent,
)

__all__ = ["LEAF_KINDS", "Documents", "conclusions", "current_documents", "document_text", "latest_plan",
           "leaf_message"]

SHORT = 12  # hex chars of a handle printed in the request (the API resolves prefixes)

#: event kinds that enter the leaf as a user message of their own, at their seq
LEAF_KINDS: tuple[str, ...] = ("plan", "child_conclusion")


def plan_text(event: PlanEvent) -> str:
    """A plan version as the leaf carries it: ``## Plan (version N)`` then the text."""
    return f"## Plan (version {event.version})\n{event.text}"


def conclusion_text(event: ChildConclusionEvent) -> str:
    """A child's conclusion as the parent's leaf carries it: the child's id, its seq and
    the handle of the whole text, then the text."""
    return (f"## Conclusion of sub-agent session {event.child} (its event seq {event.child_seq}; "
            f"handle {event.handle[:SHORT]})\n{event.text}")


def document_text(event: DocumentEvent) -> str:
    """A retrieved document as the leaf carries it: key, source, seq and handle, then the text."""
    return (f"## Retrieved document [{event.key}] from {event.source} (seq {event.seq}, "
            f"handle {event.handle[:SHORT]})\n{event.text}")


def leaf_message(event: PlanEvent | ChildConclusionEvent) -> MessageEvent:
    """The user message a plan version or a child's conclusion enters the leaf as: a turn
    group of its own (evicted or folded like one), ``kind`` naming what it came from and
    ``handle`` its text's payload."""
    text = plan_text(event) if isinstance(event, PlanEvent) else conclusion_text(event)
    return MessageEvent(seq=event.seq, event_id=event.event_id, role="user", content=text, handle=event.handle,
                        kind=event.kind, at=event.at)


def latest_plan(events: Iterable[Event]) -> PlanEvent | None:
    """The plan version with the highest seq among ``events``, or None."""
    return max((e for e in events if isinstance(e, PlanEvent)), key=lambda e: e.seq, default=None)


@dataclass(frozen=True)
class Documents:
    """``current``: the latest document of each key, in seq order; ``replaced``: the
    others (a later document with the same key came), in seq order."""

    current: tuple[DocumentEvent, ...] = ()
    replaced: tuple[DocumentEvent, ...] = ()

    def replaced_by(self, event: DocumentEvent) -> DocumentEvent | None:
        return next((d for d in self.current if d.key == event.key), None)


def current_documents(events: Iterable[Event]) -> Documents:
    """The documents of ``events`` split into current and replaced (:class:`Documents`).
    O(len(events)); pure."""
    docs = sorted((e for e in events if isinstance(e, DocumentEvent)), key=lambda e: e.seq)
    latest = {d.key: d for d in docs}
    current = tuple(d for d in docs if latest[d.key] is d)
    return Documents(current=current, replaced=tuple(d for d in docs if latest[d.key] is not d))


def conclusions(events: Sequence[Event]) -> tuple[ConclusionEvent, ...]:
    """The ``conclusion`` events of a child session (not rendered in its own requests)."""
    return tuple(e for e in events if isinstance(e, ConclusionEvent))
