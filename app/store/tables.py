"""ORM rows (SQLAlchemy 2). Rows never leave ``app/store``; repositories map them to domain values."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    profile: Mapped[str] = mapped_column(String(64))
    contract: Mapped[dict[str, Any]] = mapped_column(JSON)
    system: Mapped[str] = mapped_column(Text)
    tools: Mapped[list[Any]] = mapped_column(JSON)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LayoutStateRow(Base):
    """A session's layout state (app/domain/state.py ``LayoutState``): written only by
    compare-and-set on ``version`` (migration 0003 replaced ``sessions.cut_seq``)."""

    __tablename__ = "layout_states"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    cut_seq: Mapped[int] = mapped_column(Integer, default=0)
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


class PayloadRow(Base):
    """Raw payloads, content-addressed by sha256 of their bytes, stored once."""

    __tablename__ = "payloads"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ArtifactRow(Base):
    """Revision counter per artifact of a session (0 before the first write)."""

    __tablename__ = "artifacts"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    artifact: Mapped[str] = mapped_column(String(1024), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, default=0)


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
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # rows stored before migration 0004
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
    ``PreviousRequest``; migration 0004 replaced the whole block digests and layout)."""

    __tablename__ = "prefix_states"

    session_id: Mapped[str] = mapped_column(String(32), ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    format: Mapped[str] = mapped_column(String(16), primary_key=True)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)  # PreviousRequest.to_json(): ~200 bytes
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)
