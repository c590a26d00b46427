"""RFC 9457 problem details: the one table mapping domain errors to HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.domain import errors

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("ctxd")

STATUS: dict[type[errors.DomainError], int] = {
    errors.SessionNotFound: 404,
    errors.HandleNotFound: 404,
    errors.ManifestNotFound: 404,
    errors.NotFound: 404,
    errors.InvalidEvent: 422,
    errors.EventConflict: 409,
    errors.UnknownProfile: 422,
    errors.InvalidRange: 416,
    errors.UnsupportedFormat: 422,
    errors.PinnedOverBudget: 422,
    errors.TokenizerUnavailable: 503,
    errors.LayoutContention: 503,
}


def _slug(title: str) -> str:
    return title.lower().replace(" ", "-")


def problem(status: int, title: str, detail: str, *, instance: str | None = None, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": f"https://ctxd.dev/problems/{_slug(title)}", "title": title, "status": status,
                            "detail": detail}
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def status_for(exc: errors.DomainError) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.DomainError)
    async def _domain(request: Request, exc: errors.DomainError) -> JSONResponse:
        return problem(status_for(exc), exc.title, exc.detail, instance=request.url.path, **exc.extra)

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
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "HTTP error")
        return problem(exc.status_code, title, str(exc.detail), instance=request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem(500, "Internal error", "an unexpected error occurred; it has been logged",
                       instance=request.url.path)
