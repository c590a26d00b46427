"""The inspector (issue 15): server-rendered pages under ``/ui`` (Jinja2, autoescaped; one
vendored stylesheet, no script, nothing from another host).

* ``GET /ui``: the caller's tenant's sessions; ``GET /ui/sessions/{id}``: one session
  (app/services/inspector.py ``session_page``); ``GET /ui/sessions/{id}/handles/{handle}``:
  a payload as text.
* Auth: where the API requires keys (``CTXD_AUTH``, app/api/auth.py ``auth_required``),
  ``GET /ui/login`` asks for a key once; ``POST /ui/login`` checks it as the API does and
  sets a cookie signed with ``CTXD_UI_SECRET`` (itsdangerous) naming the key id and tenant
  (never the key), HttpOnly, SameSite=Strict, ``Path=/ui``, Secure over HTTPS, valid
  ``CTXD_UI_SESSION_SECONDS``; each page checks the key is still active. Without keys
  required (loopback with ``CTXD_AUTH=auto``, or ``off``) the pages need nothing and show
  the default tenant's sessions. Another tenant's session is a 404 page, as in the API.
* Every answer carries a Content-Security-Policy allowing only this server's stylesheet
  (no script at all), ``no-store`` and ``nosniff``; POSTs from another origin are refused.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

import anyio
import jinja2
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from itsdangerous import BadSignature, URLSafeTimedSerializer

from app.api.auth import auth_required
from app.api.deps import Db, Memo, Meters, Profiles, state_of
from app.api.problems import status_for
from app.api.routing import CheckedRoute
from app.api.schemas import ROW_ID_MAX
from app.domain.errors import DomainError, Unauthorized
from app.domain.tenancy import DEFAULT_TENANT, Principal
from app.services import inspector
from app.services import tenancy as tenancy_service
from app.settings import Settings
from app.store.db import read_only, unit_of_work

router = APIRouter(prefix="/ui", route_class=CheckedRoute, include_in_schema=False)
audit = logging.getLogger("ctxd.audit")

HERE = Path(__file__).resolve().parent.parent
COOKIE = "ctxd_ui"
COOKIE_SALT = "ctxd-ui-session"
MAX_LOGIN_BODY = 4096  # bytes of the login form (a key is 82 characters)
#: only this server's stylesheet; no script, no frame, forms post here only
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY"}

def _no_nul(value: Any) -> Any:
    """A value as a page shows it: a NUL (accepted in event texts) as U+FFFD, since HTML has
    no NUL character (a parse error; tools then take the page for binary)."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


_env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                          trim_blocks=True, lstrip_blocks=True, finalize=_no_nul)
templates = Jinja2Templates(env=_env)
BAR_WIDTH = 360  # pixels of a call's occupancy bar at the largest input_limit shown


def bar_scale(calls: list[dict[str, Any]]) -> int:
    """Tokens at the bars' full width: the largest input_limit (or request) among ``calls``."""
    return max([1, *(int(c["input_limit"]) for c in calls), *(int(c["total"]) for c in calls)])


def bar_of(call: dict[str, Any], scale: int, width: int = BAR_WIDTH) -> dict[str, Any]:
    """The stacked bar of one call (app/services/inspector.py ``call_row``): a segment per
    role (tokens, x and width in pixels, in ``inspector.ROLES`` order) and marks at T_lo,
    T_hi and input_limit, on ``width`` pixels for ``scale`` tokens."""
    def px(tokens: int) -> float:
        return round(tokens * width / scale, 1)

    segments, x = [], 0.0
    for role in inspector.ROLES:
        tokens = call["by_role"].get(role, 0)
        if tokens:
            segments.append({"role": role, "tokens": tokens, "x": x, "w": px(tokens)})
            x = round(x + px(tokens), 1)
    marks = [{"name": name, "x": min(px(int(value)), width - 1), "label": f"{label} {int(value):,} tokens"}
             for name, label, value in (("t_lo", "T_lo", call["t_lo"]), ("t_hi", "T_hi", call["t_hi"]),
                                        ("limit", "input_limit", call["input_limit"])) if value]
    label = (f"call #{call['number']}: {call['total']:,} tokens of input_limit {call['input_limit']:,}; "
             + ", ".join(f"{s['role']} {s['tokens']:,}" for s in segments))
    return {"width": width, "limit_x": px(call["input_limit"]), "segments": segments, "marks": marks, "label": label}


