"""ORM rows (SQLAlchemy 2). Rows never leave ``app/store``; repositories map them to domain values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso_utc(value: datetime) -> str:
    """A stored time as ISO 8601 with its UTC offset (``2026-12-01T17:00:00.011481+00:00``):
    every time is stored in UTC, but SQLite hands it back without a zone, which the API
    then printed zone-less on SQLite and with ``+00:00`` on PostgreSQL."""
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).isoformat()


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}
    if TYPE_CHECKING:  # every row class here maps a Table (SQLAlchemy types it as any FromClause)
        __table__: ClassVar[Table]


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_tenant_created", "tenant_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    profile: Mapped[str] = mapped_column(String(64))
    contract: Mapped[dict[str, Any]] = mapped_column(JSON)
    system: Mapped[str] = mapped_column(Text)
    tools: Mapped[list[Any]] = mapped_column(JSON)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    model: Mapped[str | None] = mapped_column(String(256), nullable=True, default=None)  # None: the profile's
    # a short human label (migration 0015_session_title): set at create, changed by PATCH; no request depends on it
    title: Mapped[str | None] = mapped_column(String(200), nullable=True, default=None)
    # the owning tenant (issue 12; migration 0008_tenancy backfilled existing sessions to "default")
    tenant_id: Mapped[str] = mapped_column(String(32), ForeignKey("tenants.id"), default="default")
    # bytes of the payloads this session's events posted, each counted every time (storage quota)
    stored_bytes: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # the parent session of a sub-agent's child session (issue 16, migration 0012_session_parent);
    # deleting a parent that still has children is refused (409), so the link never dangles
    parent_id: Mapped[str | None] = mapped_column(String(32), ForeignKey("sessions.id", name="fk_sessions_parent_id"),
                                                  nullable=True, default=None,
                                                  index=True)


class LayoutStateRow(Base):
    """A session's layout state (app/domain/state.py ``LayoutState``): written only by
    compare-and-set on ``version`` (migration 0005_layout_states replaced ``sessions.cut_seq``)."""

    __tablename__ = "layout_states"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    cut_seq: Mapped[int] = mapped_column(Integer, default=0)
    # invalidation's deferral (issue 11, migration 0007): change seqs whose tombstones wait for
    # the next trunk rewrite, and the latest change seq whose tombstones were shown
    deferred: Mapped[list[int]] = mapped_column(JSON, default=list)
    shown_upto: Mapped[int] = mapped_column(Integer, default=0)
    passes: Mapped[int] = mapped_column(Integer, default=0)
    # the progress record (migration 0009_progress_record) the state's fold point gives (select; seed 000 table 7), as JSON
    record: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class EventRow(Base):
    """Append-only event log: (session_id, seq) and (session_id, event_id) are unique."""

    __tablename__ = "events"
    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_events_session_seq"),
        UniqueConstraint("session_id", "event_id", name="uq_events_session_event_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    event_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(32))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    body_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class MessagePositionRow(Base):
    """One row per provider message posted through ``POST /v1/sessions/{id}/messages``
    (issue 14, migration 0011_message_positions): its ``position`` in the session's message
    stream (-1: the Anthropic top-level system prompt), the sha256 of what it mapped to
    (``app.wire.inbound.MappedMessage.fingerprint``: a re-post there is a no-op when equal,
    409 otherwise) and the seqs of the events it became (none for instructions)."""

    __tablename__ = "message_positions"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    sha256: Mapped[str] = mapped_column(String(64))
    seqs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ToolCallRow(Base):
    """One row per tool call declared by an assistant message: the seq of that message and,
    once posted, the seq of its one result. The primary key (session_id, call_id) makes a
    call id unique in its session; ``result_seq`` is one column, so a call has at most one
    result, and (session_id, result_seq) is unique, so an event answers at most one call.
    Ingest checks a batch's call ids against this table only (O(batch), issue 9 item 5)."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        UniqueConstraint("session_id", "result_seq", name="uq_tool_calls_session_result_seq"),
        CheckConstraint("result_seq IS NULL OR result_seq > call_seq", name="ck_tool_calls_result_after_call"),
    )

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    call_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    call_seq: Mapped[int] = mapped_column(Integer)
    result_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)


