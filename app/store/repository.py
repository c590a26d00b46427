"""Repositories: ORM rows <-> domain values. Services call these; they never commit."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session as OrmSession

from app.domain.types import (
    ArtifactWriteEvent,
    Binding,
    Constraint,
    Contract,
    Event,
    MessageEvent,
    Session,
    StepEvent,
    ToolCall,
    ToolResultEvent,
)
from app.store.tables import (ArtifactRow, EventRow, ManifestRow, PayloadRow, PrefixStateRow, SessionRow, ToolCallRow,
                              utcnow)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- sessions -------------------------------------------------------------------------

def session_from_row(row: SessionRow) -> Session:
    contract = row.contract
    return Session(
        id=row.id,
        profile=row.profile,
        contract=Contract(
            goal=contract["goal"],
            constraints=tuple(Constraint(c["id"], c["text"]) for c in contract.get("constraints", [])),
            contract_version=int(contract.get("contract_version", 1)),
        ),
        system=row.system,
        tools=tuple(row.tools),
        metadata=dict(row.meta or {}),
    )


def add_session(db: OrmSession, *, session_id: str, profile: str, contract: dict[str, Any], system: str,
                tools: list[dict[str, Any]], metadata: dict[str, Any], model: str | None = None,
                tenant_id: str = "default") -> SessionRow:
    row = SessionRow(id=session_id, profile=profile, contract=contract, system=system, tools=tools,
                     meta=metadata, model=model, last_seq=0, cut_seq=0, tenant_id=tenant_id)
    db.add(row)
    db.flush()
    return row


def get_session_row(db: OrmSession, session_id: str, *, lock: bool = False) -> SessionRow | None:
    if lock:
        # An UPDATE first takes the write lock on SQLite and the row lock on PostgreSQL, so
        # concurrent batches of one session serialise instead of racing for seq numbers.
        db.execute(update(SessionRow).where(SessionRow.id == session_id).values(last_seq=SessionRow.last_seq))
        return db.execute(select(SessionRow).where(SessionRow.id == session_id).with_for_update()).scalar_one_or_none()
    return db.get(SessionRow, session_id)


# --- payloads -------------------------------------------------------------------------

def _upsert_insert(db: OrmSession) -> Any:
    """The dialect's ``insert`` construct with ON CONFLICT support (PostgreSQL, SQLite),
    or None for another dialect."""
    dialect = db.get_bind().dialect.name
    return pg_insert if dialect == "postgresql" else sqlite_insert if dialect == "sqlite" else None


def put_payload(db: OrmSession, data: bytes) -> str:
    """Store ``data`` once under its sha256 (hex); returns the handle."""
    digest = sha256_hex(data)
    values = {"sha256": digest, "size": len(data), "data": data}
    insert = _upsert_insert(db)
    if insert is not None:
        db.execute(insert(PayloadRow).values(**values).on_conflict_do_nothing(index_elements=["sha256"]))
    elif db.get(PayloadRow, digest) is None:
        db.add(PayloadRow(**values))
        db.flush()
    return digest


def get_payload(db: OrmSession, handle: str) -> tuple[str, bytes] | None:
    """The payload whose sha256 hex is ``handle`` or starts with it (unambiguous prefix).

    Returns (full handle, bytes), or None. Raises LookupError on an ambiguous prefix."""
    handle = handle.lower()
    if len(handle) == 64:
        row = db.get(PayloadRow, handle)
        return (row.sha256, row.data) if row else None
    rows = db.execute(select(PayloadRow.sha256).where(PayloadRow.sha256.startswith(handle, autoescape=True)).limit(2)).scalars().all()
    if not rows:
        return None
    if len(rows) > 1:
        raise LookupError(handle)
    row = db.get(PayloadRow, rows[0])
    assert row is not None
    return row.sha256, row.data


def get_payload_texts(db: OrmSession, handles: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(handles))
    out: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for sha, data in db.execute(select(PayloadRow.sha256, PayloadRow.data).where(PayloadRow.sha256.in_(chunk))):
            out[sha] = bytes(data).decode("utf-8")
    return out


def payload_token_counts(db: OrmSession, handles: Iterable[str], tokenizer_id: str) -> dict[str, int | None]:
    """handle -> the stored token count of that payload under ``tokenizer_id`` (None when
    not counted yet), for the given handles that exist. Chunks of 500 handles."""
    wanted = sorted(set(handles))
    out: dict[str, int | None] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for sha, counts in db.execute(select(PayloadRow.sha256, PayloadRow.token_counts)
                                      .where(PayloadRow.sha256.in_(chunk))):
            value = (counts or {}).get(tokenizer_id)
            out[sha] = int(value) if value is not None else None
    return out


def store_token_counts(db: OrmSession, tokenizer_id: str, counts: dict[str, int]) -> None:
    """Record ``counts`` (handle -> tokens under ``tokenizer_id``) beside the payloads, keeping
    the counts of other tokenizers (read, merge, write: two writers of different tokenizers
    at once may lose one count, which is then computed again)."""
    wanted = sorted(counts)
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for sha, known in db.execute(select(PayloadRow.sha256, PayloadRow.token_counts)
                                     .where(PayloadRow.sha256.in_(chunk))).all():
            merged = dict(known or {}) | {tokenizer_id: int(counts[sha])}
            db.execute(update(PayloadRow).where(PayloadRow.sha256 == sha).values(token_counts=merged))


# --- events ---------------------------------------------------------------------------

def existing_events(db: OrmSession, session_id: str, event_ids: Sequence[str]) -> dict[str, EventRow]:
    if not event_ids:
        return {}
    rows = db.execute(select(EventRow).where(EventRow.session_id == session_id, EventRow.event_id.in_(list(set(event_ids))))).scalars()
    return {r.event_id: r for r in rows}


def tool_calls(db: OrmSession, session_id: str, call_ids: Iterable[str]) -> dict[str, int | None]:
    """Of ``call_ids``, those declared in the session: call id -> the seq of its result, or
    None while it has none. One SELECT on the tool-call table (chunks of 500 ids), so the
    cost follows the batch, not the session."""
    wanted = sorted(set(call_ids))
    out: dict[str, int | None] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        rows = db.execute(select(ToolCallRow.call_id, ToolCallRow.result_seq)
                          .where(ToolCallRow.session_id == session_id, ToolCallRow.call_id.in_(chunk)))
        out.update((call_id, result_seq) for call_id, result_seq in rows)
    return out


def add_tool_calls(db: OrmSession, session_id: str, calls: Sequence[tuple[str, int, int | None]]) -> None:
    """Record new tool calls: (call id, seq of the declaring message, seq of its result or
    None). The caller has checked that no id is already in the session."""
    if calls:
        db.execute(insert(ToolCallRow.__table__), [
            {"session_id": session_id, "call_id": call_id, "call_seq": call_seq, "result_seq": result_seq}
            for call_id, call_seq, result_seq in calls])


def answer_tool_calls(db: OrmSession, session_id: str, answers: Sequence[tuple[str, int]]) -> None:
    """Set the result seq of calls recorded earlier: (call id, seq of the result). Raises
    RuntimeError when a call is missing or already answered (the caller checked both under
    the session's row lock, so this is a broken invariant, not bad input)."""
    if not answers:
        return
    table = ToolCallRow.__table__
    statement = (update(table).where(table.c.session_id == session_id, table.c.call_id == bindparam("cid"),
                                     table.c.result_seq.is_(None))
                 .values(result_seq=bindparam("rseq")))
    result = db.execute(statement, [{"cid": call_id, "rseq": seq} for call_id, seq in answers])
    if result.rowcount not in (-1, len(answers)):
        raise RuntimeError(f"tool calls of session {session_id!r}: {len(answers)} results, {result.rowcount} calls answered")


def append_event(db: OrmSession, *, session_id: str, seq: int, event_id: str, kind: str, body: dict[str, Any],
                 body_sha256: str) -> EventRow:
    row = EventRow(session_id=session_id, seq=seq, event_id=event_id, kind=kind, body=body, body_sha256=body_sha256)
    db.add(row)
    return row


def bump_artifact(db: OrmSession, session_id: str, artifact: str) -> int:
    row = db.get(ArtifactRow, (session_id, artifact))
    if row is None:
        row = ArtifactRow(session_id=session_id, artifact=artifact, revision=0)
        db.add(row)
    row.revision += 1
    db.flush()
    return row.revision


def artifact_revision(db: OrmSession, session_id: str, artifact: str) -> int:
    row = db.get(ArtifactRow, (session_id, artifact))
    return row.revision if row else 0


def artifact_content_hash(db: OrmSession, session_id: str, artifact: str, revision: int) -> str | None:
    """The content hash last recorded for ``revision`` of ``artifact``: by the
    ``artifact_write`` that made it or by a ``tool_result`` bound to it, whichever
    came later (highest seq); None when neither gave one."""
    write = db.execute(
        select(EventRow.seq, EventRow.body["content_hash"].as_string())
        .where(EventRow.session_id == session_id, EventRow.kind == "artifact_write",
               EventRow.body["artifact"].as_string() == artifact,
               EventRow.body["revision"].as_integer() == revision,
               EventRow.body["content_hash"].as_string().is_not(None))
        .order_by(EventRow.seq.desc()).limit(1)).first()
    read = db.execute(
        select(EventRow.seq, EventRow.body[("binding", "content_hash")].as_string())
        .where(EventRow.session_id == session_id, EventRow.kind == "tool_result",
               EventRow.body[("binding", "artifact")].as_string() == artifact,
               EventRow.body[("binding", "revision")].as_integer() == revision,
               EventRow.body[("binding", "content_hash")].as_string().is_not(None))
        .order_by(EventRow.seq.desc()).limit(1)).first()
    found = [r for r in (write, read) if r is not None]
    return max(found, key=lambda r: r[0])[1] if found else None


def text_handle(body: dict[str, Any]) -> str:
    """The handle of the text a tool result brings into requests: its redacted ``view``
    when ingest redacted secrets from it, else its payload's."""
    return str(body.get("view") or body["handle"])


def event_from_row(row: EventRow, payloads: dict[str, str]) -> Event:
    body = row.body
    if row.kind == "message":
        return MessageEvent(
            seq=row.seq, event_id=row.event_id, role=body["role"], content=body.get("content") or "",
            handle=body["handle"], reasoning=body.get("reasoning"),
            tool_calls=tuple(ToolCall(c["call_id"], c["name"], c["arguments"]) for c in body.get("tool_calls") or []),
            redactions=tuple(body.get("redactions") or ()),
        )
    if row.kind == "tool_result":
        binding = body.get("binding")
        return ToolResultEvent(
            seq=row.seq, event_id=row.event_id, call_id=body["call_id"], payload=payloads[text_handle(body)],
            handle=body["handle"], exit_code=body.get("exit_code"),
            binding=Binding(**binding) if binding else None, conditions=dict(body.get("conditions") or {}),
            redactions=tuple(body.get("redactions") or ()),
        )
    if row.kind == "artifact_write":
        return ArtifactWriteEvent(seq=row.seq, event_id=row.event_id, artifact=body["artifact"],
                                  revision=body["revision"], content_hash=body.get("content_hash"))
    return StepEvent(seq=row.seq, event_id=row.event_id, text=body["text"])


def load_events(db: OrmSession, session_id: str, *, after_seq: int = 0, upto_seq: int | None = None) -> list[Event]:
    """The session's events with ``after_seq < seq <= upto_seq`` (all by default), in seq order."""
    query = select(EventRow).where(EventRow.session_id == session_id, EventRow.seq > after_seq)
    if upto_seq is not None:
        query = query.where(EventRow.seq <= upto_seq)
    rows = db.execute(query.order_by(EventRow.seq)).scalars().all()
    handles = [text_handle(r.body) for r in rows if r.kind == "tool_result"]
    payloads = get_payload_texts(db, handles)
    return [event_from_row(r, payloads) for r in rows]


def event_count(db: OrmSession, session_id: str) -> int:
    return int(db.execute(select(func.count()).select_from(EventRow).where(EventRow.session_id == session_id)).scalar_one())


# --- manifests ------------------------------------------------------------------------

def add_manifest(db: OrmSession, *, session_id: str, fmt: str, last_seq: int, request_sha256: str, tokens_total: int,
                 manifest: dict[str, Any]) -> int:
    row = ManifestRow(session_id=session_id, format=fmt, last_seq=last_seq, request_sha256=request_sha256,
                      tokens_total=tokens_total, manifest=manifest)
    db.add(row)
    db.flush()
    return row.id


def list_manifests(db: OrmSession, session_id: str, *, limit: int, before_id: int | None = None) -> list[ManifestRow]:
    """The session's manifests, newest first, at most ``limit``, with ids below ``before_id``."""
    query = select(ManifestRow).where(ManifestRow.session_id == session_id)
    if before_id is not None:
        query = query.where(ManifestRow.id < before_id)
    return list(db.execute(query.order_by(ManifestRow.id.desc()).limit(limit)).scalars())


def get_manifest(db: OrmSession, session_id: str, manifest_id: int) -> ManifestRow | None:
    row = db.get(ManifestRow, manifest_id)
    return row if row is not None and row.session_id == session_id else None


def advance_cut(db: OrmSession, session_id: str, cut_seq: int) -> None:
    db.execute(update(SessionRow).where(SessionRow.id == session_id, SessionRow.cut_seq < cut_seq).values(cut_seq=cut_seq))


# --- prefix states --------------------------------------------------------------------

def get_prefix_state(db: OrmSession, session_id: str, fmt: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    # a Core select of the two columns: no ORM object for a row that is replaced on every GET
    row = db.execute(select(PrefixStateRow.state, PrefixStateRow.layout)
                     .where(PrefixStateRow.session_id == session_id, PrefixStateRow.format == fmt)).first()
    return (row[0], row[1]) if row else None


def put_prefix_state(db: OrmSession, session_id: str, fmt: str, state: dict[str, Any], layout: dict[str, Any]) -> None:
    values = {"session_id": session_id, "format": fmt, "state": state, "layout": layout, "updated_at": utcnow()}
    insert = _upsert_insert(db)
    if insert is None:
        raise NotImplementedError(f"prefix states need PostgreSQL or SQLite, not {db.get_bind().dialect.name}")
    # an upsert: two concurrent GETs of one session must not collide on the primary key
    statement = insert(PrefixStateRow).values(**values)
    db.execute(statement.on_conflict_do_update(index_elements=["session_id", "format"],
                                               set_={"state": state, "layout": layout, "updated_at": values["updated_at"]}))