def thousands(value: Any) -> str:
    """A token or byte count with thousands separators; '' for anything not a number."""
    return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def when(value: Any) -> str:
    """An ISO 8601 time to the second (``2026-12-01 07:27:14``)."""
    return str(value or "")[:19].replace("T", " ")


_env.filters["n"] = thousands
_env.filters["when"] = when
_env.globals.update(roles=inspector.ROLES, bar_scale=bar_scale, bar_of=bar_of)


def install(app: FastAPI, settings: Settings) -> URLSafeTimedSerializer:
    """Mount the pages and their stylesheet (``/ui/static``) on ``app``; returns the app's
    cookie signer (``AppState.ui_signer``: one per app, so that a restart of its lifespan
    keeps the cookies valid)."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    return URLSafeTimedSerializer(settings.ui_secret or secrets.token_urlsafe(32), salt=COOKIE_SALT)


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)


def _keys_required(request: Request) -> bool:
    return auth_required(state_of(request.app).settings, request.scope)


def _cookie_principal(request: Request) -> Principal | None:
    """The principal of the request's session cookie, when valid, unexpired and its key
    still active; None otherwise."""
    found = _cookie_session(request)
    if found is None:
        return None
    key_id, tenant_id, nonce, _ = found
    try:
        with read_only(state_of(request.app).read_factory) as db:
            return tenancy_service.principal_of_key(db, key_id, tenant_id, nonce=nonce)
    except Unauthorized:
        return None


def _cookie_session(request: Request) -> tuple[str, str, str, datetime] | None:
    """(key id, tenant, session nonce, expiry in UTC) of the request's session cookie when
    its signature is valid and it has not expired; None otherwise (a cookie from before
    session nonces, too: log in again)."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    state = state_of(request.app)
    seconds = state.settings.ui_session_seconds
    try:
        data, signed_at = state.ui_signer.loads(raw, max_age=seconds, return_timestamp=True)
        return str(data["k"]), str(data["t"]), str(data["n"]), signed_at + timedelta(seconds=seconds)
    except (BadSignature, KeyError, TypeError):
        return None


def _principal(request: Request) -> Principal | None:
    """The page's principal: the default tenant when keys are not required, else the
    cookie's (None: log in first). Counts one request against the tenant's rate limit."""
    principal = _cookie_principal(request) if _keys_required(request) else Principal(DEFAULT_TENANT)
    if principal is not None:
        state_of(request.app).rate_limiter.check(principal.tenant_id)
    return principal


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303, headers=HEADERS)


def _safe_next(value: str | None) -> str:
    """Where to go after logging in: a path of this inspector only (no open redirect)."""
    if value and value.startswith("/ui") and not value.startswith("//") and "\\" not in value:
        return value
    return "/ui"


