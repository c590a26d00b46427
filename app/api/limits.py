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

import json
from typing import Any

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import problem


class BodyTooLarge(HTTPException):
    """A request body over the limit; ``extra`` goes into the problem+json body."""

    def __init__(self, max_bytes: int, *, size_bytes: int | None = None) -> None:
        # a streamed body (no Content-Length) is refused once it passes the limit: its size is not known
        seen = f"request body of {size_bytes:,} bytes" if size_bytes is not None else "request body (streamed)"
        super().__init__(413, f"{seen} exceeds the limit of {max_bytes:,} bytes (setting CTXD_MAX_BODY_BYTES)")
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


class MalformedJson(HTTPException):
    """A JSON body that does not parse: 400 problem+json with where it broke (issue 12 item 6)."""

    def __init__(self, error: ValueError) -> None:
        where = {}
        if isinstance(error, json.JSONDecodeError):
            where = {"line": error.lineno, "column": error.colno, "position": error.pos}
            detail = f"the body is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        else:
            detail = f"the body is not valid JSON: {error}"
        super().__init__(400, detail)
        self.extra: dict[str, Any] = where


#: Event fields whose size CTXD_MAX_PAYLOAD_BYTES bounds (413), not CTXD_MAX_STRING_CHARS.
PAYLOAD_FIELDS = frozenset({"payload", "content", "reasoning"})


def _payload_field(loc: tuple[Any, ...]) -> bool:
    """``events[i].payload|content|reasoning`` and ``events[i].tool_calls[j].arguments``, and
    every string inside a provider message ``messages[i]`` of POST /messages (text, tool
    output, arguments, tool input, thinking: each event's payload is bounded by
    CTXD_MAX_PAYLOAD_BYTES at ingest, identifiers by the event schema, instructions by
    CTXD_MAX_STRING_CHARS in the route)."""
    if len(loc) >= 3 and loc[0] == "messages" and isinstance(loc[1], int):
        return True
    if len(loc) < 3 or loc[0] != "events" or not isinstance(loc[1], int):
        return False
    return (len(loc) == 3 and loc[2] in PAYLOAD_FIELDS) or (
        len(loc) == 5 and loc[2] == "tool_calls" and isinstance(loc[3], int) and loc[4] == "arguments")


def json_shape_problem(value: Any, *, max_depth: int, max_string_chars: int) -> tuple[tuple[Any, ...], str, str] | None:
    """``(loc, error type, message)`` of the first place where ``value`` (a parsed JSON body)
    nests arrays and objects deeper than ``max_depth`` or holds a string (or key) longer than
    ``max_string_chars`` characters (event payload fields aside: :func:`_payload_field`), or
    None. ``loc`` is relative to the body, as pydantic reports it."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        loc, item = stack.pop()
        if isinstance(item, str):
            if len(item) > max_string_chars and not _payload_field(loc):
                return loc, "string_too_long", (f"string of {len(item):,} characters exceeds the limit of "
                                                f"{max_string_chars:,} (setting CTXD_MAX_STRING_CHARS)")
            continue
        if not isinstance(item, (dict, list)):
            continue
        if len(loc) + 1 > max_depth:
            return loc, "json_too_deep", (f"arrays and objects nest deeper than {max_depth} levels here "
                                          "(setting CTXD_MAX_JSON_DEPTH)")
        if isinstance(item, dict):
            for key, child in item.items():
                if len(key) > max_string_chars:
                    return loc + (key[:40] + "…",), "string_too_long", (
                        f"object key of {len(key):,} characters exceeds the limit of {max_string_chars:,} "
                        "(setting CTXD_MAX_STRING_CHARS)")
                stack.append((loc + (key,), child))
        else:
            stack.extend((loc + (i,), child) for i, child in enumerate(item))
    return None
