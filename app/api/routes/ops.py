"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import text

from app.api.deps import state_of
from app.api.problems import problem
from app.observability.metrics import CONTENT_TYPE_LATEST, exposition

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={
    200: {"description": "Ready: every check passed",
          "content": {"application/json": {"example": {"status": "ready", "checks": {"database": "ok",
                                                                                       "tokenizer": "loaded"}}}}},
    503: {"description": "Not ready: the database is unreachable or the default profile's tokenizer is loading or "
                         "failed to load; `checks` gives each check's status, `errors` why (Retry-After)",
          "content": {"application/problem+json": {}}}})
def readyz(request: Request) -> Response:
    """Readiness: the database answers ``select 1`` and the default profile's tokenizer is
    loaded. 200 ``{"status": "ready", "checks": {"database": "ok", "tokenizer": "loaded"}}``;
    else 503 problem+json naming the failing checks in ``detail``, with ``checks``
    (database ``ok | unavailable``, tokenizer ``loaded | loading | failed``), ``errors``
    (the failing checks' exception) and ``Retry-After: 5``."""
    state = state_of(request.app)
    checks: dict[str, str] = {}
    errors: dict[str, str] = {}
    try:
        with state.engine.connect() as conn:
            conn.execute(text("select 1"))
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means not ready
        checks["database"] = "unavailable"
        errors["database"] = f"{exc.__class__.__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    profile = state.settings.default_profile
    if not state.tokenizer_ready.is_set():
        checks["tokenizer"] = "loading"
        errors["tokenizer"] = f"the tokenizer of the default profile {profile!r} is still loading"
    elif state.tokenizer_error is not None:
        checks["tokenizer"] = "failed"
        errors["tokenizer"] = f"the tokenizer of the default profile {profile!r} failed to load: {state.tokenizer_error}"
    else:
        checks["tokenizer"] = "loaded"
    if errors:
        detail = "; ".join(f"{name}: {why}" for name, why in errors.items())
        response = problem(503, "Not ready", detail, instance="/readyz", checks=checks, errors=errors)
        response.headers["Retry-After"] = "5"
        return response
    return JSONResponse({"status": "ready", "checks": checks})


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"description": "Prometheus text exposition format"}})
def metrics() -> Response:
    """Every ctxd metric; under ``ctxd serve --workers N`` summed over the N workers."""
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
