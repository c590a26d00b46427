"""API v1 routes: thin (parse, call one service, return a schema)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, BackgroundTasks, Path, Query, Request, Response
from sqlalchemy.orm import Session as OrmSession

from app.api.auth import Caller
from app.api.deps import (
    Config,
    Db,
    Memo,
    Meters,
    Profiles,
    State,
    Uow,
    candidates_of,
    pass_due_of,
    state_of,
    summary_wait_of,
)
from app.api.problems import documented
from app.api.routing import CheckedRoute
from app.api.schemas import (
    ROW_ID_MAX,
    AssembledRequest,
    ChildCreate,
    EventBatch,
    EventBatchOut,
    ManifestList,
    ManifestOut,
    MessageBatch,
    MessageBatchOut,
    PreconditionIn,
    PreconditionOut,
    SessionCreate,
    SessionCreated,
    SessionOut,
    SessionUpdate,
    validated_messages,
)
from app.domain.tenancy import Principal
from app.services import messages as message_service
from app.services import preconditions as precondition_service
from app.services import requests as request_service
from app.services import sessions as session_service
from app.services import tenancy as tenancy_service
from app.services.after_ingest import schedule_after_ingest
from app.services.app_state import AppState
from app.store.db import read_only, unit_of_work
from app.wire.inbound import map_messages

router = APIRouter(prefix="/v1", route_class=CheckedRoute)
log = logging.getLogger("ctxd")

@router.post("/sessions", status_code=201, response_model=SessionCreated, responses=documented(400, 413))
def create_session(body: SessionCreate, config: Config, uow: Uow, profiles: Profiles, meters: Meters,
                   caller: Caller) -> SessionCreated:
    """Create a session (profile, task contract, system instructions, tool declarations) of
    the caller's tenant. Contract, system or tool text that spells a control token of the
    profile is 422."""
    profile = body.profile or config.default_profile
    with uow() as db:
        session_id = session_service.create_session(
            db, profiles, profile=profile, contract=body.contract.model_dump(), system=body.system,
            tools=[t.model_dump(exclude_none=True) for t in body.tools], metadata=body.metadata, meters=meters,
            model=body.model, tenant_id=caller.tenant_id, title=body.title)
    return SessionCreated(id=session_id)


@router.post("/sessions/{session_id}/children", status_code=201, response_model=SessionCreated,
             responses=documented(400, 404, 413))
def create_child(session_id: str, body: ChildCreate, uow: Uow, profiles: Profiles, meters: Meters,
                 caller: Caller) -> SessionCreated:
    """Create a child session for a sub-agent (issue 16): same tenant, the parent's
    constraints verbatim, ``goal`` the sub-task; system, tools, profile and model default to
    the parent's, and so do metadata ``shell_tools`` and ``invalidation`` unless ``metadata``
    gives them. A ``conclusion`` event posted to the child returns to this session as one
    observation naming the child and the handle of its text; nothing else of the child
    enters this session's requests. A session with children cannot be deleted (409)."""
    with uow() as db:
        tenancy_service.require_session(db, session_id, caller)
        child = session_service.create_child(
            db, profiles, session_id, goal=body.goal, system=body.system,
            tools=None if body.tools is None else [t.model_dump(exclude_none=True) for t in body.tools],
            metadata=body.metadata, meters=meters, profile=body.profile, model=body.model)
    return SessionCreated(id=child)


@router.get("/sessions/{session_id}", response_model=SessionOut, responses=documented(404))
def get_session(session_id: str, db: Db, profiles: Profiles) -> SessionOut:
    """The session (``model``: the one its request bodies name), its event count, last seq
    and artifact revisions."""
    with read_only(db.read) as conn:
        return SessionOut(**session_service.describe_session(conn, session_id, profiles))


@router.patch("/sessions/{session_id}", response_model=SessionOut, responses=documented(400, 404, 413))
def update_session(session_id: str, body: SessionUpdate, uow: Uow, profiles: Profiles, caller: Caller) -> SessionOut:
    """Change what may change of the caller's session after its create: ``title`` (a new
    one, or null to clear it). Returns the session as ``GET`` does. No request depends on
    it: the layout, the manifests and the prefix are unchanged."""
    with uow() as db:
        tenancy_service.require_session(db, session_id, caller)
        out = session_service.set_title(db, session_id, body.title, profiles)
    return SessionOut(**out)


@router.post("/sessions/{session_id}/events", response_model=EventBatchOut, responses=documented(400, 404, 409, 413))
def post_events(session_id: str, batch: EventBatch, state: State, background: BackgroundTasks, caller: Caller
                ) -> EventBatchOut:
    """Append events in one transaction (all or nothing; idempotent on event_id). The new
    tool outputs' token counts are computed after the response (manifests report them).
    A batch that brings the tenant over its storage quota is 429 and stores nothing."""
    events = batch.posted()
    settings = state.settings
    return EventBatchOut(**_ingest(
        state, background, caller, session_id, results="results",
        ingest=lambda db: session_service.ingest_events(db, session_id, events,
                                                        max_payload_bytes=settings.max_payload_bytes,
                                                        redact=settings.redact_secrets, shell_states=state.shell_states,
                                                        memo=state.memo)))


def _ingest(state: AppState, background: BackgroundTasks, caller: Principal, session_id: str, *,
            ingest: Callable[[OrmSession], dict[str, Any]], results: str) -> dict[str, Any]:
    """A POST that appends events: ``ingest(db)`` in one unit of work that commits only
    within the tenant's storage quota (429 otherwise, nothing stored), then the work after
    the response (app/services/after_ingest.py). Returns ingest's answer without
    ``new_tool_outputs`` (``results``: the key of its per-item list, each with a ``status``)."""
    with unit_of_work(state.session_factory) as db:
        out = ingest(db)
        tenancy_service.check_storage_quota(db, caller.tenant_id, state.settings.storage_quota_bytes)
    created = any(r["status"] == "created" for r in out[results])
    schedule_after_ingest(state, background.add_task, session_id, created=created,
                          last_seq=int(out["last_seq"]) if "last_seq" in out else None,
                          new_tool_outputs=out.pop("new_tool_outputs"))
    return out


