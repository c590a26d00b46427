"""Tenancy use cases (issue 12): API keys, who may see a session or a handle, listing and
deleting sessions, the storage quota.

API keys are ``ctxd_<key id: 12 hex>_<secret: 64 hex>``: a 256-bit random secret behind a
public id. Only SHA-256 of the secret is stored: the secret has full entropy, so a fast hash
is enough (a password hash would cost tens of milliseconds per request), and it is compared
in constant time (``hmac.compare_digest``), also when the key id is unknown.

Another tenant's session, manifest or handle answers exactly as one that does not exist
(same error class, same detail text): existence never leaks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session as OrmSession

from app.domain.errors import (
    HandleNotFound,
    InvalidParameter,
    SessionHasChildren,
    SessionNotFound,
    StorageQuotaExceeded,
    Unauthorized,
)
from app.domain.tenancy import DEFAULT_TENANT, Principal
from app.services.sessions import goal_line, session_model
from app.store import repository as repo
from app.store import retention
from app.store import tenancy as store
from app.store.tables import iso_utc
from app.tokenizers.profiles import ProfileRegistry

KEY_PREFIX = "ctxd_"
_KEY = re.compile(r"^ctxd_([0-9a-f]{12})_([0-9a-f]{64})$")
_TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Compared against when the key id is unknown, so the answer takes the same time.
_DUMMY_DIGEST = hashlib.sha256(b"ctxd-no-such-key").hexdigest()


def digest(secret: str) -> str:
    """SHA-256 (hex) of a key's secret part: what is stored."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def create_key(db: OrmSession, tenant: str) -> tuple[str, str]:
    """A new API key for tenant ``tenant`` (created if missing; ``default`` is the tenant of
    unauthenticated use). Returns (key id, the whole key): the key is shown once, never stored.

    Raises:
        InvalidParameter: ``tenant`` is not 1-64 characters of ``[A-Za-z0-9._-]`` starting alphanumeric.
    """
    if not _TENANT_NAME.match(tenant):
        raise InvalidParameter(f"tenant name {tenant!r} must be 1-64 characters of [A-Za-z0-9._-], starting with a "
                           "letter or digit")
    row = store.tenant_by_name(db, tenant)
    if row is None:
        row = store.add_tenant(db, DEFAULT_TENANT if tenant == DEFAULT_TENANT else secrets.token_hex(16), tenant)
    key_id, secret = secrets.token_hex(6), secrets.token_hex(32)
    store.add_key(db, key_id=key_id, tenant_id=row.id, digest=digest(secret))
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}"


def key_id_of(text: str) -> str:
    """The key id of a whole key, or ``text`` itself (an id given as is)."""
    found = _KEY.match(text.strip())
    return found.group(1) if found else text.strip()


def revoke_key(db: OrmSession, key: str) -> bool:
    """Revoke the key with this id (or this whole key); False when none is active."""
    return store.revoke_key(db, key_id_of(key))


def list_keys(db: OrmSession) -> list[dict[str, Any]]:
    return [{"key_id": k, "tenant": t, "created_at": iso_utc(c), "revoked_at": iso_utc(r) if r else None}
            for k, t, c, r in store.list_keys(db)]


def authenticate(db: OrmSession, authorization: str | None) -> Principal:
    """The principal of an ``Authorization: Bearer <key>`` header value.

    Raises:
        Unauthorized: no header, not a bearer key of ctxd's form, unknown or revoked key (401;
            the detail does not say which).
    """
    scheme, _, token = (authorization or "").partition(" ")
    found = _KEY.match(token.strip()) if scheme.lower() == "bearer" else None
    if found is None:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer ctxd_...' "
                           "(create one with `ctxd keys create --tenant NAME`)")
    key_id, secret = found.groups()
    row = store.get_key(db, key_id)
    ok = hmac.compare_digest(digest(secret), row.digest if row is not None else _DUMMY_DIGEST)
    if row is None or not ok or row.revoked_at is not None:
        raise Unauthorized("the API key is not valid (unknown, revoked or mistyped)")
    return Principal(tenant_id=row.tenant_id, key_id=key_id)


def principal_of_key(db: OrmSession, key_id: str, tenant_id: str, *, nonce: str | None = None) -> Principal:
    """The principal of an already authenticated key (the inspector's session cookie names
    the key id and tenant, never the secret), while that key is still active and, with
    ``nonce`` (the cookie's session), while that session has not been ended by its logout.

    Raises:
        Unauthorized: the key is unknown, revoked, or now of another tenant; or the session
            was ended (logged out).
    """
    row = store.get_key(db, key_id)
    if row is None or row.revoked_at is not None or row.tenant_id != tenant_id:
        raise Unauthorized("the API key of this session is no longer valid (revoked or deleted)")
    if nonce is not None and store.ui_session_ended(db, nonce):
        raise Unauthorized("this inspector session was logged out")
    return Principal(tenant_id=row.tenant_id, key_id=key_id)


def end_ui_session(db: OrmSession, nonce: str, expires_at: datetime) -> None:
    """End the inspector session ``nonce`` (its logout): its cookie is refused from now on by
    every worker, until ``expires_at`` (UTC), when it would have expired anyway."""
    store.end_ui_session(db, nonce, expires_at)


