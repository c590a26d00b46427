"""Tenancy storage (issue 12): tenants, API keys, payload ownership links, session listing
and deletion. Rows never leave ``app/store``; services call these and never commit."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import and_, delete, exists, func, or_, select, update
from sqlalchemy import insert as insert_row
from sqlalchemy.orm import Session as OrmSession

from app.store import repository as repo
from app.store.tables import ApiKeyRow, PayloadOwnerRow, PayloadRow, SessionRow, TenantRow, UiSessionEndRow, utcnow

#: Payload handles per statement (IN lists).
CHUNK = 500


# --- tenants and keys -----------------------------------------------------------------

def tenant_by_name(db: OrmSession, name: str) -> TenantRow | None:
    return db.execute(select(TenantRow).where(TenantRow.name == name)).scalar_one_or_none()


def add_tenant(db: OrmSession, tenant_id: str, name: str) -> TenantRow:
    row = TenantRow(id=tenant_id, name=name)
    db.add(row)
    db.flush()
    return row


def add_key(db: OrmSession, *, key_id: str, tenant_id: str, digest: str) -> None:
    db.add(ApiKeyRow(id=key_id, tenant_id=tenant_id, digest=digest))
    db.flush()


def get_key(db: OrmSession, key_id: str) -> ApiKeyRow | None:
    return db.get(ApiKeyRow, key_id)


def end_ui_session(db: OrmSession, nonce: str, expires_at: datetime) -> None:
    """Record the inspector session ``nonce`` as ended until ``expires_at`` (again: no-op),
    and delete the records whose cookies have expired anyway."""
    db.execute(delete(UiSessionEndRow).where(UiSessionEndRow.expires_at < utcnow()))
    if db.get(UiSessionEndRow, nonce) is None:
        db.add(UiSessionEndRow(nonce=nonce, expires_at=expires_at))


def ui_session_ended(db: OrmSession, nonce: str) -> bool:
    return db.execute(select(UiSessionEndRow.nonce).where(UiSessionEndRow.nonce == nonce)).first() is not None


def revoke_key(db: OrmSession, key_id: str) -> bool:
    """Mark the key revoked; False when there is no such key or it was revoked already."""
    result = db.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id, ApiKeyRow.revoked_at.is_(None))
                        .values(revoked_at=utcnow()))
    return repo.rowcount(result) > 0


def list_keys(db: OrmSession) -> list[tuple[str, str, datetime, datetime | None]]:
    """(key id, tenant name, created_at, revoked_at) of every key, oldest first."""
    rows = db.execute(select(ApiKeyRow.id, TenantRow.name, ApiKeyRow.created_at, ApiKeyRow.revoked_at)
                      .join(TenantRow, TenantRow.id == ApiKeyRow.tenant_id).order_by(ApiKeyRow.created_at))
    return [tuple(r) for r in rows]  # type: ignore[misc]


# --- sessions -------------------------------------------------------------------------

def session_tenant(db: repo.Db, session_id: str) -> str | None:
    """The tenant of session ``session_id``, or None when there is no such session."""
    return db.execute(select(SessionRow.tenant_id).where(SessionRow.id == session_id)).scalar_one_or_none()


def list_sessions(db: OrmSession, tenant_id: str, *, limit: int,
                  before: tuple[datetime, str] | None = None) -> list[SessionRow]:
    """The tenant's sessions, newest first by (created_at, id), at most ``limit``, strictly
    after the keyset position ``before`` (the last row of the previous page)."""
    query = select(SessionRow).where(SessionRow.tenant_id == tenant_id)
    if before is not None:
        created, sid = before
        query = query.where(or_(SessionRow.created_at < created,
                                and_(SessionRow.created_at == created, SessionRow.id < sid)))
    return list(db.execute(query.order_by(SessionRow.created_at.desc(), SessionRow.id.desc()).limit(limit)).scalars())


def tenant_stored_bytes(db: OrmSession, tenant_id: str) -> int:
    """Payload bytes the tenant's sessions posted, each counted every time it was posted."""
    total = db.execute(select(func.coalesce(func.sum(SessionRow.stored_bytes), 0))
                       .where(SessionRow.tenant_id == tenant_id)).scalar_one()
    return int(total)


# --- payload ownership ----------------------------------------------------------------

def own_payload(db: repo.Db, data: bytes, *, session_id: str, tenant_id: str) -> str:
    """Store ``data`` once under its sha256 and link it to the session (:func:`own_payloads`
    of one); returns the handle."""
    handle = repo.sha256_hex(data)
    own_payloads(db, {handle: data}, session_id=session_id, tenant_id=tenant_id)
    return handle


