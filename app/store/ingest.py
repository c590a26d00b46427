"""The POST path's reads and write (app/services/sessions.py ``ingest_events``): what a batch
needs of its session, read once under the session's row lock (:func:`load_ingest_state`),
and its plan (:class:`app.domain.ingest.IngestPlan`) written in one go (:func:`save_ingest`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

from app.domain.ingest import IngestPlan, IngestState, PostedEvent, StoredEvent
from app.store import repository as repo
from app.store import search as search_store
from app.store.tables import ArtifactRow, EventRow, SessionRow
from app.store.tenancy import own_payloads


def artifact_states(db: OrmSession, session_id: str) -> dict[str, tuple[int, str | None]]:
    """The session's artifacts: artifact -> (current revision, hash known for it or None).
    The rows stay in the unit of work (:func:`save_artifacts` changes them without a read)."""
    rows = db.execute(select(ArtifactRow).where(ArtifactRow.session_id == session_id)).scalars()
    return {r.artifact: (r.revision, r.content_hash) for r in rows}


def save_artifacts(db: OrmSession, session_id: str, changed: Mapping[str, tuple[int, str | None]]) -> None:
    """Set each changed artifact's revision and known hash (a row at revision 0 only holds a hash)."""
    for artifact, (revision, content_hash) in changed.items():
        row = db.get(ArtifactRow, (session_id, artifact))
        if row is None:
            db.add(ArtifactRow(session_id=session_id, artifact=artifact, revision=revision, content_hash=content_hash))
        else:
            row.revision, row.content_hash = revision, content_hash


def load_ingest_state(db: OrmSession, row: SessionRow, events: Sequence[PostedEvent], *,
                      lock_parent: Callable[[str], SessionRow]) -> tuple[IngestState, SessionRow | None]:
    """What ``events`` need of the session ``row`` (locked by the caller): the stored events
    of their ids, the earlier declarations of their call ids, the artifacts, the plan
    versions when a new plan comes, and the parent's row (``lock_parent(parent id)``: locked
    after the child's, so no cycle) when a new conclusion comes. Returns (the state, the
    parent's row or None)."""
    session_id = row.id
    existing = repo.existing_events(db, session_id, [e.event_id for e in events])
    new = [e for e in events if e.event_id not in existing]
    parent = lock_parent(row.parent_id) if row.parent_id is not None and any(e.kind == "conclusion" for e in new) \
        else None
    return IngestState(
        session_id=session_id, last_seq=row.last_seq, parent_id=row.parent_id,
        parent_last_seq=parent.last_seq if parent is not None else None,
        existing={event_id: StoredEvent(r.body_sha256, r.seq, r.body.get("revision")) for event_id, r in existing.items()},
        calls=repo.tool_calls(db, session_id, [c for e in events for c in e.call_ids()]),
        artifacts=artifact_states(db, session_id),
        plan_versions=repo.plan_versions(db, session_id) if any(e.kind == "plan" for e in new) else None), parent


def save_ingest(db: OrmSession, row: SessionRow, plan: IngestPlan, *, parent: SessionRow | None = None) -> list[EventRow]:
    """Write ``plan`` for the session ``row`` (and its ``parent``, which receives the batch's
    conclusions): the event rows, the artifacts' revisions, the tool calls, the payloads
    (owned by the session), the session's last seq and stored bytes, the search texts.
    Returns the session's new event rows in seq order (flushed)."""
    stored = []
    for event in plan.events:
        added = repo.append_event(db, session_id=event.session_id, seq=event.seq, event_id=event.event_id,
                                  kind=event.kind, body=event.body, body_sha256=event.body_sha256)
        if event.session_id == row.id:
            stored.append(added)
    for conclusion in plan.parents:
        if parent is None or parent.id != conclusion.parent_id:
            raise RuntimeError(f"a conclusion for session {conclusion.parent_id!r} without its row")
        own_payloads(db, {conclusion.handle: conclusion.data}, session_id=parent.id, tenant_id=parent.tenant_id)
        repo.advance_session(parent, last_seq=conclusion.last_seq, added_bytes=len(conclusion.data))
        search_store.add_event_texts(db, parent.id, list(conclusion.texts))
    save_artifacts(db, row.id, plan.artifacts)
    repo.add_tool_calls(db, row.id, plan.new_calls)
    repo.answer_tool_calls(db, row.id, plan.answers)
    own_payloads(db, plan.payloads, session_id=row.id, tenant_id=row.tenant_id)
    repo.advance_session(row, last_seq=plan.last_seq, added_bytes=plan.added_bytes)
    db.flush()
    search_store.add_event_texts(db, row.id, plan.texts)
    return stored