@router.post("/sessions/{session_id}/messages", response_model=MessageBatchOut,
             responses=documented(400, 404, 409, 413))
def post_messages(session_id: str, batch: MessageBatch, state: State, background: BackgroundTasks, caller: Caller,
                  format: Annotated[Literal["openai", "anthropic"], Query(
                      description="the messages' format: openai (chat completions) or anthropic (Messages API)")]
                  = "openai") -> MessageBatchOut:
    """Append provider messages exactly as the SDK returns them (README "Provider
    messages"): each maps to events (or to the session's instructions) at its position in
    the session's message stream. Re-posting the whole history every turn is safe: a
    message at a known position is a no-op when equal and 409 when changed. One
    transaction; bad input is 422 and stores nothing."""
    settings = state.settings
    mapped = validated_messages(map_messages(batch.messages, fmt=format, start=batch.start, system=batch.system),
                                start=batch.start, max_instructions_chars=settings.max_string_chars)
    return MessageBatchOut(**_ingest(
        state, background, caller, session_id, results="messages",
        ingest=lambda db: message_service.ingest_messages(db, session_id, mapped, start=batch.start,
                                                          profiles=state.profiles, meters=state.meters,
                                                          max_payload_bytes=settings.max_payload_bytes,
                                                          redact=settings.redact_secrets,
                                                          shell_states=state.shell_states, memo=state.memo)))


@router.post("/sessions/{session_id}/preconditions", response_model=PreconditionOut, responses=documented(400, 404, 409, 413))
def check_precondition(session_id: str, body: PreconditionIn, uow: Uow) -> PreconditionOut:
    """Action-time precondition (compare-and-swap, seed 000 section 4.7.2): 200 when the
    artifact is still at the presented revision / content hash, else 409 problem+json
    with the current ``revision`` (and ``content_hash`` when known)."""
    with uow() as db:
        state = precondition_service.check(db, session_id, body.artifact, revision=body.revision,
                                           content_hash=body.content_hash)
    return PreconditionOut(**state.as_dict())


# The GET answers below declare their response models (so the OpenAPI document gives the
# manifest's schema) but return pre-serialized JSON: a 150 kB body is not re-validated.
JSON_BYTES = "application/json"


@router.get("/sessions/{session_id}/request", response_model=AssembledRequest,
            responses=documented(404, 503))
def get_request(session_id: str, request: Request,
                format: Annotated[str, Query(description="wire format: openai, anthropic or tokens")] = "openai") -> Response:
    """The next model request for ``format``, with its manifest (persisted). A GET may
    persist a layout decision; it never changes what an identical second GET returns. A
    GET that runs a compaction pass waits for this worker's summarizer job of that pass
    while it is in flight, at most ``CTXD_SUMMARIZER_WAIT_SECONDS``."""
    # what app/api/deps.py's dependencies give, read here at once: this route is the hot
    # path, and FastAPI solves each declared dependency apart (~0.3 ms for seven)
    state = state_of(request.app)
    out = request_service.assemble_request(state.session_factory, state.profiles, state.meters, session_id, fmt=format,
                                           memo=state.memo, read_factory=state.read_factory,
                                           pass_due=pass_due_of(state), candidates=candidates_of(state),
                                           wait=summary_wait_of(state))
    # the GET's steps (load, plan, save) in ms, for latency work (W3C Server Timing)
    return Response(content=out.response_bytes(), media_type=JSON_BYTES,
                    headers={"Server-Timing": out.server_timing()})


@router.get("/sessions/{session_id}/record", responses=documented(404))
def get_record(session_id: str, db: Db, memo: Memo, profiles: Profiles, meters: Meters) -> dict[str, Any]:
    """The session's progress record (seed 000 table 7): what the trunk of its next select
    request holds of the events folded so far, built from the event log and saved with the
    layout state by the last pass (issue 10)."""
    return request_service.get_record(db.read, profiles, meters, session_id, memo=memo)


@router.get("/sessions/{session_id}/manifests", response_model=ManifestList, responses=documented(404))
def list_manifests(session_id: str, db: Db,
                   limit: Annotated[int, Query(ge=1, le=500, description="manifests per page")] = 50,
                   before_id: Annotated[int | None, Query(ge=1, le=ROW_ID_MAX, description="page on: ids below this one")] = None,
                   ) -> Response:
    """The manifests persisted for this session's served requests, newest first."""
    with read_only(db.read) as conn:
        page, next_before_id = request_service.list_manifests(conn, session_id, limit=limit, before_id=before_id)
    body = {"session_id": session_id, "manifests": [m.to_json() for m in page], "next_before_id": next_before_id}
    return Response(content=orjson.dumps(body), media_type=JSON_BYTES)


@router.get("/sessions/{session_id}/manifests/{manifest_id}", response_model=ManifestOut, responses=documented(404))
def get_manifest(session_id: str, manifest_id: Annotated[int, Path(ge=1, le=ROW_ID_MAX)], db: Db) -> Response:
    """One persisted manifest, as it was served (``manifest.id`` of a request)."""
    with read_only(db.read) as conn:
        manifest = request_service.get_manifest(conn, session_id, manifest_id)
    return Response(content=orjson.dumps(manifest.to_json()), media_type=JSON_BYTES)
