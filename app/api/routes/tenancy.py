"""Routes of issue 12: sessions listed and deleted, scoped handle reads, profiles.
Thin: parse, call one service, return a schema."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from app.api.auth import Caller, session_owners
from app.api.deps import Config, Db, Memo, Profiles, Uow
from app.api.problems import documented
from app.api.routing import CheckedRoute
from app.api.schemas import ProfileList, ProfileOut, SessionDeleted, SessionList
from app.services import sessions as session_service
from app.services import tenancy as tenancy_service
from app.store.db import read_only

router = APIRouter(prefix="/v1", route_class=CheckedRoute)
audit = logging.getLogger("ctxd.audit")

OCTETS: dict[int | str, dict[str, Any]] = {200: {"content": {"application/octet-stream": {}}, "description": "The payload's bytes"}}


@router.get("/sessions", response_model=SessionList, responses=documented())
def list_sessions(db: Db, caller: Caller, profiles: Profiles,
                  limit: Annotated[int, Query(ge=1, le=500, description="sessions per page")] = 50,
                  cursor: Annotated[str | None, Query(max_length=200, description="next_cursor of the previous page")]
                  = None) -> SessionList:
    """The caller's tenant's sessions, newest first, keyset-paged (``next_cursor``)."""
    with read_only(db.read) as conn:
        return SessionList(**tenancy_service.list_sessions(conn, caller, limit=limit, cursor=cursor,
                                                           profiles=profiles))


@router.delete("/sessions/{session_id}", response_model=SessionDeleted, responses=documented(404, 409))
def delete_session(session_id: str, request: Request, uow: Uow, memo: Memo, caller: Caller) -> SessionDeleted:
    """Delete the session: its events, manifests, tool calls, artifacts, prefix and layout
    states, memo entries, and the payloads no other session references. A session that
    still has child sessions is not deleted (409, ``children`` lists them; issue 16)."""
    with uow() as db:
        out = tenancy_service.delete_session(db, session_id, caller)
    memo.forget(session_id)
    session_owners(request.app).forget(caller.tenant_id, session_id)
    audit.info("session deleted: tenant=%s session=%s key_id=%s payloads_deleted=%d", caller.tenant_id, session_id,
               caller.key_id, out["payloads_deleted"])
    return SessionDeleted(id=session_id, **out)


def _read(db: Db, caller: Caller, handle: str, session_id: str | None, offset: int | None, length: int | None,
          lines: str | None) -> Response:
    with read_only(db.read) as conn:
        full = tenancy_service.resolve_handle(conn, handle, caller, session_id=session_id)
        full, data, size = session_service.read_handle(conn, full, offset=offset, length=length, lines=lines)
    audit.info("handle read: tenant=%s session=%s handle=%s bytes=%d key_id=%s", caller.tenant_id, session_id or "-",
               full, len(data), caller.key_id)
    return Response(content=data, media_type="application/octet-stream",
                    headers={"X-Ctxd-Handle": full, "X-Ctxd-Payload-Size": str(size), "ETag": f'"{full}"'})


Offset = Annotated[int | None, Query(ge=0, le=2**63 - 1, description="byte offset")]
Length = Annotated[int | None, Query(ge=0, le=2**63 - 1, description="bytes")]
Lines = Annotated[str | None, Query(pattern=r"^\d{1,18}:\d{1,18}$", description="a:b, 1-based, inclusive")]


@router.get("/handles/{handle}", responses=documented(404, 416) | OCTETS)
def get_handle(handle: str, db: Db, caller: Caller, offset: Offset = None, length: Length = None,
               lines: Lines = None) -> Response:
    """The raw payload exactly as posted (or a byte or line slice), when a session of the
    caller's tenant posted it or a request was derived with it; a prefix of 8+ hex
    characters resolves among those only. Another tenant's payload is a 404."""
    return _read(db, caller, handle, None, offset, length, lines)


@router.get("/sessions/{session_id}/handles/{handle}", responses=documented(404, 416) | OCTETS)
def get_session_handle(session_id: str, handle: str, db: Db, caller: Caller, offset: Offset = None,
                       length: Length = None, lines: Lines = None) -> Response:
    """The raw payload behind ``handle`` when this session posted it or a request of this
    session was derived with it (a prefix resolves within the session only)."""
    return _read(db, caller, handle, session_id, offset, length, lines)


@router.get("/profiles", response_model=ProfileList, responses=documented())
def list_profiles(config: Config, profiles: Profiles) -> ProfileList:
    """The configured model profiles (tokenizer, window W, output reserve O, headroom M,
    input limit, cache model, prices) and the default one."""
    out = []
    for name in profiles.names():
        p = profiles.get(name)
        out.append(ProfileOut(name=p.name, model=p.model, tokenizer=dict(p.tokenizer), window=p.window,
                              output_reserve=p.output_reserve, headroom=p.headroom,
                              input_limit=p.window - p.output_reserve - p.headroom, item_cap_tokens=p.item_cap_tokens,
                              render_reasoning=p.render_reasoning, recall=p.recall, cache=dict(p.cache), prices=dict(p.prices)))
    return ProfileList(default=config.default_profile, profiles=out)
