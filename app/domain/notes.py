"""Hypotheses and obligations: the agent's keyed notes (seed 000 section 4.6.1, table 7
rows "Hypotheses" and "Unresolved obligations"; issue 10 item 4).

An agent POSTs ``hypothesis`` {key, text, status, depends_on} and ``obligation`` {key,
text, status} events. Keys live in two namespaces (a hypothesis ``h1`` and an obligation
``h1`` are different notes). The value of a key is its latest event (highest seq): a later
event with the same key supersedes the earlier one, which stays in the log (and is listed
in :attr:`Notes.superseded`) but is never shown as current.

Statuses (chosen so a record can tell verified from proposed, section 4.6.1):

* hypothesis: ``working`` (held, unsettled), ``supported`` (a logged check backs it),
  ``refuted`` (a logged check contradicts it: kept so the agent does not chase it again);
* obligation: ``open`` (still owed), ``done`` (discharged), ``dropped`` (no longer owed).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.domain.types import Event, HypothesisEvent, ObligationEvent

__all__ = ["NOTE_CHARS", "Notes", "bounded_note", "current_notes", "elided_note", "note_items"]

#: characters of a step, hypothesis or obligation text a request shows (about 1,000 tokens):
#: a longer one is shown as its first two thirds and last third around a marker
NOTE_CHARS: Final = 4_000


def bounded_note(text: str, seq: int, kind: str, limit: int = NOTE_CHARS) -> str:
    """``text`` (a step's, a hypothesis' or an obligation's, posted at ``seq``) as requests
    show it: unchanged when at most ``limit`` characters, else its first ``2 * limit // 3``
    and last ``limit - 2 * limit // 3`` characters around a marker naming how many were
    elided and where the whole text is (the session's event log). Characters, not tokens:
    cheap and deterministic, whatever the tokenizer. Before, these texts were shown whole
    and pinned (the step at the end of the leaf, notes and the step in the progress
    record), so one of ~200 kB made every GET of its session a 422 until the agent replaced
    it (the fault kind of an oversized message kept in the history and refused on every
    later turn, as for user messages: app/domain/assembly.py ``bound_user_message``)."""
    elided = elided_note(text, limit)
    if elided is None:
        return text
    return (f"{text[:elided.start]}\n[... {len(text) - limit:,} characters of this {kind} elided by ctxd; the whole "
            f"text is event seq {seq} of the session's event log: GET /v1/sessions/<session>/events?"
            f"after_seq={seq - 1}&limit=1&representation=full ...]\n{text[elided.stop:]}")


def elided_note(text: str, limit: int = NOTE_CHARS) -> slice | None:
    """The characters of ``text`` that :func:`bounded_note` leaves out (a slice: all but
    the first ``2 * limit // 3`` and the last ``limit - 2 * limit // 3``), or None when it
    shows the text whole."""
    if len(text) <= limit:
        return None
    head = 2 * limit // 3
    return slice(head, len(text) - (limit - head))


@dataclass(frozen=True)
class Notes:
    """The current value per key, in order of first appearance of the key.

    ``hypotheses`` / ``obligations``: the latest event of each key; ``superseded``: seqs of
    the note events a later event of the same key replaced (ascending)."""

    hypotheses: tuple[HypothesisEvent, ...] = ()
    obligations: tuple[ObligationEvent, ...] = ()
    superseded: tuple[int, ...] = ()

    def hypothesis(self, key: str) -> HypothesisEvent | None:
        return next((h for h in self.hypotheses if h.key == key), None)

    def obligation(self, key: str) -> ObligationEvent | None:
        return next((o for o in self.obligations if o.key == key), None)

    @property
    def open_obligations(self) -> tuple[ObligationEvent, ...]:
        return tuple(o for o in self.obligations if o.status == "open")


def current_notes(events: Iterable[Event]) -> Notes:
    """The current hypothesis and obligation per key of ``events`` (any order; other kinds
    are ignored). O(len(events)); pure; raises nothing."""
    hyps: dict[str, HypothesisEvent] = {}
    obls: dict[str, ObligationEvent] = {}
    superseded: list[int] = []
    for event in sorted((e for e in events if isinstance(e, (HypothesisEvent, ObligationEvent))),
                        key=lambda e: e.seq):
        table: dict[str, HypothesisEvent] | dict[str, ObligationEvent] = \
            hyps if isinstance(event, HypothesisEvent) else obls
        old = table.get(event.key)
        if old is not None:
            superseded.append(old.seq)
        table[event.key] = event  # type: ignore[assignment]  # same kind as the table
    # dicts keep the first insertion position of a key when its value is replaced
    return Notes(hypotheses=tuple(hyps.values()), obligations=tuple(obls.values()), superseded=tuple(sorted(superseded)))


def note_items(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Manifest entries (``{seq, event_id, kind, zone: None, representation, why}``) of the
    hypothesis and obligation events of ``events``: they are not rendered in the leaf; the
    current value of each key is for the progress record (``not_rendered`` until a pass
    folds it), the others are ``superseded`` by a later event of the same key."""
    superseded = set(current_notes(events).superseded)
    out: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, (HypothesisEvent, ObligationEvent)):
            current = event.seq not in superseded
            out.append({"seq": event.seq, "event_id": event.event_id, "kind": event.kind, "zone": None,
                        "representation": "not_rendered" if current else "superseded",
                        "why": (f"{event.kind} {event.key!r} ({event.status}): current value, for the progress record"
                                if current else f"a later {event.kind} with key {event.key!r} replaced it")})
    return out