def own_payloads(db: repo.Db, payloads: Mapping[str, bytes], *, session_id: str, tenant_id: str) -> None:
    """Store each of ``payloads`` (by handle: its sha256 hex) once
    (``repository.put_payloads``) and link them all to the session: a few statements
    whatever their number (a POST stores its batch's payloads together).

    Safe against a concurrent session delete removing the same content: on PostgreSQL the
    payload rows are share-locked (``FOR KEY SHARE``) before the links are written, so a
    delete that locked one first has committed by then and that row is simply stored again;
    a delete that comes later waits for this transaction and then sees the links
    (``delete_session``). SQLite serialises writers (``BEGIN IMMEDIATE``): the race cannot
    happen there, and the rows are not read back.
    """
    missing = sorted(payloads)
    while missing:
        repo.put_payloads(db, {h: payloads[h] for h in missing})
        if repo.dialect_name(db) == "sqlite":
            break
        pinned: set[str] = set()
        for start in range(0, len(missing), CHUNK):
            pinned.update(db.execute(select(PayloadRow.sha256).where(PayloadRow.sha256.in_(missing[start:start + CHUNK]))
                                     .with_for_update(key_share=True, read=True)).scalars())
        missing = [h for h in missing if h not in pinned]
    link_payloads(db, list(payloads), session_id=session_id, tenant_id=tenant_id)


def link_payloads(db: repo.Db, handles: list[str], *, session_id: str, tenant_id: str) -> None:
    """Link existing payloads ``handles`` to the session (no-op for links that exist)."""
    insert = repo._upsert_insert(db)
    rows = [{"sha256": h, "session_id": session_id, "tenant_id": tenant_id} for h in sorted(set(handles))]
    if not rows:
        return
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        if insert is not None:
            db.execute(insert(PayloadOwnerRow).values(chunk).on_conflict_do_nothing())
        else:  # pragma: no cover - PostgreSQL and SQLite only
            for row in chunk:
                if db.execute(select(PayloadOwnerRow.sha256).where(PayloadOwnerRow.sha256 == row["sha256"],
                                                                   PayloadOwnerRow.session_id == session_id)).first() is None:
                    db.execute(insert_row(PayloadOwnerRow.__table__).values(**row))


def find_owned_payloads(db: OrmSession, prefix: str, *, tenant_id: str, session_id: str | None = None,
                        limit: int = 2) -> list[str]:
    """Full handles starting with ``prefix`` (lowercase hex) linked to ``session_id`` or, when
    None, to any session of ``tenant_id``; at most ``limit``."""
    query = select(PayloadOwnerRow.sha256).where(PayloadOwnerRow.tenant_id == tenant_id)
    if session_id is not None:
        query = query.where(PayloadOwnerRow.session_id == session_id)
    if len(prefix) == 64:
        query = query.where(PayloadOwnerRow.sha256 == prefix)
    else:  # a range the (tenant_id, sha256) index serves on both databases, then the exact test
        query = query.where(PayloadOwnerRow.sha256 >= prefix, PayloadOwnerRow.sha256 < prefix + "g",
                            PayloadOwnerRow.sha256.startswith(prefix, autoescape=True))
    return list(db.execute(query.distinct().order_by(PayloadOwnerRow.sha256).limit(limit)).scalars())


def session_handles(db: OrmSession, session_id: str) -> list[str]:
    return list(db.execute(select(PayloadOwnerRow.sha256).where(PayloadOwnerRow.session_id == session_id)).scalars())


def delete_session(db: OrmSession, session_id: str) -> dict[str, int]:
    """Delete the session and everything of it (events, tool calls, artifacts, manifests,
    prefix and layout states, ownership links: ``ON DELETE CASCADE``), then the payloads it
    linked that no other session links. Returns ``{"payloads_deleted", "payloads_kept"}``.

    Concurrency: the candidate payload rows are locked ``FOR UPDATE`` before the unreferenced
    ones are deleted in a new statement; an ingest that links one of them either holds its
    share lock first (the delete then waits, and its statement sees the new link) or waits
    for this transaction and stores the bytes again (``own_payload``). The foreign key from
    ``payload_owners`` to ``payloads`` is the last guard: no link ever names a missing payload.
    """
    handles = sorted(set(session_handles(db, session_id)))
    db.execute(delete(SessionRow).where(SessionRow.id == session_id))
    deleted = 0
    for start in range(0, len(handles), CHUNK):
        chunk = handles[start:start + CHUNK]
        db.execute(select(PayloadRow.sha256).where(PayloadRow.sha256.in_(chunk)).order_by(PayloadRow.sha256)
                   .with_for_update())
        linked = exists().where(PayloadOwnerRow.sha256 == PayloadRow.sha256)
        result = db.execute(delete(PayloadRow).where(PayloadRow.sha256.in_(chunk), ~linked)
                            .execution_options(synchronize_session=False))
        deleted += max(0, repo.rowcount(result))
    return {"payloads_deleted": deleted, "payloads_kept": len(handles) - deleted}

