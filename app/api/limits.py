"""Request body limit (issue 9, item 7): 413 problem+json, memory bounded by the setting.

A pure ASGI middleware, so that a body over the limit is never buffered:

* ``Content-Length`` over ``max_bytes``: answered 413 at once; the app (routing, body
  parsing, database) never runs and no body byte is read.
* a body without ``Content-Length`` (chunked) or longer than it claimed: ``receive`` counts
  the bytes as they arrive and, once past ``max_bytes``, raises :class:`BodyTooLarge`
  (an ``HTTPException``, so FastAPI's body reader lets it through to the problem+json
  handler in ``app/api/problems.py``) before the route runs; nothing is stored.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import problem


class BodyTooLarge(HTTPException):
    """A request body over the limit; ``extra`` goes into the problem+json body."""

    def __init__(self, max_bytes: int, *, size_bytes: int | None = None) -> None:
        seen = f"{size_bytes:,} bytes" if size_bytes is not None else "more"
        super().__init__(413, f"request body of {seen} exceeds the limit of {max_bytes:,} bytes "
                              "(setting CTXD_MAX_BODY_BYTES)")
        self.extra: dict[str, Any] = {"max_bytes": max_bytes}
        if size_bytes is not None:
            self.extra["size_bytes"] = size_bytes


class BodyLimitMiddleware:
    """Refuse HTTP request bodies over ``max_bytes`` with 413 problem+json (see module)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            error = BodyTooLarge(self.max_bytes, size_bytes=int(declared))
            response = problem(413, "Request body too large", str(error.detail), instance=scope.get("path"),
                               **error.extra)
            response.headers["Connection"] = "close"  # the unread body is not drained
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited_receive, send)
