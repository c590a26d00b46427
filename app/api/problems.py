"""RFC 9457 problem details: the one table mapping domain errors to HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.domain import errors
from app.observability.logs import REQUEST_ID

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
    body["request_id"] = REQUEST_ID.get()
    return body


def problem(status: int, title: str, detail: str, *, instance: str | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse(problem_body(status, title, detail, instance=instance, **extra), status_code=status,
                        media_type=PROBLEM_JSON)


def status_for(exc: errors.DomainError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def install(app: FastAPI) -> None:
    """Install the handlers. Unexpected exceptions are not handled here: the request
    middleware (``app/api/middleware.py``) answers them with a logged 500 and keeps the
    connection usable (an ``exception_handler(Exception)`` would re-raise and close it)."""

    @app.exception_handler(errors.DomainError)
    async def _domain(request: Request, exc: errors.DomainError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("%s on %s %s: %s", exc.title, request.method, request.url.path, exc.detail)
        return problem(status, exc.title, exc.detail, instance=request.url.path, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        issues = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        first = issues[0] if issues else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return problem(422, "Invalid request", f"{where}: {first['msg']}" if where else first["msg"],
                       instance=request.url.path, errors=issues)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {404: "Not found", 405: "Method not allowed", 413: "Request body too large"}.get(exc.status_code,
                                                                                                "HTTP error")
        return problem(exc.status_code, title, str(exc.detail), instance=request.url.path,
                       **getattr(exc, "extra", {}))
