"""API v1 routes: thin (parse, call one service, return a schema)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from app.api.deps import Meters, Profiles, Uow
from app.api.schemas import (ROW_ID_MAX, AssembledRequest, EventBatch, EventBatchOut, SessionCreate, SessionCreated,
                             SessionOut)
from app.services import requests as request_service
from app.services import sessions as session_service

router = APIRouter(prefix="/v1")

PROBLEM = {"content": {"application/problem+json": {}}}
ERRORS: dict[int | str, dict[str, Any]] = {400: {"description": "The body cannot be parsed", **PROBLEM},
                                           404: {"description": "Not found", **PROBLEM},
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
            tools=[t.model_dump(exclude_none=True) for t in body.tools], metadata=body.metadata, model=body.model)
    return SessionCreated(id=session_id)


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=ERRORS)
def get_session(session_id: str, uow: Uow, profiles: Profiles) -> SessionOut:
    """The session (``model``: the one its request bodies name), its event count, last seq
    and artifact revisions."""
    with uow() as db:
        return SessionOut(**session_service.describe_session(db, session_id, profiles))


@router.post("/sessions/{session_id}/events", response_model=EventBatchOut, responses=ERRORS)
def post_events(session_id: str, batch: EventBatch, uow: Uow) -> EventBatchOut:
    """Append events in one transaction (all or nothing; idempotent on event_id)."""
    events = [e.model_dump(mode="json") for e in batch.events]
    with uow() as db:
        return EventBatchOut(**session_service.ingest_events(db, session_id, events))


@router.get("/sessions/{session_id}/request", response_model=AssembledRequest, responses=ERRORS)
def get_request(session_id: str, uow: Uow, profiles: Profiles, meters: Meters,
                format: Annotated[str, Query(description="wire format: openai, anthropic or tokens")] = "openai") -> AssembledRequest:
    """The next model request for ``format``, with its manifest (persisted)."""
    with uow() as db:
        out = request_service.assemble_request(db, profiles, meters, session_id, fmt=format)
    return AssembledRequest(request=out.request, manifest=out.manifest)


@router.get("/sessions/{session_id}/manifests", responses=ERRORS)
def list_manifests(session_id: str, uow: Uow,
                   limit: Annotated[int, Query(ge=1, le=500, description="manifests per page")] = 50,
                   before_id: Annotated[int | None, Query(ge=1, le=ROW_ID_MAX, description="page on: ids below this one")] = None,
                   ) -> dict[str, Any]:
    """The manifests persisted for this session's served requests, newest first."""
    with uow() as db:
        return request_service.list_manifests(db, session_id, limit=limit, before_id=before_id)


@router.get("/sessions/{session_id}/manifests/{manifest_id}", responses=ERRORS)
def get_manifest(session_id: str, manifest_id: Annotated[int, Path(ge=1, le=ROW_ID_MAX)], uow: Uow) -> dict[str, Any]:
    """One persisted manifest, as it was served (``manifest.id`` of a request)."""
    with uow() as db:
        return request_service.get_manifest(db, session_id, manifest_id)


@router.get("/handles/{handle}", responses=ERRORS | {200: {"content": {"application/octet-stream": {}}}})
def get_handle(handle: str, uow: Uow,
               offset: Annotated[int | None, Query(ge=0, description="byte offset")] = None,
               length: Annotated[int | None, Query(ge=0, description="bytes")] = None,
               lines: Annotated[str | None, Query(pattern=r"^\d+:\d+$", description="a:b, 1-based, inclusive")] = None) -> Response:
    """The raw payload exactly as posted, or a byte or line slice of it."""
    with uow() as db:
        full, data, size = session_service.read_handle(db, handle, offset=offset, length=length, lines=lines)
    return Response(content=data, media_type="application/octet-stream",
                    headers={"X-Ctxd-Handle": full, "X-Ctxd-Payload-Size": str(size), "ETag": f'"{full}"'})
