"""The per-request ASGI middleware: request id, HTTP metrics, and the last line of defence
against unexpected errors.

A plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``) so that an unexpected
exception is answered here and never re-raised. Starlette's ``ServerErrorMiddleware``
(where an ``exception_handler(Exception)`` is installed) always re-raises after sending
its 500, and uvicorn then closes the connection because the response had started: the
next request on that keep-alive connection was reset. Here the 500 problem+json is sent,
the error is logged with the request id, and the connection stays usable.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import PROBLEM_JSON, problem_body, unavailable_problem
from app.observability import metrics
from app.observability.logs import REQUEST_ID

log = logging.getLogger("ctxd")

HEADER = "x-request-id"
_SANE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # printable, no spaces, bounded: safe to echo and log


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    """The incoming ``X-Request-ID`` when it is sane (1-128 chars of ``[A-Za-z0-9._:@/+=-]``),
    else a new one (32 hex chars)."""
    for name, value in headers:
        if name.lower() == HEADER.encode():
            text = value.decode("latin-1")
            if _SANE.match(text):
                return text
            break
    return uuid.uuid4().hex


class RequestContext:
    """Sets the request id (context variable, ``X-Request-ID`` response header), records
    ``ctxd_http_requests_total`` / ``ctxd_http_request_duration_seconds`` by route
    template, and turns any exception that reaches it into a logged 500 problem+json, but a
    database outage (a connection refused or lost: app/api/problems.py
    ``database_unavailable``), which is a 503 with ``Retry-After``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope.get("headers") or [])
        token = REQUEST_ID.set(request_id)
        start = time.perf_counter()
        status = 500
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER.encode()]
                headers.append((HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            outage = unavailable_problem(exc, str(scope.get("path", "")))
            if outage is None:
                log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                if outage is not None:
                    await outage(scope, receive, send_with_id)
                else:
                    await _send_problem(send_with_id, scope)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            method = str(scope.get("method", ""))
            metrics.HTTP_REQUESTS.labels(method, path, str(status)).inc()
            metrics.HTTP_LATENCY.labels(method, path).observe(time.perf_counter() - start)
            REQUEST_ID.reset(token)


async def _send_problem(send: Send, scope: Scope) -> None:
    body: dict[str, Any] = problem_body(500, "Internal error", "an unexpected error occurred; it has been logged "
                                        "with this request_id", instance=str(scope.get("path", "")))
    data = orjson.dumps(body)
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
