"""Repositories: ORM rows <-> domain values. Services call these; they never commit."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, cast

import orjson
from sqlalchemy import JSON, Connection, CursorResult, Result, Row, bindparam, func, select, update
from sqlalchemy import insert as core_insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session as OrmSession

from app.domain.manifest import Manifest, ManifestSummary
from app.domain.state import LayoutState, PreviousRequest, SessionState
from app.domain.types import (
    ArtifactWriteEvent,
    Binding,
    ChildConclusionEvent,
    ConclusionEvent,
    Constraint,
    Contract,
    DocumentEvent,
    Event,
    HypothesisEvent,
    MessageEvent,
    ObligationEvent,
    PlanEvent,
    Session,
    StepEvent,
    ThinkingBlock,
    ToolCall,
    ToolResultEvent,
)
from app.store import delta, json_parts
from app.store.db import json_dumps, json_loads
from app.store.tables import (
    ArtifactRow,
    EventRow,
    LayoutStateRow,
    ManifestRow,
    PayloadRow,
    PrefixStateRow,
    SessionRow,
    ToolCallRow,
    iso_utc,
    utcnow,
)

#: What the repositories run statements on: an ORM session, or (on the GET path, which
#: sends only Core statements) the session's Core connection, skipping the ORM's layers.
Db = OrmSession | Connection


def core(db: Db) -> Connection:
    """The Core connection of ``db`` (its transaction begins here if it has not yet)."""
    return db if isinstance(db, Connection) else db.connection()


def rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched (-1 when the driver cannot tell). ``Session.execute``
    returns the driver's CursorResult, typed as the Result of any statement."""
    return cast(CursorResult[Any], result).rowcount


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- sessions -------------------------------------------------------------------------

def _session(session_id: str, profile: str, contract: dict[str, Any], system: str, tools: list[Any],
             meta: dict[str, Any] | None) -> Session:
    return Session(
        id=session_id,
        profile=profile,
        contract=Contract(
            goal=contract["goal"],
            constraints=tuple(Constraint(c["id"], c["text"]) for c in contract.get("constraints", [])),
            contract_version=int(contract.get("contract_version", 1)),
        ),
        system=system,
        tools=tuple(tools),
        metadata=dict(meta or {}),
    )


def session_from_row(row: SessionRow) -> Session:
    return _session(row.id, row.profile, row.contract, row.system, row.tools, row.meta)


# The GET path's statements are built once (the hot path then skips building a statement
# and its cache key on every call); values are bound per call.
_SESSION_STATE = (
    select(SessionRow.id, SessionRow.profile, SessionRow.contract, SessionRow.system, SessionRow.tools,
           SessionRow.meta, SessionRow.model, SessionRow.last_seq, LayoutStateRow.version, LayoutStateRow.cut_seq,
           LayoutStateRow.deferred, LayoutStateRow.shown_upto, LayoutStateRow.passes,
           PrefixStateRow.state, SessionRow.tenant_id)
    .outerjoin(LayoutStateRow, LayoutStateRow.session_id == SessionRow.id)
    .outerjoin(PrefixStateRow, (PrefixStateRow.session_id == SessionRow.id) & (PrefixStateRow.format == bindparam("fmt")))
    .where(SessionRow.id == bindparam("sid"))
)


def load_session_state(db: Db, session_id: str,
                       fmt: str | None = None) -> tuple[SessionState, PreviousRequest | None] | None:
    """The session (with its tenant), its last seq and its layout state and, with ``fmt``,
    what it keeps of its last request in that format: one statement. None when there is no such session."""
    row = db.execute(_SESSION_STATE, {"sid": session_id, "fmt": fmt}).first()
    if row is None:
        return None
    sid, profile, contract, system, tools, meta, model, last_seq, version, cut_seq, deferred, shown_upto, passes,\
        previous, tenant_id = row
    layout = LayoutState(version=int(version or 0), cut_seq=int(cut_seq or 0),
                         deferred=tuple(sorted(int(s) for s in deferred or ())), shown_upto=int(shown_upto or 0),
                         passes=int(passes or 0))
    state = SessionState(session=_session(sid, profile, contract, system, tools, meta), last_seq=int(last_seq),
                         layout=layout, model=model, tenant_id=tenant_id)
    return state, previous_request(previous)


