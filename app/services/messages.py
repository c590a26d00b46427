"""Provider-shaped ingestion (issue 14 item 1): OpenAI / Anthropic messages posted as an
agent keeps them, mapped to events (``app/wire/inbound.py``) and appended idempotently by
position in the session's message stream."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session as OrmSession

from app.domain.errors import InvalidMessage, MessageConflict
from app.domain.ingest import PostedEvent
from app.services.memo import AssemblyMemo
from app.services.sessions import (
    check_protected_text,
    ingest_events,
    require_session_row,
)
from app.services.shell_inference import ShellStates
from app.store import positions as store
from app.store import repository as repo
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry
from app.wire.inbound import MappedMessage

INSTRUCTIONS_SEPARATOR = "\n\n"


def merged_instructions(current: str, text: str) -> str:
    """The session's instructions after a new system / developer message ``text``: the text
    itself when there were none (or the same text: the session was created with it), else
    the current instructions, a blank line, then the text (nothing of either is lost)."""
    if not current or current == text:
        return text
    if not text:
        return current
    return current + INSTRUCTIONS_SEPARATOR + text


def ingest_messages(db: OrmSession, session_id: str, mapped: list[MappedMessage], *, start: int,
                    profiles: ProfileRegistry, meters: MeterRegistry | None, max_payload_bytes: int | None = None,
                    redact: bool = True, shell_states: ShellStates | None = None,
                    memo: AssemblyMemo | None = None) -> dict[str, Any]:
    """Append provider messages posted at positions ``start``, ``start + 1``, ... (one
    transaction, all or nothing; the caller commits). ``mapped``: the messages as
    :func:`app.wire.inbound.map_messages` maps them, their events validated.

    A message at a known position is a no-op when it maps to what is stored there (status
    ``duplicate``, the seqs of its events) and a :class:`MessageConflict` (409) otherwise; a
    message at a new position is appended (status ``created``): its events through
    :func:`ingest_events` (event ids ``msg:<position>``), a system / developer message into
    the session's instructions (:func:`merged_instructions`). ``memo``: as
    :func:`ingest_events`'s (the worker's memo receives the committed events).

    Returns ``{"session_id", "last_seq", "next_position", "messages": [{position, status,
    event_ids, seqs, instructions}], "new_tool_outputs"}``.

    Raises:
        SessionNotFound (404); MessageConflict (409); InvalidMessage (422): ``start`` past
        the session's next position (a gap), instructions holding a NUL; ControlTokenInText
        (422): instructions spelling a control token of the profile; and whatever
        :func:`ingest_events` raises for the events (InvalidEvent 422, EventConflict 409,
        PayloadTooLarge 413).
    """
    row = require_session_row(db, session_id, lock=True)
    upcoming = store.next_position(db, session_id)
    if start > upcoming:
        raise InvalidMessage(f"start {start} leaves a gap: the session's next message position is {upcoming}",
                             loc=["body", "start"], next_position=upcoming)
    stored = store.stored_positions(db, session_id, [m.position for m in mapped])
    out: list[dict[str, Any]] = []
    events: list[PostedEvent] = []
    new: list[tuple[MappedMessage, str]] = []
    for m in mapped:
        digest = m.fingerprint()
        if m.position in stored:
            known, seqs = stored[m.position]
            if known != digest:
                raise MessageConflict(f"the message at position {m.position} differs from the one stored there "
                                      "(a posted history may only grow: post the changed conversation to a new "
                                      "session)", position=m.position)
            out.append({"position": m.position, "status": "duplicate", "seqs": seqs,
                        "event_ids": [e["event_id"] for e in m.events], "instructions": m.instructions is not None})
            continue
        if m.instructions is not None:
            text = m.instructions
            if "\x00" in text:
                raise InvalidMessage(f"message at position {m.position}: instructions must not contain a NUL "
                                     "character (U+0000)", position=m.position)
            merged = merged_instructions(row.system, text)
            if merged != row.system:
                if meters is not None:
                    check_protected_text(profiles, meters, row.profile, {"system": merged})
                repo.set_session_fields(row, system=merged)
                db.flush()
        new.append((m, digest))
        events.extend(PostedEvent.from_json(e) for e in m.events)
    ingested: dict[str, Any] = ingest_events(db, session_id, events, max_payload_bytes=max_payload_bytes,
                                             redact=redact, shell_states=shell_states, memo=memo) \
        if events else {"last_seq": row.last_seq, "results": [], "new_tool_outputs": []}
    results = iter(list(ingested["results"]))
    rows = []
    for m, digest in new:
        seqs = [next(results)["seq"] for _ in m.events]
        rows.append((m.position, digest, seqs))
        out.append({"position": m.position, "status": "created", "seqs": seqs,
                    "event_ids": [e["event_id"] for e in m.events], "instructions": m.instructions is not None})
    store.add_positions(db, session_id, rows)
    db.flush()
    out.sort(key=lambda r: r["position"])
    return {"session_id": session_id, "last_seq": ingested["last_seq"],
            "next_position": max([upcoming, *(m.position + 1 for m in mapped)]), "messages": out,
            "new_tool_outputs": ingested["new_tool_outputs"]}
