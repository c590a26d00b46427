"""RFC 9457 problem details: the one table mapping domain errors to HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.domain import errors
from app.observability.logs import current_request_id

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("ctxd")

STATUS: dict[type[errors.DomainError], int] = {
    errors.SessionNotFound: 404,
    errors.HandleNotFound: 404,
    errors.ManifestNotFound: 404,
    errors.NotFound: 404,
    errors.InvalidEvent: 422,
    errors.ControlTokenInText: 422,
    errors.EventConflict: 409,
    errors.SessionHasChildren: 409,
    errors.UnknownProfile: 422,
    errors.InvalidRange: 416,
    errors.UnsupportedFormat: 422,
    errors.PinnedOverBudget: 422,
    errors.NewestGroupOverBudget: 422,
    errors.ProviderRuleViolation: 422,
    errors.TokenizerUnavailable: 503,
    errors.LayoutContention: 503,
    errors.InvalidPrecondition: 422,
    errors.PreconditionFailed: 409,
    errors.ServerFault: 500,
    errors.PayloadTooLarge: 413,
    errors.Unauthorized: 401,
    errors.RateLimited: 429,
    errors.StorageQuotaExceeded: 429,
    errors.InvalidParameter: 422,
}


def _slug(title: str) -> str:
    return title.lower().replace(" ", "-")


def problem_body(status: int, title: str, detail: str, *, instance: str | None = None, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 body; ``request_id`` is the current request's (also in the X-Request-ID
    header and the log lines)."""
    body: dict[str, Any] = {"type": f"https://ctxd.dev/problems/{_slug(title)}", "title": title, "status": status,
                            "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    body["request_id"] = current_request_id() or "-"
    return body


def problem(status: int, title: str, detail: str, *, instance: str | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(problem_body(status, title, detail, instance=instance, **extra), status_code=status,
                        media_type=PROBLEM_JSON)


def status_for(exc: errors.DomainError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


#: ``Retry-After`` (seconds) of a 503 that names none: the outages it answers (a database
#: restart, a tokenizer loading, contended layout state) last seconds.
RETRY_AFTER_503 = 1


def problem_headers(status: int, extra: dict[str, Any]) -> dict[str, str]:
    """HTTP headers a problem of ``status`` carries: ``WWW-Authenticate: Bearer`` on a 401
    (RFC 6750), ``Retry-After`` (whole seconds) on a 429 whose ``extra`` has ``retry_after``
    and on every 503 (``retry_after``, else :data:`RETRY_AFTER_503`)."""
    if status == 401:
        return {"WWW-Authenticate": 'Bearer realm="ctxd"'}
    if status == 429 and extra.get("retry_after") is not None:
        return {"Retry-After": str(int(extra["retry_after"]))}
    if status == 503:
        return {"Retry-After": str(int(extra.get("retry_after") or RETRY_AFTER_503))}
    return {}


def database_unavailable(exc: BaseException) -> str | None:
    """Why ``exc`` means the database cannot be used for now, or None for any other error.

    Unavailable: a connection refused, lost or closed by the server (a restart:
    ``terminating connection due to administrator command``, ``the database system is
    starting up``), SQLAlchemy's pool exhausted (``sqlalchemy.exc.TimeoutError``), and on
    SQLite a database locked or busy past the busy timeout. Every other error (a missing
    table, a constraint, a syntax error) is a fault, not an outage (None)."""
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.TimeoutError):
        return "no database connection free in the pool"
    if not isinstance(exc, sa.DBAPIError):
        return None
    message = str(exc.orig or exc).strip().splitlines()[0] if str(exc.orig or exc).strip() else type(exc).__name__
    if type(exc.orig).__module__.startswith("sqlite3"):
        lowered = message.lower()
        return message if "locked" in lowered or "busy" in lowered else None
    if exc.connection_invalidated or isinstance(exc, sa.OperationalError):
        return message
    return None


def unavailable_problem(exc: BaseException, path: str) -> JSONResponse | None:
    """The 503 problem+json (with ``Retry-After``) answering ``exc`` when it is a database
    outage (:func:`database_unavailable`), else None. Logged as a warning: the client retries."""
    reason = database_unavailable(exc)
    if reason is None:
        return None
    log.warning("database unavailable on %s: %s", path, reason)
    response = problem(503, "Database unavailable", f"the database cannot be reached ({reason}); nothing was "
                       "changed by this request: retry it", instance=path, retry_after=RETRY_AFTER_503)
    response.headers.update(problem_headers(503, {}))
    return response


def install(app: FastAPI) -> None:
    """Install the handlers. Unexpected exceptions are not handled here: the request
    middleware (``app/api/middleware.py``) answers them with a logged 500 and keeps the
    connection usable (an ``exception_handler(Exception)`` would re-raise and close it)."""

    @app.exception_handler(errors.DomainError)
    async def _domain(request: Request, exc: errors.DomainError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("%s on %s %s: %s", exc.title, request.method, request.url.path, exc.detail)
        response = problem(status, exc.title, exc.detail, instance=request.url.path, **exc.extra)
        response.headers.update(problem_headers(status, exc.extra))
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        issues = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        first = issues[0] if issues else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        detail = f"{where}: {first['msg']}" if where else str(first["msg"])
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if first["loc"] == ["body"] and not (media == "application/json" or media.endswith("+json")):
            # curl -d sends application/x-www-form-urlencoded: the body was never read as JSON
            detail = (f"body: not read as JSON: the Content-Type is {media or 'missing'}; send "
                      f"'Content-Type: application/json' ({first['msg']})")
        return problem(422, "Invalid request", detail, instance=request.url.path, errors=issues)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {400: "Malformed JSON", 404: "Not found", 405: "Method not allowed",
                 413: "Request body too large"}.get(exc.status_code,
                                                                                                "HTTP error")
        return problem(exc.status_code, title, str(exc.detail), instance=request.url.path,
                       **getattr(exc, "extra", {}))


#: What each error status means on ctxd's routes (the OpenAPI ``responses`` of each route
#: list those it can answer: :func:`documented`).
DESCRIPTIONS: dict[int, str] = {
    400: "The body is not valid JSON",
    401: "Missing or invalid API key (when keys are required: CTXD_AUTH)",
    404: "Not found (or another tenant's: indistinguishable)",
    409: "Conflict",
    413: "Payload or request body too large",
    416: "Range not satisfiable",
    422: "Invalid input",
    429: "Rate limit or storage quota exceeded (Retry-After on rate limits)",
    503: "Temporarily unavailable; retry",
}
#: Every /v1 route can answer these: the key check and the rate limit run first (app/api/auth.py).
COMMON = (401, 422, 429)


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a route answering ``codes`` (plus :data:`COMMON`) as problem+json."""
    return {code: {"description": DESCRIPTIONS[code], "content": {PROBLEM_JSON: {}}}
            for code in sorted({*COMMON, *codes})}