def add_session(db: OrmSession, *, session_id: str, profile: str, contract: dict[str, Any], system: str,
                tools: list[dict[str, Any]], metadata: dict[str, Any], model: str | None = None,
                tenant_id: str = "default", parent_id: str | None = None, title: str | None = None) -> SessionRow:
    row = SessionRow(id=session_id, profile=profile, contract=contract, system=system, tools=tools,
                     meta=metadata, model=model, last_seq=0, tenant_id=tenant_id, parent_id=parent_id, title=title)
    db.add(row)
    db.flush()  # the session row first: the layout state's foreign key names it
    db.add(LayoutStateRow(session_id=session_id, version=0, cut_seq=0, deferred=[], shown_upto=0))
    db.flush()
    return row


def advance_session(row: SessionRow, *, last_seq: int, added_bytes: int = 0) -> None:
    """The session's new last seq, and ``added_bytes`` more stored (its new payloads, as if
    not deduplicated: the tenant's storage quota counts them)."""
    if added_bytes:
        row.stored_bytes = (row.stored_bytes or 0) + added_bytes
    row.last_seq = last_seq


def set_session_fields(row: SessionRow, **values: Any) -> None:
    """Change what may change of a session after its create (``title``, ``system``)."""
    for name, value in values.items():
        if name not in ("title", "system"):
            raise ValueError(f"a session's {name} does not change after its create")
        setattr(row, name, value)


def get_session_row(db: OrmSession, session_id: str, *, lock: bool = False) -> SessionRow | None:
    if lock:
        # An UPDATE first takes the write lock on SQLite and the row lock on PostgreSQL, so
        # concurrent batches of one session serialise instead of racing for seq numbers.
        db.execute(update(SessionRow).where(SessionRow.id == session_id).values(last_seq=SessionRow.last_seq))
        return db.execute(select(SessionRow).where(SessionRow.id == session_id).with_for_update()).scalar_one_or_none()
    return db.get(SessionRow, session_id)


# --- payloads -------------------------------------------------------------------------

def dialect_name(db: OrmSession | Connection) -> str:
    """The database dialect's name (sqlite, postgresql) of an ORM session or a Core connection."""
    return db.dialect.name if isinstance(db, Connection) else db.get_bind().dialect.name


def _upsert_insert(db: OrmSession | Connection) -> Any:
    """The dialect's ``insert`` construct with ON CONFLICT support (PostgreSQL, SQLite),
    or None for another dialect."""
    dialect = dialect_name(db)
    return pg_insert if dialect == "postgresql" else sqlite_insert if dialect == "sqlite" else None


def put_payloads(db: Db, payloads: Mapping[str, bytes]) -> None:
    """Store each payload of ``payloads`` (by its sha256 hex, :func:`sha256_hex`) once: one
    multi-row insert that skips those already stored (PostgreSQL and SQLite)."""
    insert = _upsert_insert(db)
    rows = [{"sha256": h, "size": len(d), "data": d} for h, d in payloads.items()]
    if insert is None:  # pragma: no cover - PostgreSQL and SQLite only
        for row in rows:
            if core(db).execute(select(PayloadRow.sha256).where(PayloadRow.sha256 == row["sha256"])).first() is None:
                core(db).execute(core_insert(PayloadRow.__table__).values(**row))
        return
    for start in range(0, len(rows), _PAYLOAD_ROWS):
        db.execute(insert(PayloadRow).values(rows[start:start + _PAYLOAD_ROWS])
                   .on_conflict_do_nothing(index_elements=["sha256"]))


_PAYLOAD_ROWS = 200  # rows per insert of put_payloads (4 parameters each; within SQLite's and psycopg's limits)


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


# built once (a GET's load runs it for its newest outputs): the expanding IN is compiled once
_TOKEN_COUNTS = select(PayloadRow.sha256, PayloadRow.token_counts).where(
    PayloadRow.sha256.in_(bindparam("handles", expanding=True)))


