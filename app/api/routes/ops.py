"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from sqlalchemy import text

from app.api.problems import problem
from app.observability.metrics import CONTENT_TYPE_LATEST, exposition

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Not ready (database or tokenizer)",
                                        "content": {"application/problem+json": {}}}})
def readyz(request: Request) -> Response:
    """Readiness: the database answers and the default profile's tokenizer is loaded."""
    state = request.app.state
    try:
        with state.engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:  # any driver error means not ready
        return problem(503, "Not ready", f"database: {exc.__class__.__name__}: {exc}")
    checks = {"database": "ok", "tokenizer": "loaded" if state.tokenizer_ready.is_set() else "loading"}
    if not state.tokenizer_ready.is_set():
        return problem(503, "Not ready", "the default profile's tokenizer is still loading", checks=checks)
    return Response(content='{"status":"ready","checks":{"database":"ok","tokenizer":"loaded"}}',
                    media_type="application/json")


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"description": "Prometheus text exposition format"}})
def metrics() -> Response:
    """Every ctxd metric; under ``ctxd serve --workers N`` summed over the N workers."""
    return Response(exposition(), media_type=CONTENT_TYPE_LATEST)