class PayloadRow(Base):
    """Raw payloads, content-addressed by sha256 of their bytes, stored once."""

    __tablename__ = "payloads"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    # exact token count per tokenizer id ({id: tokens}), null until counted (issue 9 item 7)
    token_counts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ArtifactRow(Base):
    """Revision counter per artifact of a session (0 before the first write), and the
    content hash known for its current revision (migration 0013_artifact_content_hash:
    given by the write that made it, or adopted from the first whole read after it; NULL
    when unknown). A row at revision 0 only holds the hash of a never-written artifact."""

    __tablename__ = "artifacts"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    artifact: Mapped[str] = mapped_column(String(1024), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, default=0)
    content_hash: Mapped[str | None] = mapped_column(String(256), nullable=True)


class ManifestRow(Base):
    """The persisted assembly manifest of every served request (seed 003), stored as a
    delta of the session's previous manifest in the same format, with a keyframe (the whole
    manifest) every ``KEYFRAME_EVERY`` manifests (app/store/repository.py)."""

    __tablename__ = "manifests"
    __table_args__ = (Index("ix_manifests_session", "session_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"))
    format: Mapped[str] = mapped_column(String(16))
    last_seq: Mapped[int] = mapped_column(Integer)
    request_sha256: Mapped[str] = mapped_column(String(64))
    tokens_total: Mapped[int] = mapped_column(Integer)
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # rows stored before migration 0006_manifest_deltas
    # zlib-compressed JSON: a keyframe (base_id NULL) is the whole manifest, a delta an
    # app/store/delta.py delta of base_id's
    data: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    base_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), nullable=True)
    keyframe_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), nullable=True)
    depth: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # deltas since the keyframe
    planner_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PrefixStateRow(Base):
    """Per session and wire format, what is kept of the last request served in it: its
    length, fingerprint, what rebuilds it and its manifest's id (app/domain/state.py
    ``PreviousRequest``; migration 0006_manifest_deltas replaced the whole block digests and layout)."""

    __tablename__ = "prefix_states"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    format: Mapped[str] = mapped_column(String(16), primary_key=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)  # PreviousRequest.to_json(): ~200 bytes
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class TenantRow(Base):
    """A tenant: the principal that owns sessions (issue 12). ``default`` always exists."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiKeyRow(Base):
    """An API key: ``id`` is its public prefix, ``digest`` the SHA-256 (hex) of its secret part;
    the secret itself is never stored (app/services/tenancy.py)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32), ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    digest: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class UiSessionEndRow(Base):
    """An inspector session ended by its logout (issue 15): the random ``nonce`` its signed
    cookie carries, refused until ``expires_at`` (when the cookie would have expired anyway;
    rows past it are deleted at the next logout). Shared by every worker and replica."""

    __tablename__ = "ui_session_ends"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class PayloadOwnerRow(Base):
    """Ownership link: session ``session_id`` (of tenant ``tenant_id``) posted payload ``sha256``
    or ctxd derived it for that session's requests. Payloads stay deduplicated by content; a
    handle is readable only through a link in the caller's scope. The foreign key to
    ``payloads`` makes a link pin its payload (a session delete cannot remove a payload that
    a concurrent insert just linked)."""

    __tablename__ = "payload_owners"
    __table_args__ = (Index("ix_payload_owners_tenant", "tenant_id", "sha256"),
                      Index("ix_payload_owners_session", "session_id"))

    sha256: Mapped[str] = mapped_column(String(64), ForeignKey("payloads.sha256"), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(32))


class EventTextRow(Base):
    """The searchable text of an event (issue 14 item 3, app/domain/recall.py
    ``searchable_texts``): one row per field (a tool result's rendered payload, a message's
    content, reasoning, tool calls, ...), written at ingest, backfilled by migration
    0010_event_search. Candidate rows are found through a trigram index the migration builds
    beside it: PostgreSQL ``pg_trgm`` (GIN, ``ILIKE``), SQLite the FTS5 ``trigram`` table
    ``event_texts_fts`` (kept in step by triggers)."""

    __tablename__ = "event_texts"
    __table_args__ = (Index("ix_event_texts_session_seq", "session_id", "seq"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    field: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)