def _absent(session_id: str) -> SessionNotFound:
    return SessionNotFound(f"no session {session_id!r}", session_id=session_id)


def require_session(db: OrmSession, session_id: str, principal: Principal) -> None:
    """Raises SessionNotFound (404) unless the session exists and is the principal's tenant's:
    the same error, word for word, whether it is absent or another tenant's."""
    if store.session_tenant(db, session_id) != principal.tenant_id:
        raise _absent(session_id)


def _cursor(created: datetime, session_id: str) -> str:
    text = f"{created.isoformat()}|{session_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _position(cursor: str) -> tuple[datetime, str]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, session_id = text.split("|", 1)
        return datetime.fromisoformat(created), session_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidParameter("cursor is not one this API returned (next_cursor of a previous page)",
                           loc=["query", "cursor"]) from None


def list_sessions(db: OrmSession, principal: Principal, *, limit: int, cursor: str | None,
                  profiles: ProfileRegistry | None = None) -> dict[str, Any]:
    """The tenant's sessions, newest first, keyset-paged: ``{"sessions": [{id, profile, model,
    title, goal, last_seq, created_at}], "next_cursor"}`` (None on the last page). ``model``:
    the ``model`` of the session's request bodies, its own else its profile's (from
    ``profiles``), as ``GET /v1/sessions/{id}`` gives it; ``title``: its title (None: none);
    ``goal``: the first line of its contract's goal, at most 120 characters
    (:func:`app.services.sessions.goal_line`). A cursor that is not one this API made is
    InvalidParameter (422)."""
    rows = store.list_sessions(db, principal.tenant_id, limit=limit + 1,
                               before=_position(cursor) if cursor else None)
    page = rows[:limit]
    return {"sessions": [{"id": r.id, "profile": r.profile,
                          "model": session_model(r, profiles) if profiles is not None else r.model,
                          "title": r.title, "goal": goal_line(r.contract),
                          "last_seq": r.last_seq, "created_at": iso_utc(r.created_at)} for r in page],
            "next_cursor": _cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None}


def delete_session(db: OrmSession, session_id: str, principal: Principal) -> dict[str, int]:
    """Delete the principal's session and all of it, and the payloads no other session
    references (``app/store/tenancy.py delete_session``). Raises SessionNotFound (404)."""
    require_session(db, session_id, principal)
    children = repo.child_ids(db, session_id)
    if children:
        raise SessionHasChildren(f"session {session_id!r} has {len(children)} child session(s); delete them first "
                                 "(a child's conclusion returns to its parent, so a parent outlives its children)",
                                 session_id=session_id, children=children[:100])
    return store.delete_session(db, session_id)


def resolve_handle(db: OrmSession, handle: str, principal: Principal, *, session_id: str | None = None) -> str:
    """The full handle (64 hex) that ``handle`` (8 to 64 hex characters) names among the
    payloads the principal may read: linked to ``session_id`` (which must be the tenant's),
    or to any session of the tenant. A prefix resolves only within that scope.

    Raises:
        SessionNotFound: ``session_id`` is absent or another tenant's (404).
        HandleNotFound: not a handle, ambiguous within the scope, or no payload in the scope
            (404, the same whether the payload exists elsewhere or nowhere).
    """
    if session_id is not None:
        require_session(db, session_id, principal)
    h = handle.lower()
    if not (8 <= len(h) <= 64) or any(c not in "0123456789abcdef" for c in h):
        raise HandleNotFound(f"{handle!r} is not a handle (8 to 64 hex chars of a payload's sha256)", handle=handle)
    found = store.find_owned_payloads(db, h, tenant_id=principal.tenant_id, session_id=session_id)
    if len(found) > 1:
        raise HandleNotFound(f"handle prefix {handle!r} is ambiguous; give more characters", handle=handle)
    if not found:
        raise HandleNotFound(f"no payload with handle {handle!r}", handle=handle)
    return found[0]


def check_storage_quota(db: OrmSession, tenant_id: str, quota_bytes: int) -> None:
    """Raises StorageQuotaExceeded (429) when the tenant's stored bytes (every posted payload
    counted each time, as if not deduplicated: whether content exists elsewhere never
    changes the figure) exceed ``quota_bytes`` (0: no quota). Called after a batch is
    ingested, in its transaction, so an over-quota batch is rolled back whole."""
    if quota_bytes <= 0:
        return
    used = store.tenant_stored_bytes(db, tenant_id)
    if used > quota_bytes:
        raise StorageQuotaExceeded(f"this batch would bring the tenant's stored payloads to {used:,} bytes, over its "
                                   f"quota of {quota_bytes:,} bytes (setting CTXD_STORAGE_QUOTA_BYTES); delete "
                                   "sessions to free space", used_bytes=used, quota_bytes=quota_bytes)


def prune_manifests(db: OrmSession, *, retention_days: float, now: datetime | None = None) -> int:
    """Apply the manifest retention (``CTXD_MANIFEST_RETENTION_DAYS``; 0 keeps everything):
    returns the manifests deleted (app/store/retention.py ``prune_manifests``)."""
    if retention_days <= 0:
        return 0
    return retention.prune_manifests(db, older_than=(now or datetime.now(UTC)) - timedelta(days=retention_days))
