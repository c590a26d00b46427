"""API v1 routes: thin (parse, call one service, return a schema)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

import orjson

from app.api.deps import Db, Memo, Meters, Profiles, Uow
from app.api.schemas import (
    AssembledRequest,
    EventBatch,
    EventBatchOut,
    ManifestList,
    ManifestOut,
    SessionCreate,
    SessionCreated,
    SessionOut,
)
from app.services import requests as request_service
from app.services import sessions as session_service
from app.store.db import read_only

router = APIRouter(prefix="/v1")

PROBLEM = {"content": {"application/problem+json": {}}}
ERRORS: dict[int | str, dict[str, Any]] = {404: {"description": "Not found", **PROBLEM},
                                           409: {"description": "Conflict", **PROBLEM},
                                           416: {"description": "Range not satisfiable", **PROBLEM},
                                           422: {"description": "Invalid input", **PROBLEM}}


@router.post("/sessions", status_code=201, response_model=SessionCreated, responses=ERRORS)
def create_session(body: SessionCreate, request: Request, uow: Uow, profiles: Profiles) -> SessionCreated:
    """Create a session (profile, task contract, system instructions, tool declarations)."""
    profile = body.profile or request.app.state.settings.default_profile
    with uow() as db:
        session_id = session_service.create_session(
            db, profiles, profile=profile, contract=body.contract.model_dump(), system=body.system,
            tools=[t.model_dump(exclude_none=True) for t in body.tools], metadata=body.metadata)
    return SessionCreated(id=session_id)


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=ERRORS)
def get_session(session_id: str, db: Db) -> SessionOut:
    with read_only(db.read) as conn:
        return SessionOut(**session_service.describe_session(conn, session_id))


@router.post("/sessions/{session_id}/events", response_model=EventBatchOut, responses=ERRORS)
def post_events(session_id: str, batch: EventBatch, uow: Uow) -> EventBatchOut:
    """Append events in one transaction (all or nothing; idempotent on event_id)."""
    events = [e.model_dump(mode="json") for e in batch.events]
    with uow() as db:
        return EventBatchOut(**session_service.ingest_events(db, session_id, events))


# The GET answers below declare their response models (so the OpenAPI document gives the
# manifest's schema) but return pre-serialized JSON: a 150 kB body is not re-validated.
JSON_BYTES = "application/json"


@router.get("/sessions/{session_id}/request", response_model=AssembledRequest,
            responses=ERRORS | {503: {"description": "Layout state contention; retry", **PROBLEM}})
def get_request(session_id: str, db: Db, memo: Memo, profiles: Profiles, meters: Meters,
                format: Annotated[str, Query(description="wire format: openai, anthropic or tokens")] = "openai") -> Response:
    """The next model request for ``format``, with its manifest (persisted). A GET may
    persist a layout decision; it never changes what an identical second GET returns."""
    out = request_service.assemble_request(db.write, profiles, meters, session_id, fmt=format, memo=memo,
                                           read_factory=db.read)
    return Response(content=out.response_bytes(), media_type=JSON_BYTES)


@router.get("/sessions/{session_id}/manifests", response_model=ManifestList, responses=ERRORS)
def list_manifests(session_id: str, db: Db,
                   limit: Annotated[int, Query(ge=1, le=500, description="manifests per page")] = 50,
                   before_id: Annotated[int | None, Query(ge=1, description="page on: ids below this one")] = None,
                   ) -> Response:
    """The manifests persisted for this session's served requests, newest first."""
    with read_only(db.read) as conn:
        page, next_before_id = request_service.list_manifests(conn, session_id, limit=limit, before_id=before_id)
    body = {"session_id": session_id, "manifests": [m.to_json() for m in page], "next_before_id": next_before_id}
    return Response(content=orjson.dumps(body), media_type=JSON_BYTES)


@router.get("/sessions/{session_id}/manifests/{manifest_id}", response_model=ManifestOut, responses=ERRORS)
def get_manifest(session_id: str, manifest_id: Annotated[int, Path(ge=1)], db: Db) -> Response:
    """One persisted manifest, as it was served (``manifest.id`` of a request)."""
    with read_only(db.read) as conn:
        manifest = request_service.get_manifest(conn, session_id, manifest_id)
    return Response(content=orjson.dumps(manifest.to_json()), media_type=JSON_BYTES)


@router.get("/handles/{handle}", responses=ERRORS | {200: {"content": {"application/octet-stream": {}}}})
def get_handle(handle: str, db: Db,
               offset: Annotated[int | None, Query(ge=0, description="byte offset")] = None,
               length: Annotated[int | None, Query(ge=0, description="bytes")] = None,
               lines: Annotated[str | None, Query(pattern=r"^\d+:\d+$", description="a:b, 1-based, inclusive")] = None) -> Response:
    """The raw payload exactly as posted, or a byte or line slice of it."""
    with read_only(db.read) as conn:
        full, data, size = session_service.read_handle(conn, handle, offset=offset, length=length, lines=lines)
    return Response(content=data, media_type="application/octet-stream",
                    headers={"X-Ctxd-Handle": full, "X-Ctxd-Payload-Size": str(size), "ETag": f'"{full}"'})