def _same_origin(request: Request) -> bool:
    """False when the browser says the POST comes from another origin (login CSRF)."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's form post (e.g. curl): judged by Sec-Fetch-Site when sent
        return request.headers.get("sec-fetch-site") in (None, "same-origin", "none")
    return origin.split("://", 1)[-1] == request.headers.get("host", "")  # "null" (sandboxed, file:) is refused


def _error(request: Request, exc: DomainError, principal: Principal | None) -> HTMLResponse:
    status = status_for(exc)
    return _page(request, "error.html", {"status": status, "title": exc.title, "detail": exc.detail,
                                        "principal": principal, "keys": _keys_required(request)}, status)


@router.get("", response_class=HTMLResponse)
def sessions(request: Request, db: Db,
             cursor: Annotated[str | None, Query(max_length=200)] = None) -> Response:
    """The caller's tenant's sessions, newest first."""
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    try:
        page = inspector.sessions_page(db.read, principal, cursor=cursor, profiles=state_of(request.app).profiles)
    except DomainError as exc:
        return _error(request, exc, principal)
    return _page(request, "sessions.html", {"page": page, "principal": principal, "keys": _keys_required(request)})


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
def session(request: Request, session_id: str, db: Db, memo: Memo, profiles: Profiles, meters: Meters,
            manifest: Annotated[int | None, Query(ge=1, le=ROW_ID_MAX)] = None,
            events_before: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None) -> Response:
    """One session: its calls, timeline, the selected request (``manifest``, default the
    newest), the progress record and the invalidation graph."""
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    try:
        view = inspector.session_page(db.read, profiles, meters, memo, session_id, principal, manifest_id=manifest,
                                      events_before=events_before)
    except DomainError as exc:
        return _error(request, exc, principal)
    return _page(request, "session.html", {"v": view, "sid": session_id, "principal": principal,
                                           "keys": _keys_required(request)})


@router.get("/sessions/{session_id}/handles/{handle}", response_class=HTMLResponse)
def handle(request: Request, session_id: str, handle: str, db: Db,
           lines: Annotated[str | None, Query(pattern=r"^\d{1,18}:\d{1,18}$")] = None) -> Response:
    """A payload of the session (or a line range of it) as escaped text."""
    principal = _principal(request)
    if principal is None:
        return _to_login(request)
    try:
        view = inspector.handle_page(db.read, session_id, handle, principal, lines=lines)
    except DomainError as exc:
        return _error(request, exc, principal)
    return _page(request, "handle.html", {"h": view, "sid": session_id, "principal": principal,
                                          "keys": _keys_required(request)})


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    """The key form (only where keys are required)."""
    if not _keys_required(request):
        return RedirectResponse(_safe_next(next), status_code=303, headers=HEADERS)
    return _page(request, "login.html", {"next": _safe_next(next), "message": None, "principal": None, "keys": True})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    """Check the posted key (``application/x-www-form-urlencoded``: ``key``, ``next``) as
    the API does; on success set the session cookie and go to ``next``."""
    if not _same_origin(request):
        return _page(request, "login.html", {"next": "/ui", "message": "This form must be posted from this page.",
                                             "principal": None, "keys": True}, 403)
    body = await request.body()
    form = parse_qs(body[:MAX_LOGIN_BODY].decode("utf-8", "replace"), max_num_fields=4)
    key = (form.get("key") or [""])[0].strip()
    target = _safe_next((form.get("next") or [""])[0])
    if not _keys_required(request):
        return RedirectResponse(target, status_code=303, headers=HEADERS)
    state = state_of(request.app)

    def check() -> Principal:
        with read_only(state.read_factory) as db:
            return tenancy_service.authenticate(db, f"Bearer {key}")

    try:
        principal = await anyio.to_thread.run_sync(check)
        state.rate_limiter.check(principal.tenant_id)
    except Unauthorized:
        audit.warning("ui login refused (%s)", request.client.host if request.client else "-")
        return _page(request, "login.html", {"next": target, "message": "That key is not valid (unknown, revoked "
                                             "or mistyped).", "principal": None, "keys": True}, 401)
    except DomainError as exc:
        return _error(request, exc, None)
    audit.info("ui login: key_id=%s tenant=%s", principal.key_id, principal.tenant_id)
    response = RedirectResponse(target, status_code=303, headers=HEADERS)
    # "n": this session's nonce, which its logout ends on the server (app/store ``ui_session_ends``)
    token = state.ui_signer.dumps({"k": principal.key_id, "t": principal.tenant_id, "n": secrets.token_hex(16)})
    response.set_cookie(COOKIE, token, max_age=state.settings.ui_session_seconds, path="/ui", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    """End the session: on the server (its nonce is refused by every worker until the cookie
    would have expired, so a copy of the cookie is worthless from now on) and in the browser
    (the cookie is deleted)."""
    response = RedirectResponse("/ui/login" if _keys_required(request) else "/ui", status_code=303, headers=HEADERS)
    if _same_origin(request):
        found = _cookie_session(request)
        if found is not None:
            with unit_of_work(state_of(request.app).session_factory) as db:
                tenancy_service.end_ui_session(db, found[2], found[3])
            audit.info("ui logout: key_id=%s tenant=%s", found[0], found[1])
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
    return response
