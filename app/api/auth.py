"""Authentication, tenant scope and rate limits of ``/v1`` (issue 12), before any route runs.

A pure ASGI middleware, so that a caller without a valid key never gets its body read,
parsed or validated, and learns nothing about which routes or sessions exist:

1. the principal: with auth required (``CTXD_AUTH``, :func:`auth_required`), the
   ``Authorization: Bearer`` key (app/services/tenancy.py ``authenticate``), else 401
   problem+json with ``WWW-Authenticate: Bearer``; with auth off, the default tenant;
2. the tenant's rate limit (app/services/ratelimits.py), else 429 with ``Retry-After``;
3. for ``/v1/sessions/{id}/...``: the session must be the tenant's, else the same 404 as
   a session that does not exist (the session services raise it for absent sessions).

Steps 1 and 3 are one short read transaction, in a worker thread (the event loop never
waits on the database). The principal goes to ``request.state.principal`` (:data:`Caller`).

Step 3's answer is kept (:class:`SessionOwners`, bounded in bytes): a session's tenant never
changes and session ids are never reused, so "session S is tenant T's" stays true until S is
deleted, and a deleted session is answered 404 by the routes' own services exactly as an
absent one (the entry is also dropped on DELETE in this worker). With keys not required
(``CTXD_AUTH``), an in-process rate limiter and the session's owner known (or no session in
the path), nothing is left that waits: the request is admitted on the event loop, without
the thread hop and the read transaction (issue 9 item 8: they were ~1 ms of a GET's fixed
cost). With keys required the key is looked up in the database every time (a revoked key
stops working at once), in one hop as before.
Every use of a key is logged on ``ctxd.audit`` with its key id, tenant, session and the
request id (``app/observability/logs.py`` puts the request id on every record).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import state_of
from app.api.problems import problem, problem_headers, status_for
from app.caches import SessionOwners
from app.domain.errors import DomainError, RateLimited, Unauthorized
from app.domain.tenancy import DEFAULT_TENANT, Principal
from app.observability import metrics
from app.services import tenancy
from app.settings import Settings
from app.store.db import read_only

audit = logging.getLogger("ctxd.audit")

#: A session path: ``/v1/sessions/<32 hex>`` and below. Ids of another shape cannot exist
#: (uuid4 hex), so such paths go on to the route, whose services answer 404 (or 422).
_SESSION_PATH = re.compile(r"^/v1/sessions/([0-9a-f]{32})(?:/|$)")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def auth_required(settings: Settings, scope: Scope) -> bool:
    """Whether this request needs an API key: ``CTXD_AUTH=required`` always, ``off`` never;
    ``auto`` unless ctxd serves on a loopback address (``CTXD_HOST``, set by ``ctxd serve
    --host``) and the connection arrived on one (the ASGI ``server`` address: a server started
    another way on 0.0.0.0 with the default CTXD_HOST still requires keys from the network).
    In-process test clients have no socket (their ``server`` is not an IP address)."""
    if settings.auth != "auto":
        return settings.auth == "required"
    if not is_loopback(settings.host):
        return True
    server = scope.get("server")
    if server and server[0]:
        try:
            return not ipaddress.ip_address(str(server[0]).strip("[]")).is_loopback
        except ValueError:
            return False  # not an address: an in-process transport (TestClient's "testserver")
    return False


def read_factory(app: Any) -> sessionmaker[OrmSession]:
    """The app's read-transaction factory."""
    return state_of(app).read_factory


def session_of_path(path: str) -> str | None:
    found = _SESSION_PATH.match(path)
    return found.group(1) if found else None


def session_owners(app: Any) -> SessionOwners:
    """The app's :class:`SessionOwners` (``AppState.session_owners``)."""
    return state_of(app).session_owners


def _authorize_on_loop(app: Any, scope: Scope) -> Principal | None:
    """The principal when nothing of the check waits (module docstring): keys not required,
    the rate limiter in process, and the path's session (if any) known to be the default
    tenant's; the rate limit is counted here. None: run :func:`_authorize` in a thread."""
    state = state_of(app)
    settings, limiter = state.settings, state.rate_limiter
    if not getattr(limiter, "in_process", False) or auth_required(settings, scope):
        return None
    session_id = session_of_path(scope.get("path", ""))
    if session_id is not None and not session_owners(app).known(DEFAULT_TENANT, session_id):
        return None
    limiter.check(DEFAULT_TENANT)
    return Principal(DEFAULT_TENANT)


def _authorize(app: Any, scope: Scope) -> Principal:
    state = state_of(app)
    settings = state.settings
    required = auth_required(settings, scope)
    session_id = session_of_path(scope.get("path", ""))
    principal = Principal(DEFAULT_TENANT)
    if required or session_id is not None:
        headers = {k.lower(): v for k, v in scope.get("headers") or []}
        with read_only(state.read_factory) as db:
            if required:
                raw = headers.get(b"authorization")
                principal = tenancy.authenticate(db, raw.decode("latin-1") if raw is not None else None)
                audit.info("key used: key_id=%s tenant=%s %s %s session=%s", principal.key_id, principal.tenant_id,
                           scope.get("method"), scope.get("path"), session_id or "-")
            state.rate_limiter.check(principal.tenant_id)
            if session_id is not None:
                owners = state.session_owners
                if not owners.known(principal.tenant_id, session_id):
                    tenancy.require_session(db, session_id, principal)
                    owners.add(principal.tenant_id, session_id)
    else:
        state.rate_limiter.check(principal.tenant_id)
    return principal


class AuthMiddleware:
    """Authenticate, rate-limit and scope every ``/v1`` request (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        try:
            principal = _authorize_on_loop(scope["app"], scope) or await anyio.to_thread.run_sync(
                _authorize, scope["app"], scope)
        except DomainError as exc:
            status = status_for(exc)
            if isinstance(exc, Unauthorized):
                metrics.AUTH_FAILURES.inc()
                audit.warning("key refused: %s %s (%s)", scope.get("method"), scope.get("path"), exc.detail)
            elif isinstance(exc, RateLimited):
                metrics.RATE_LIMITED.inc()
            response = problem(status, exc.title, exc.detail, instance=scope.get("path"), **exc.extra)
            response.headers.update(problem_headers(status, exc.extra))
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def caller(request: Request) -> Principal:
    """The principal :class:`AuthMiddleware` found (the default tenant where it did not run)."""
    return getattr(request.state, "principal", None) or Principal(DEFAULT_TENANT)


Caller = Annotated[Principal, Depends(caller)]
