"""Routes of recall (issue 14 item 3): the event log paged by seq, substring search over
it. Thin: parse, call one service, return a schema. Tenant scope: the auth middleware
answers 404 for another tenant's session before these run."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Query, Request, Response

from app.api.deps import Db
from app.api.problems import documented
from app.api.routing import CheckedRoute
from app.api.schemas import EventPage, SearchResult
from app.domain.recall import MAX_QUERY_CHARS
from app.services import recall as recall_service
from app.store.db import read_only

router = APIRouter(prefix="/v1", route_class=CheckedRoute)
JSON_BYTES = "application/json"
SEQ_MAX = 2**31 - 1


@router.get("/sessions/{session_id}/events", response_model=EventPage, responses=documented(404))
def list_events(session_id: str, request: Request, db: Db,
                after_seq: Annotated[int, Query(ge=0, le=SEQ_MAX, description="events with seq above this one")] = 0,
                limit: Annotated[int, Query(ge=1, le=200, description="events per page")] = 50,
                representation: Annotated[Literal["summary", "full"], Query(
                    description="summary: payloads and contents as their first 5 lines and size; full: whole")]
                = "summary") -> Response:
    """The session's event log in seq order, keyset-paged on seq: ``next_after_seq`` in the
    body and a ``Link: <...>; rel="next"`` header name the next page (none on the last)."""
    with read_only(db.read) as conn:
        page = recall_service.list_events(conn, session_id, after_seq=after_seq, limit=limit,
                                          representation=representation)
    headers = {}
    if page["next_after_seq"] is not None:
        query = urlencode({"after_seq": page["next_after_seq"], "limit": limit, "representation": representation})
        headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
    return Response(content=orjson.dumps(page), media_type=JSON_BYTES, headers=headers)


@router.get("/sessions/{session_id}/search", response_model=SearchResult, responses=documented(404))
def search_events(session_id: str, request: Request, db: Db,
                  q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS,
                                          description="text to find (3+ characters; a substring, case-insensitive)")],
                  limit: Annotated[int, Query(ge=1, le=100, description="hits per page")] = 10,
                  context: Annotated[int, Query(ge=0, le=50, description="lines of context around each match")] = 0,
                  cursor: Annotated[str | None, Query(max_length=40, description="next_cursor of the previous page")]
                  = None) -> Response:
    """The session's events holding ``q``, best first (standing alone as written, then
    inside a longer word, then in another case; newest first within each), with handles
    and 1-based inclusive line ranges usable as ``GET .../handles/{handle}?lines=a:b``."""
    with read_only(db.read) as conn:
        found = recall_service.search(conn, session_id, q, limit=limit, context=context, cursor=cursor)
    headers = {}
    if found["next_cursor"] is not None:
        query = urlencode({"q": q, "limit": limit, "context": context, "cursor": found["next_cursor"]})
        headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
    return Response(content=orjson.dumps(found), media_type=JSON_BYTES, headers=headers)
