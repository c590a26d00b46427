"""The route class of every ctxd router: text that cannot be encoded as UTF-8 is refused
before validation, in one place for every endpoint, body, query string and path.

JSON allows the escape ``\\ud83d`` alone (an agent that cuts an emoji in half sends it), and
Python's ``json`` decodes it, and raw surrogate bytes, into a lone surrogate that no
UTF-8 encoder accepts: stored or counted, it would fail later as a 500. Here such a body
is a 422 problem+json naming the field (``loc``, as pydantic reports it: ``["body",
"events", 0, "content"]``), and nothing is stored. A body or a percent-encoded query
string or path that is not valid UTF-8 is a 422 naming ``["body"]``, ``["query", name]``
or ``["path"]`` (instead of the 400, or the silent U+FFFD, it would otherwise get); so is
a path holding a NUL (PostgreSQL text cannot hold one; identifiers in bodies are checked
by their schema, app/api/schemas.py).

Issue 12: a JSON body that does not parse is a 400 problem+json (line, column); one nested
deeper than ``CTXD_MAX_JSON_DEPTH`` or holding a string longer than ``CTXD_MAX_STRING_CHARS``
(event payload fields aside: ``CTXD_MAX_PAYLOAD_BYTES``, 413) is a 422 naming the place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app.api.deps import state_of
from app.api.limits import MalformedJson, json_shape_problem
from app.domain.text import first_surrogate, printable_loc

UNICODE_ERROR = "string_unicode"


class _ParsedRequest(Request):
    """The request with its JSON body already parsed (and checked) once."""

    def __init__(self, request: Request, body: bytes, value: Any) -> None:
        super().__init__(request.scope, request.receive)
        self._checked_body = body
        self._checked_value = value

    async def body(self) -> bytes:
        return self._checked_body

    async def json(self) -> Any:
        return self._checked_value


def _invalid(loc: tuple[Any, ...], msg: str, *, kind: str = UNICODE_ERROR) -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": tuple(printable_loc(loc)), "msg": msg, "input": None}])


def _check_query(raw: bytes) -> None:
    for pair in raw.split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            key = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(("query",), f"a query parameter name is not valid UTF-8 (byte {exc.start})") from None
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(("query", key), f"the value is not valid UTF-8 (byte {exc.start} once decoded)") from None


def _is_json(request: Request) -> bool:
    kind = request.headers.get("content-type")
    if not kind:
        return True  # FastAPI parses a body without a content type as JSON too
    media = kind.split(";", 1)[0].strip().lower()
    return media.startswith("application/") and media.endswith(("/json", "+json"))


async def checked_request(request: Request) -> Request:
    """``request`` after the UTF-8 checks (module docstring); a JSON body comes back parsed.

    Raises:
        RequestValidationError: (422 problem+json) text that is not valid UTF-8 or holds a
            lone surrogate, with its ``loc``.
    """
    raw_path = request.scope.get("raw_path")
    if isinstance(raw_path, bytes):
        try:
            path = unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(("path",), f"the path is not valid UTF-8 (byte {exc.start} once decoded)") from None
        if "\x00" in path:
            raise _invalid(("path",), "the path contains a NUL character (U+0000)")
    query = request.scope.get("query_string") or b""
    if query:
        _check_query(query)
    if request.method in ("GET", "HEAD", "DELETE", "OPTIONS") or not _is_json(request):
        return request
    body = await request.body()
    if not body:
        return request
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(("body",), f"the body is not valid UTF-8 (byte {exc.start})") from None
    settings = state_of(request.app).settings
    try:
        value = json.loads(text.removeprefix("\ufeff"))
    except ValueError as exc:
        raise MalformedJson(exc) from None
    except RecursionError:  # valid JSON nested beyond the parser's stack: over any depth limit
        raise _invalid(("body",), f"arrays and objects nest deeper than {settings.max_json_depth} levels "
                                  "(setting CTXD_MAX_JSON_DEPTH)", kind="json_too_deep") from None
    shape = json_shape_problem(value, max_depth=settings.max_json_depth, max_string_chars=settings.max_string_chars)
    if shape is not None:
        loc, kind, message = shape
        raise _invalid(("body", *loc), message, kind=kind)
    found = first_surrogate(value, ("body",))
    if found is not None:
        loc, at = found
        raise _invalid(loc, f"text cannot be encoded as UTF-8: a lone surrogate at character {at} "
                            "(half of an emoji or other character outside the BMP?)")
    return _ParsedRequest(request, body, value)


class CheckedRoute(APIRoute):
    """An APIRoute whose handler first runs :func:`checked_request`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            return await handler(await checked_request(request))

        return checked