def payload_token_counts(db: Db, handles: Iterable[str], tokenizer_id: str) -> dict[str, int | None]:
    """handle -> the stored token count of that payload under ``tokenizer_id`` (None when
    not counted yet), for the given handles that exist. Chunks of 500 handles."""
    wanted = sorted(set(handles))
    out: dict[str, int | None] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for sha, counts in db.execute(_TOKEN_COUNTS, {"handles": chunk}):
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


def message_tool_calls(db: OrmSession, session_id: str, *, upto_seq: int) -> list[dict[str, Any]]:
    """The tool calls (``{call_id, name, arguments}``, as stored: redacted) of the session's
    message events with seq <= ``upto_seq``, in seq order: what a rebuild of the session's
    shell inference state replays (app/services/shell_inference.py)."""
    rows = db.execute(select(EventRow.body).where(EventRow.session_id == session_id, EventRow.kind == "message",
                                                  EventRow.seq <= upto_seq).order_by(EventRow.seq))
    return [dict(c) for (body,) in rows for c in (body or {}).get("tool_calls") or []]


def add_tool_calls(db: OrmSession, session_id: str, calls: Sequence[tuple[str, int, int | None]]) -> None:
    """Record new tool calls: (call id, seq of the declaring message, seq of its result or
    None). The caller has checked that no id is already in the session."""
    if calls:
        db.execute(core_insert(ToolCallRow.__table__), [
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
    if (matched := rowcount(result)) not in (-1, len(answers)):
        raise RuntimeError(f"tool calls of session {session_id!r}: {len(answers)} results, {matched} calls answered")


def append_event(db: OrmSession, *, session_id: str, seq: int, event_id: str, kind: str, body: dict[str, Any],
                 body_sha256: str) -> EventRow:
    row = EventRow(session_id=session_id, seq=seq, event_id=event_id, kind=kind, body=body, body_sha256=body_sha256)
    db.add(row)
    return row


def bump_artifact(db: OrmSession, session_id: str, artifact: str, content_hash: str | None = None) -> int:
    """The artifact's next revision (a write, or an external change a read revealed), with
    the hash known for it (None: its content is unknown). Returns the new revision."""
    row = db.get(ArtifactRow, (session_id, artifact))
    if row is None:
        row = ArtifactRow(session_id=session_id, artifact=artifact, revision=0)
        db.add(row)
    row.revision += 1
    row.content_hash = content_hash
    db.flush()
    return row.revision


def artifact_state(db: OrmSession, session_id: str, artifact: str) -> tuple[int, str | None]:
    """(current revision, hash known for it or None): one primary-key read."""
    row = db.get(ArtifactRow, (session_id, artifact))
    return (row.revision, row.content_hash) if row else (0, None)


def record_artifact_hash(db: OrmSession, session_id: str, artifact: str, content_hash: str) -> None:
    """Adopt ``content_hash`` as the known hash of the artifact's current revision (a whole
    read after a write of unknown content, or the first read of a never-written artifact)."""
    row = db.get(ArtifactRow, (session_id, artifact))
    if row is None:
        db.add(ArtifactRow(session_id=session_id, artifact=artifact, revision=0, content_hash=content_hash))
    else:
        row.content_hash = content_hash
    db.flush()


def artifact_revision(db: OrmSession, session_id: str, artifact: str) -> int:
    row = db.get(ArtifactRow, (session_id, artifact))
    return row.revision if row else 0


def artifact_content_hash(db: OrmSession, session_id: str, artifact: str, revision: int) -> str | None:
    """The content hash known for ``revision`` of ``artifact`` when it is the current one
    (given by the ``artifact_write`` that made it, or adopted from the first whole read
    after it: :class:`app.domain.invalidation.ArtifactLedger`'s rules); None otherwise."""
    current, known = artifact_state(db, session_id, artifact)
    return known if current == revision else None


def text_handle(body: dict[str, Any]) -> str:
    """The handle of the text a tool result brings into requests: its redacted ``view``
    when ingest redacted secrets from it, else its payload's."""
    return str(body.get("view") or body["handle"])


class _AppendedRow(NamedTuple):
    """An event row as read back (see :func:`appended_events`)."""
    seq: int
    event_id: str
    kind: str
    body: dict[str, Any]
    created_at: datetime | None


def event_from_row(row: EventRow | Row[Any] | _AppendedRow, payloads: dict[str, str]) -> Event:
    """The domain event of an event row (an ORM row or a Core row with ``seq, event_id,
    kind, body, created_at``); ``payloads``: handle -> text of the tool results' texts."""
    body = row.body
    created = row.created_at
    at = (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp() if created else None
    if row.kind == "message":
        return MessageEvent(
            seq=row.seq, event_id=row.event_id, role=body["role"], content=body.get("content") or "",
            handle=body["handle"], reasoning=body.get("reasoning"),
            tool_calls=tuple(ToolCall(c["call_id"], c["name"], c["arguments"]) for c in body.get("tool_calls") or []),
            at=at,
            redactions=tuple(body.get("redactions") or ()),
            thinking=tuple(thinking_from_json(b) for b in body.get("thinking") or ()),
        )
    if row.kind == "tool_result":
        binding = body.get("binding")
        return ToolResultEvent(
            seq=row.seq, event_id=row.event_id, call_id=body["call_id"], payload=payloads[text_handle(body)],
            handle=body["handle"], exit_code=body.get("exit_code"),
            binding=binding_from_json(binding) if binding else None, conditions=dict(body.get("conditions") or {}),
            at=at,
            redactions=tuple(body.get("redactions") or ()),
        )
    if row.kind == "artifact_write":
        return ArtifactWriteEvent(seq=row.seq, event_id=row.event_id, artifact=body["artifact"],
                                  revision=body["revision"], content_hash=body.get("content_hash"), at=at)
    if row.kind == "hypothesis":
        return HypothesisEvent(seq=row.seq, event_id=row.event_id, key=body["key"], text=body["text"],
                               status=body["status"], depends_on=tuple(body.get("depends_on") or ()))
    if row.kind == "obligation":
        return ObligationEvent(seq=row.seq, event_id=row.event_id, key=body["key"], text=body["text"],
                               status=body["status"])
    if row.kind == "plan":
        return PlanEvent(seq=row.seq, event_id=row.event_id, text=body["text"], version=body["version"],
                         handle=body["handle"], at=at)
    if row.kind == "document":
        return DocumentEvent(seq=row.seq, event_id=row.event_id, key=body["key"], source=body["source"],
                             text=body["text"], handle=body["handle"], at=at)
    if row.kind == "conclusion":
        return ConclusionEvent(seq=row.seq, event_id=row.event_id, text=body["text"], handle=body["handle"],
                               parent_seq=body["parent_seq"], at=at)
    if row.kind == "child_conclusion":
        return ChildConclusionEvent(seq=row.seq, event_id=row.event_id, child=body["child"],
                                    child_seq=body["child_seq"], text=body["text"], handle=body["handle"], at=at)
    return StepEvent(seq=row.seq, event_id=row.event_id, text=body["text"], at=at)


def thinking_from_json(data: dict[str, Any]) -> ThinkingBlock:
    """A stored Anthropic thinking block (``{"type", "thinking", "signature"}`` or
    ``{"type": "redacted_thinking", "data"}``) as a domain value."""
    if data.get("type") == "redacted_thinking":
        return ThinkingBlock(kind="redacted_thinking", text=str(data.get("data", "")))
    return ThinkingBlock(kind="thinking", text=str(data.get("thinking", "")), signature=data.get("signature"))


def plan_versions(db: OrmSession, session_id: str) -> int:
    """How many plan versions the session has stored (the next one is this + 1; issue 16)."""
    return int(db.execute(select(func.count()).select_from(EventRow)
                          .where(EventRow.session_id == session_id, EventRow.kind == "plan")).scalar_one())


def child_ids(db: OrmSession, session_id: str) -> list[str]:
    """The ids of the session's child sessions (issue 16), oldest first."""
    return list(db.execute(select(SessionRow.id).where(SessionRow.parent_id == session_id)
                           .order_by(SessionRow.created_at, SessionRow.id)).scalars())


def binding_from_json(data: dict[str, Any]) -> Binding:
    """A stored binding (eq. 5) as a domain value; keys the value does not hold (e.g.
    ``external_change``) stay in the stored body only."""
    revision = data.get("revision")
    return Binding(artifact=data["artifact"], kind=data.get("kind") or "file",
                   revision=int(revision) if revision is not None else -1, range=data.get("range"),
                   content_hash=data.get("content_hash"), ttl_seconds=data.get("ttl_seconds"),
                   fetched_at=data.get("fetched_at"))


_EVENTS = (
    select(EventRow.seq, EventRow.event_id, EventRow.kind, EventRow.body, EventRow.created_at)
    .where(EventRow.session_id == bindparam("sid"), EventRow.seq > bindparam("after"), EventRow.seq <= bindparam("upto"))
    .order_by(EventRow.seq)
)
_PAYLOADS = select(PayloadRow.sha256, PayloadRow.data).where(PayloadRow.sha256.in_(bindparam("handles", expanding=True)))


def load_events(db: Db, session_id: str, *, after_seq: int = 0, upto_seq: int | None = None) -> list[Event]:
    """The session's events with ``after_seq < seq <= upto_seq`` (all by default), in seq
    order, tool results with their payloads: one statement for the events, one more for
    the payloads when there are tool results. (The payload handle is not taken out of the
    JSON body in SQL: PostgreSQL's ``json`` operators refuse a document holding a NUL
    escape anywhere, which message text and payloads may hold.)"""
    params = {"sid": session_id, "after": after_seq, "upto": upto_seq if upto_seq is not None else 2**31 - 1}
    rows = db.execute(_EVENTS, params).all()
    handles = sorted({text_handle(row.body) for row in rows if row.kind == "tool_result"})
    payloads: dict[str, str] = {}
    if handles:
        payloads = {sha: bytes(data).decode("utf-8") for sha, data in db.execute(_PAYLOADS, {"handles": handles})}
    return [event_from_row(row, payloads) for row in rows]


def appended_events(rows: Sequence[EventRow], texts: Mapping[str, str]) -> list[Event]:
    """The domain events of event rows a transaction appended (flushed, so ``created_at``
    is set), equal to what :func:`load_events` reads back once committed: each body goes
    through the JSON columns' serializer and deserializer (app/store/db.py), as the
    database returns it. ``texts``: the tool results' texts by handle (``view`` or
    ``handle``), as stored."""
    payloads = dict(texts)
    return [event_from_row(_AppendedRow(row.seq, row.event_id, row.kind, json_loads(json_dumps(row.body)),
                                        row.created_at), payloads) for row in rows]


def event_count(db: OrmSession, session_id: str) -> int:
    return int(db.execute(select(func.count()).select_from(EventRow).where(EventRow.session_id == session_id)).scalar_one())


# --- manifests ------------------------------------------------------------------------

def _pack(value: Any) -> bytes:
    """A stored manifest (or delta): JSON, zlib-compressed (a manifest's JSON repeats its
    keys and reasons on every item, and compresses about 6-fold)."""
    return _compress(orjson.dumps(value))


def _compress(data: bytes) -> bytes:
    return zlib.compress(data, 6)


def _unpack(data: bytes) -> Any:
    return orjson.loads(zlib.decompress(data))


KEYFRAME_EVERY = 16  # a manifest stored whole at least every 16 manifests of a session and format


@dataclass(frozen=True)
class StoredManifest:
    """A stored manifest as the next one's delta base: its id, its JSON (without ``id``),
    the deltas since its keyframe (``depth``) and that keyframe's id. When it was stored by
    this process (None when read back): ``source``, the manifest ``data`` is the JSON of, and
    ``parts``, that JSON's bytes by parts (app/store/json_parts.py), from which the next
    manifest reuses what it shares."""

    id: int
    data: dict[str, Any] = field(repr=False)
    depth: int = 0
    keyframe_id: int | None = None
    source: Manifest | None = field(default=None, repr=False, compare=False)
    parts: json_parts.Parts | None = field(default=None, repr=False, compare=False)

    @property
    def chain_start(self) -> int:
        return self.keyframe_id if self.keyframe_id is not None else self.id

    def json_bytes(self) -> bytes:
        """The manifest as served: ``data`` with ``id`` last, orjson's compact JSON (joined
        from ``parts`` when at hand: the same bytes)."""
        if self.parts is None:
            return orjson.dumps(self.data | {"id": self.id})
        return json_parts.join(self.parts, {"id": self.id})


_MANIFEST_COLUMNS = ("session_id", "format", "last_seq", "request_sha256", "tokens_total", "planner_version",
                     "created_at", "data", "depth", "base_id", "keyframe_id")
# on the tables, not the ORM classes: plain Core statements with bound values (no ORM bulk path)
_MANIFEST_INSERT = core_insert(ManifestRow.__table__).returning(ManifestRow.id)
_MANIFEST_INSERT_CHECKED = core_insert(ManifestRow.__table__).from_select(
    list(_MANIFEST_COLUMNS),
    select(*[bindparam(c, type_=ManifestRow.__table__.c[c].type).label(c) for c in _MANIFEST_COLUMNS]).where(
        select(LayoutStateRow.session_id).where(LayoutStateRow.session_id == bindparam("sid"),
                                                LayoutStateRow.version == bindparam("layout_version")).exists()),
).returning(ManifestRow.id)


def add_manifest(db: Db, manifest: Manifest, *, base: StoredManifest | None = None,
                 planner_version: int | None = None, layout_version: int | None = None) -> StoredManifest | None:
    """Store ``manifest`` (its ``id`` is ignored): as a delta of ``base`` (the session's
    previous manifest in the same format), or whole when there is none or ``base`` is
    ``KEYFRAME_EVERY - 1`` deltas from its keyframe. Returns it as the next base.

    ``layout_version``: store it only if the session's layout state still has this
    version (one ``INSERT ... SELECT ... WHERE EXISTS``); None when it has not (nothing
    stored: another worker moved the layout state).

    The JSON is serialized by parts, reusing the bytes of what ``base`` shares (its
    ``parts``, when it was stored by this process); its top-level values whose bytes did
    not change are not walked again by the delta. The stored bytes are those of
    ``orjson.dumps`` of the whole JSON (a keyframe) or of :func:`delta.diff` (a delta)."""
    data = manifest.to_json(previous=(base.source, base.data) if base is not None and base.source is not None else None)
    data.pop("id", None)
    parts = json_parts.encode(data, base.data if base is not None else None, base.parts if base is not None else None)
    values: dict[str, Any] = {"session_id": manifest.session_id, "format": manifest.format,
                              "last_seq": manifest.last_seq, "request_sha256": manifest.request_sha256,
                              "tokens_total": manifest.tokens.total, "planner_version": planner_version,
                              "created_at": utcnow()}
    if base is None or base.depth + 1 >= KEYFRAME_EVERY:
        values |= {"data": _compress(json_parts.join(parts)), "depth": 0, "base_id": None, "keyframe_id": None}
    else:
        unchanged = json_parts.unchanged(base.parts, parts) if base.parts is not None else frozenset()
        values |= {"data": _pack(delta.diff(base.data, data, unchanged=unchanged) or {"{": {}}),
                   "depth": base.depth + 1, "base_id": base.id, "keyframe_id": base.chain_start}
    # a Core insert (no ORM object for a row that is never read back as one)
    if layout_version is None:
        new_id = db.execute(_MANIFEST_INSERT, values).scalar_one_or_none()
    else:
        new_id = db.execute(_MANIFEST_INSERT_CHECKED, values | {"sid": manifest.session_id,
                                                               "layout_version": layout_version}).scalar_one_or_none()
    if new_id is None:
        return None
    return StoredManifest(id=int(new_id), data=data, depth=values["depth"], keyframe_id=values["keyframe_id"],
                          source=manifest, parts=parts)


def load_manifest(db: Db, session_id: str, manifest_id: int) -> StoredManifest | None:
    """The stored manifest ``manifest_id`` of ``session_id``, rebuilt from its keyframe and
    deltas (two statements), or None if absent or another session's."""
    head = db.execute(select(ManifestRow.format, ManifestRow.manifest, ManifestRow.data, ManifestRow.base_id,
                             ManifestRow.keyframe_id, ManifestRow.depth)
                      .where(ManifestRow.id == manifest_id, ManifestRow.session_id == session_id)).first()
    if head is None:
        return None
    fmt, old, packed, base_id, keyframe_id, depth = head
    data = _unpack(packed) if packed is not None else old
    if base_id is not None:
        start = keyframe_id if keyframe_id is not None else base_id
        rows = {r.id: (r.base_id, _unpack(r.data) if r.data is not None else r.manifest) for r in db.execute(
            select(ManifestRow.id, ManifestRow.base_id, ManifestRow.manifest, ManifestRow.data)
            .where(ManifestRow.session_id == session_id, ManifestRow.format == fmt,
                   ManifestRow.id >= start, ManifestRow.id < manifest_id))}
        chain = [data]
        while base_id is not None:
            base_id, stored = rows[base_id]
            chain.append(stored)
        data = chain.pop()
        while chain:
            data = delta.apply(data, chain.pop())
    return StoredManifest(id=manifest_id, data=data, depth=int(depth or 0), keyframe_id=keyframe_id)


def list_manifests(db: OrmSession, session_id: str, *, limit: int, before_id: int | None = None) -> list[ManifestSummary]:
    """The session's manifests, newest first, at most ``limit``, with ids below ``before_id``
    (summary columns only: the manifests themselves are not read)."""
    query = select(ManifestRow.id, ManifestRow.format, ManifestRow.last_seq, ManifestRow.request_sha256,
                   ManifestRow.tokens_total, ManifestRow.created_at).where(ManifestRow.session_id == session_id)
    if before_id is not None:
        query = query.where(ManifestRow.id < before_id)
    return [ManifestSummary(id=r.id, format=r.format, last_seq=r.last_seq, request_sha256=r.request_sha256,
                            tokens_total=r.tokens_total, created_at=iso_utc(r.created_at))
            for r in db.execute(query.order_by(ManifestRow.id.desc()).limit(limit))]


def load_manifests(db: Db, session_id: str, manifest_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The stored manifests ``manifest_ids`` of ``session_id`` as JSON (with ``id``), each
    rebuilt once: the rows from the oldest keyframe they need on are read in one statement
    and decoded in id order, every delta applied to its base's already rebuilt JSON (so N
    manifests cost one pass over at most N + ``KEYFRAME_EVERY`` rows, not N chains).
    Ids that are absent or another session's are left out."""
    wanted = set(manifest_ids)
    if not wanted:
        return {}
    heads = db.execute(select(ManifestRow.id, ManifestRow.keyframe_id, ManifestRow.base_id)
                       .where(ManifestRow.session_id == session_id, ManifestRow.id.in_(sorted(wanted)))).all()
    if not heads:
        return {}
    start = min(k if k is not None else (b if b is not None else i) for i, k, b in heads)
    rebuilt: dict[int, Any] = {}
    for row in db.execute(select(ManifestRow.id, ManifestRow.base_id, ManifestRow.manifest, ManifestRow.data)
                          .where(ManifestRow.session_id == session_id, ManifestRow.id >= start,
                                 ManifestRow.id <= max(wanted)).order_by(ManifestRow.id)):
        stored = _unpack(row.data) if row.data is not None else row.manifest
        if row.base_id is None:
            rebuilt[row.id] = stored
        elif row.base_id in rebuilt:
            rebuilt[row.id] = delta.apply(rebuilt[row.base_id], stored)
        else:  # its chain starts before ``start``: not one of those asked for (their chains are all read)
            continue
    return {i: rebuilt[i] | {"id": i} for i in sorted(wanted) if i in rebuilt}


def count_manifests(db: Db, session_id: str, *, before_id: int | None = None) -> int:
    """How many manifests the session has stored (with ids below ``before_id`` when given)."""
    query = select(func.count()).select_from(ManifestRow).where(ManifestRow.session_id == session_id)
    if before_id is not None:
        query = query.where(ManifestRow.id < before_id)
    return int(db.execute(query).scalar_one())


def get_manifest(db: OrmSession, session_id: str, manifest_id: int) -> Manifest | None:
    """The stored manifest ``manifest_id`` of ``session_id`` exactly as it was served
    (None if absent or another session's)."""
    stored = load_manifest(db, session_id, manifest_id)
    return None if stored is None else Manifest.from_json(stored.data | {"id": stored.id})


# --- layout states --------------------------------------------------------------------

_LAYOUT_CAS = (update(LayoutStateRow.__table__)
               .where(LayoutStateRow.session_id == bindparam("sid"), LayoutStateRow.version == bindparam("expected"))
               .values(version=bindparam("new_version"), cut_seq=bindparam("new_cut"),
                       deferred=bindparam("new_deferred", type_=JSON), shown_upto=bindparam("new_shown"),
                       passes=bindparam("passes"), updated_at=bindparam("now")))
_LAYOUT_CAS_RECORD = _LAYOUT_CAS.values(record=bindparam("record", type_=JSON()))


def compare_and_set_layout(db: Db, session_id: str, expected: LayoutState, new: LayoutState, *,
                           record: dict[str, Any] | None = None) -> bool:
    """Write ``new`` (with ``record``, the progress record its fold point gives, when
    given) if the stored layout state is still ``expected`` (same version); True when
    written. Another worker's change in between makes it False."""
    params = {"sid": session_id, "expected": expected.version, "new_version": new.version, "new_cut": new.cut_seq,
              "new_deferred": list(new.deferred), "new_shown": new.shown_upto, "passes": new.passes, "now": utcnow()}
    if record is not None:
        done = db.execute(_LAYOUT_CAS_RECORD, params | {"record": record})
    else:
        done = db.execute(_LAYOUT_CAS, params)
    return rowcount(done) == 1


def load_record(db: Db, session_id: str) -> tuple[int, int, dict[str, Any] | None] | None:
    """``(cut_seq, passes, record JSON or None)`` of the session's layout state; None
    without one."""
    row = db.execute(select(LayoutStateRow.cut_seq, LayoutStateRow.passes, LayoutStateRow.record)
                     .where(LayoutStateRow.session_id == session_id)).first()
    return None if row is None else (int(row[0]), int(row[1] or 0), row[2])


# --- prefix states --------------------------------------------------------------------

def previous_request(state: dict[str, Any] | None) -> PreviousRequest | None:
    """A stored prefix-state record as a value (None if absent or unreadable: the next
    request is then reported as the session's first in that format)."""
    if state is None:
        return None
    try:
        return PreviousRequest.from_json(state)
    except (ValueError, KeyError, TypeError):
        return None


def _prefix_upsert(insert: Any) -> Any:
    statement = insert(PrefixStateRow.__table__)
    # an upsert: two concurrent GETs of one session must not collide on the primary key
    return statement.on_conflict_do_update(index_elements=["session_id", "format"],
                                           set_={"state": statement.excluded.state,
                                                 "updated_at": statement.excluded.updated_at})


_PREFIX_UPSERT = {"sqlite": _prefix_upsert(sqlite_insert), "postgresql": _prefix_upsert(pg_insert)}


def put_previous_request(db: Db, session_id: str, fmt: str, previous: PreviousRequest) -> None:
    statement = _PREFIX_UPSERT.get(dialect_name(db))
    if statement is None:
        raise NotImplementedError(f"prefix states need PostgreSQL or SQLite, not {dialect_name(db)}")
    db.execute(statement, {"session_id": session_id, "format": fmt, "state": previous.to_json(), "updated_at": utcnow()})
