"""API v1 routes: thin (parse, call one service, return a schema)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Path, Query, Request, Response

from app.api.deps import Meters, Profiles, Uow
from app.api.schemas import (
    AssembledRequest,
    EventBatch,
    EventBatchOut,
    PreconditionIn,
    PreconditionOut,
    SessionCreate,
    SessionCreated,
    SessionOut,
)
from app.api.routing import CheckedRoute
from app.services import preconditions as precondition_service
from app.services import requests as request_service
from app.services import sessions as session_service
from app.services import summarizer as summarizer_service

router = APIRouter(prefix="/v1", route_class=CheckedRoute)
log = logging.getLogger("ctxd")

PROBLEM = {"content": {"application/problem+json": {}}}
ERRORS: dict[int | str, dict[str, Any]] = {404: {"description": "Not found", **PROBLEM},
                                           409: {"description": "Conflict", **PROBLEM},
                                           413: {"description": "Payload or request body too large", **PROBLEM},
                                           416: {"description": "Range not satisfiable", **PROBLEM},
                                           422: {"description": "Invalid input", **PROBLEM}}


@router.post("/sessions", status_code=201, response_model=SessionCreated, responses=ERRORS)
def create_session(body: SessionCreate, request: Request, uow: Uow, profiles: Profiles, meters: Meters) -> SessionCreated:
    """Create a session (profile, task contract, system instructions, tool declarations).
    Contract, system or tool text that spells a control token of the profile is 422."""
    profile = body.profile or request.app.state.settings.default_profile
    with uow() as db:
        session_id = session_service.create_session(
            db, profiles, profile=profile, contract=body.contract.model_dump(), system=body.system,
            tools=[t.model_dump(exclude_none=True) for t in body.tools], metadata=body.metadata, meters=meters)
    return SessionCreated(id=session_id)


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=ERRORS)
def get_session(session_id: str, uow: Uow) -> SessionOut:
    with uow() as db:
        return SessionOut(**session_service.describe_session(db, session_id))


@router.post("/sessions/{session_id}/events", response_model=EventBatchOut, responses=ERRORS)
def post_events(session_id: str, batch: EventBatch, request: Request, uow: Uow, profiles: Profiles, meters: Meters,
                background: BackgroundTasks) -> EventBatchOut:
    """Append events in one transaction (all or nothing; idempotent on event_id). The new
    tool outputs' token counts are computed after the response (manifests report them)."""
    events = [e.model_dump(mode="json") for e in batch.events]
    with uow() as db:
        out = session_service.ingest_events(db, session_id, events,
                                            max_payload_bytes=request.app.state.settings.max_payload_bytes)
    handles = sorted(set(out.pop("new_tool_outputs")))
    if handles:
        background.add_task(_count_tokens, uow, profiles, meters, session_id, handles)
    state = request.app.state
    if state.summarizer is not None and any(r["status"] == "created" for r in out["results"]):
        # the optional model-written record: after the response, never inside a GET (issue 10 item 6)
        background.add_task(summarizer_service.summarize_after_post, uow, state.summarizer_http, state.summarizer,
                            state.summaries, session_id)
    return EventBatchOut(**out)


def _count_tokens(uow: Uow, profiles: Profiles, meters: Meters, session_id: str, handles: list[str]) -> None:
    try:
        tokenizer_id, counts = session_service.count_payload_tokens(uow, profiles, meters, session_id, handles)
        request_service.remember_payload_tokens(meters, session_id, tokenizer_id, counts)
    except Exception:  # an optimisation: never fails anything; GETs report the count as unknown
        log.exception("counting the tokens of %d payload(s) of session %s failed", len(handles), session_id)


@router.post("/sessions/{session_id}/preconditions", response_model=PreconditionOut, responses=ERRORS)
def check_precondition(session_id: str, body: PreconditionIn, uow: Uow) -> PreconditionOut:
    """Action-time precondition (compare-and-swap, seed 000 section 4.7.2): 200 when the
    artifact is still at the presented revision / content hash, else 409 problem+json
    with the current ``revision`` (and ``content_hash`` when known)."""
    with uow() as db:
        state = precondition_service.check(db, session_id, body.artifact, revision=body.revision,
                                           content_hash=body.content_hash)
    return PreconditionOut(**state.as_dict())


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
                   before_id: Annotated[int | None, Query(ge=1, description="page on: ids below this one")] = None,
                   ) -> dict[str, Any]:
    """The manifests persisted for this session's served requests, newest first."""
    with uow() as db:
        return request_service.list_manifests(db, session_id, limit=limit, before_id=before_id)


@router.get("/sessions/{session_id}/manifests/{manifest_id}", responses=ERRORS)
def get_manifest(session_id: str, manifest_id: Annotated[int, Path(ge=1)], uow: Uow) -> dict[str, Any]:
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
