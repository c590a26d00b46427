"""API v1 routes: thin (parse, call one service, return a schema)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Path, Query, Request, Response

from app.api.auth import Caller
from app.api.deps import Meters, Profiles, Uow
from app.api.problems import documented
from app.api.schemas import (
    ROW_ID_MAX,
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
from app.services import tenancy as tenancy_service

router = APIRouter(prefix="/v1", route_class=CheckedRoute)
log = logging.getLogger("ctxd")

@router.post("/sessions", status_code=201, response_model=SessionCreated, responses=documented(400, 413))
def create_session(body: SessionCreate, request: Request, uow: Uow, profiles: Profiles, meters: Meters,
                   caller: Caller) -> SessionCreated:
    """Create a session (profile, task contract, system instructions, tool declarations) of
    the caller's tenant. Contract, system or tool text that spells a control token of the
    profile is 422."""
    profile = body.profile or request.app.state.settings.default_profile
    with uow() as db:
        session_id = session_service.create_session(
            db, profiles, profile=profile, contract=body.contract.model_dump(), system=body.system,
            tools=[t.model_dump(exclude_none=True) for t in body.tools], metadata=body.metadata, meters=meters,
            model=body.model, tenant_id=caller.tenant_id)
    return SessionCreated(id=session_id)


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=documented(404))
def get_session(session_id: str, uow: Uow, profiles: Profiles) -> SessionOut:
    """The session (``model``: the one its request bodies name), its event count, last seq
    and artifact revisions."""
    with uow() as db:
        return SessionOut(**session_service.describe_session(db, session_id, profiles))


@router.post("/sessions/{session_id}/events", response_model=EventBatchOut, responses=documented(400, 404, 409, 413))
def post_events(session_id: str, batch: EventBatch, request: Request, uow: Uow, profiles: Profiles, meters: Meters,
                background: BackgroundTasks, caller: Caller) -> EventBatchOut:
    """Append events in one transaction (all or nothing; idempotent on event_id). The new
    tool outputs' token counts are computed after the response (manifests report them).
    A batch that brings the tenant over its storage quota is 429 and stores nothing."""
    events = [e.model_dump(mode="json") for e in batch.events]
    settings = request.app.state.settings
    with uow() as db:
        out = session_service.ingest_events(db, session_id, events, max_payload_bytes=settings.max_payload_bytes,
                                            redact=settings.redact_secrets)
        tenancy_service.check_storage_quota(db, caller.tenant_id, settings.storage_quota_bytes)
    handles = sorted(set(out.pop("new_tool_outputs")))
    if handles:
        background.add_task(_count_tokens, uow, profiles, meters, session_id, handles)
    return EventBatchOut(**out)


def _count_tokens(uow: Uow, profiles: Profiles, meters: Meters, session_id: str, handles: list[str]) -> None:
    try:
        tokenizer_id, counts = session_service.count_payload_tokens(uow, profiles, meters, session_id, handles)
        request_service.remember_payload_tokens(meters, session_id, tokenizer_id, counts)
    except Exception:  # an optimisation: never fails anything; GETs report the count as unknown
        log.exception("counting the tokens of %d payload(s) of session %s failed", len(handles), session_id)


@router.post("/sessions/{session_id}/preconditions", response_model=PreconditionOut, responses=documented(400, 404, 409, 413))
def check_precondition(session_id: str, body: PreconditionIn, uow: Uow) -> PreconditionOut:
    """Action-time precondition (compare-and-swap, seed 000 section 4.7.2): 200 when the
    artifact is still at the presented revision / content hash, else 409 problem+json
    with the current ``revision`` (and ``content_hash`` when known)."""
    with uow() as db:
        state = precondition_service.check(db, session_id, body.artifact, revision=body.revision,
                                           content_hash=body.content_hash)
    return PreconditionOut(**state.as_dict())


@router.get("/sessions/{session_id}/request", response_model=AssembledRequest, responses=documented(404, 503))
def get_request(session_id: str, uow: Uow, profiles: Profiles, meters: Meters,
                format: Annotated[str, Query(description="wire format: openai, anthropic or tokens")] = "openai") -> AssembledRequest:
    """The next model request for ``format``, with its manifest (persisted)."""
    with uow() as db:
        out = request_service.assemble_request(db, profiles, meters, session_id, fmt=format)
    return AssembledRequest(request=out.request, manifest=out.manifest)


@router.get("/sessions/{session_id}/manifests", responses=documented(404))
def list_manifests(session_id: str, uow: Uow,
                   limit: Annotated[int, Query(ge=1, le=500, description="manifests per page")] = 50,
                   before_id: Annotated[int | None, Query(ge=1, le=ROW_ID_MAX, description="page on: ids below this one")] = None,
                   ) -> dict[str, Any]:
    """The manifests persisted for this session's served requests, newest first."""
    with uow() as db:
        return request_service.list_manifests(db, session_id, limit=limit, before_id=before_id)


@router.get("/sessions/{session_id}/manifests/{manifest_id}", responses=documented(404))
def get_manifest(session_id: str, manifest_id: Annotated[int, Path(ge=1, le=ROW_ID_MAX)], uow: Uow) -> dict[str, Any]:
    """One persisted manifest, as it was served (``manifest.id`` of a request)."""
    with uow() as db:
        return request_service.get_manifest(db, session_id, manifest_id)
