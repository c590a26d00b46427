"""The per-request ASGI middleware: HTTP metrics, and the last line of defence against
unexpected errors; and the request id's rule (:func:`sane_request_id`, applied by
asgi-correlation-id's middleware, installed outside this one in app/main.py).

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
from app.services.payload_counts import Activity

log = logging.getLogger("ctxd")

HEADER = "X-Request-ID"
_SANE = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,128}$")  # printable, no spaces, bounded: safe to echo and log


def sane_request_id(value: str) -> bool:
    """Whether an incoming ``X-Request-ID`` is kept: 1-128 chars of ``[A-Za-z0-9._:@/+=-]``
    (else a new one, 32 hex chars, replaces it)."""
    return bool(_SANE.match(value))


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestContext:
    """Records ``ctxd_http_requests_total`` / ``ctxd_http_request_duration_seconds`` by route
    template (:func:`route_label`), and turns any exception that reaches it into a logged
    500 problem+json (with the request id: the correlation middleware runs outside), but a
    database outage (a connection refused or lost: app/api/problems.py
    ``database_unavailable``), which is a 503 with ``Retry-After``. ``activity`` (when given)
    holds the request in flight until its response's last byte is sent (the payload counts
    wait for an idle worker: app/services/payload_counts.py)."""

    def __init__(self, app: ASGIApp, activity: Activity | None = None) -> None:
        self.app = app
        self.activity = activity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False
        activity = self.activity
        if activity is not None:
            activity.begin()
        in_flight = activity is not None

        async def send_status(message: Message) -> None:
            nonlocal status, started, in_flight
            kind = message["type"]
            if kind == "http.response.start":
                started = True
                status = int(message["status"])
            await send(message)
            if in_flight and activity is not None and kind == "http.response.body" and not message.get("more_body"):
                in_flight = False
                activity.end()

        try:
            await self.app(scope, receive, send_status)
        except Exception as exc:
            outage = unavailable_problem(exc, str(scope.get("path", "")))
            if outage is None:
                log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                if outage is not None:
                    await outage(scope, receive, send_status)
                else:
                    await _send_problem(send_status, scope)
        finally:
            if in_flight and activity is not None:
                in_flight = False
                activity.end()
            path = route_label(scope)
            method = str(scope.get("method", ""))
            metrics.HTTP_REQUESTS.labels(method, path, str(status)).inc()
            metrics.HTTP_LATENCY.labels(method, path).observe(time.perf_counter() - start)


_GET_WRITES = re.compile(r"^/v1/sessions/[^/]+/request/?$")  # GETs that store what they serve


class HeadAsGet:
    """HEAD answered as GET without the body (RFC 9110 section 9.3.2: a general-purpose
    server supports HEAD wherever it supports GET). FastAPI's routes accept only the
    methods they declare, so ``HEAD /healthz`` (uptime monitors), ``HEAD /ui`` and every
    other GET route answered 405. The request runs as a GET (auth, rate limits, metrics
    and logs as for a GET), its status and headers (``Content-Length`` included) are sent,
    its body is not. But for ``GET /v1/sessions/{id}/request``, which stores the manifest
    of the request it serves: HEAD is a safe method, so there it stays 405 (``Allow:
    GET``) instead of storing a manifest no one reads."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "HEAD":
            await self.app(scope, receive, send)
            return
        if _GET_WRITES.match(str(scope.get("path", ""))):
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"GET"), (b"content-type", PROBLEM_JSON.encode()),
                                    (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def route_label(scope: Scope) -> str:
    """The route template of a served request (``/v1/sessions/{session_id}/request``): the
    matched route's path (FastAPI's routes put themselves in the scope; Starlette's, such as
    ``/docs`` and ``/openapi.json``, only their endpoint, so they are found by it); else
    ``unmatched`` (404s: bounded labels)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    endpoint = scope.get("endpoint")
    app = scope.get("app")
    if endpoint is not None and app is not None:
        for candidate in getattr(getattr(app, "router", None), "routes", ()):
            if getattr(candidate, "endpoint", None) is endpoint and isinstance(getattr(candidate, "path", None), str):
                return str(candidate.path)
    return "unmatched"


async def _send_problem(send: Send, scope: Scope) -> None:
    body: dict[str, Any] = problem_body(500, "Internal error", "an unexpected error occurred; it has been logged "
                                        "with this request_id", instance=str(scope.get("path", "")))
    data = orjson.dumps(body)
    await send({"type": "http.response.start", "status": 500,
                "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
