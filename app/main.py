"""ctxd application factory: ``create_app()``; connections are built in the lifespan."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from app.api import problems
from app.api.middleware import RequestContext
from app.api.routes import ops, v1
from app.api.routes import recall as recall_routes
from app.api.routes import tenancy as tenancy_routes
from app.observability import metrics
from app.observability.logs import configure_logging
from app.settings import Settings, offline_environment

if TYPE_CHECKING:
    from app.tokenizers.segments import TokenCache

log = logging.getLogger("ctxd")


def served_app() -> FastAPI:
    """The app ``ctxd serve`` runs in each worker process (uvicorn's factory): :func:`create_app`
    with ``freeze_gc``."""
    return create_app(freeze_gc=True)


def create_app(settings: Settings | None = None, *, freeze_gc: bool = False) -> FastAPI:
    """Build the ASGI app. ``settings`` defaults to the environment (prefix CTXD_).

    ``freeze_gc`` (a server process of its own: ``ctxd serve``): once the default profile's
    tokenizer is loaded, the objects made so far (modules, the app, the tokenizer: ~190k)
    are collected once and moved to the garbage collector's permanent generation
    (``gc.freeze()``), so no later full collection scans them: one took ~120-280 ms of the
    worker, in the middle of a request, a few times per replay of a session of 176 model
    calls (a stall of every request then in flight). Not for an app embedded in another
    process (its host's objects would be frozen too)."""
    offline_environment()
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format)
    from app.caches import SessionOwners
    from app.services.payload_counts import Activity

    activity = Activity()  # requests in flight (RequestContext): the payload counts wait for idle
    session_owners = SessionOwners()  # the API's authorization: which tenant owns which session

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from app.services.memo import AssemblyMemo
        from app.store.db import make_engine, make_read_factory, make_session_factory
        from app.store.migrate import prepare_schema
        from app.tokenizers.loading import MeterRegistry
        from app.tokenizers.profiles import ProfileRegistry, load_profiles

        url = settings.effective_database_url
        prepare_schema(url, auto_migrate=settings.auto_migrate)  # SchemaBehind: start-up fails, naming revisions
        engine = make_engine(url)
        metrics.worker_started()
        # sync routes and dependencies run in anyio's default thread pool (40 threads): size
        # it to the database pool, so requests queue for a thread rather than for a connection
        # (the pool's 30 s checkout timeout turned queued requests into 500s)
        from anyio.to_thread import current_default_thread_limiter

        from app.store.db import pool_capacity

        current_default_thread_limiter().total_tokens = pool_capacity(engine)
        registry = ProfileRegistry(load_profiles(settings.profiles_path))
        token_cache: TokenCache
        if settings.redis_url:
            from app.tokenizers.segments import RedisTokenCache

            token_cache = RedisTokenCache.from_url(
                settings.redis_url, ttl_seconds=settings.redis_ttl_seconds,
                timeout_seconds=settings.redis_timeout_seconds,
                on_fallback=lambda reason: metrics.REDIS_FALLBACKS.labels(reason).inc())
        else:
            from app.tokenizers.segments import LocalLRUCache

            token_cache = LocalLRUCache(settings.local_cache_bytes)
        meter_registry = MeterRegistry(token_cache)
        from app.services.app_state import AppState
        from app.services.payload_counts import counter_for
        from app.services.ratelimits import TenantRateLimiter
        from app.services.requests import PlanWarmer
        from app.services.shell_inference import ShellStates
        from app.services.summarizer import CandidateStore, SummarizerConfig, SummaryJobs

        summarizer = SummarizerConfig.from_settings(settings)
        summarizer_http = None
        if summarizer is not None:
            import httpx

            summarizer_http = httpx.Client()
        state = app.state.ctxd = AppState(
            settings=settings, engine=engine, session_factory=make_session_factory(engine),
            read_factory=make_read_factory(engine), profiles=registry, meters=meter_registry,
            token_cache=token_cache, memo=AssemblyMemo(max_bytes=settings.memo_bytes),
            shell_states=ShellStates(settings.shell_state_bytes) if settings.shell_state_bytes else None,
            rate_limiter=TenantRateLimiter(settings.rate_limit, redis_url=settings.redis_url),
            activity=activity,
            # new tool outputs' token counts, after their POST, when this worker is idle; each
            # count reads the state as it then is
            payload_counter=counter_for(lambda: state, activity),
            warmer=PlanWarmer(),  # a POST's warm-up of its session's next plan
            summarizer=summarizer, summaries=CandidateStore(settings.summary_outcome_bytes),
            summary_jobs=SummaryJobs(),  # in flight in this worker: a pass's GET waits for its fold's
            summarizer_http=summarizer_http, session_owners=session_owners, ui_signer=ui_signer,
            # an override of whether a compaction pass is due (app/services/requests.py PassDue):
            # in-place tombstones wait for it. None: select's forecast from its watermarks
            # (app/domain/compaction/forecast.py), the default signal.
            pass_due=None)
        warmer = state.warmer

        def warm() -> None:
            started = time.perf_counter()
            loaded = False
            try:
                meter_registry.get(registry.get(settings.default_profile))
                metrics.TOKENIZER_READY.set(1)
                loaded = True
            except Exception as exc:
                state.tokenizer_error = f"{type(exc).__name__}: {exc}"
                log.exception("could not load the default profile's tokenizer")
            finally:
                if freeze_gc:  # before /readyz says ready: the start-up objects leave the collected generations
                    gc.collect()
                    gc.freeze()
                if loaded:  # what /readyz says from now on (the port is bound by then: loading takes seconds)
                    log.info("ctxd ready: the tokenizer of profile %s loaded in %.1f s; /readyz answers 200",
                             settings.default_profile, time.perf_counter() - started)
                state.tokenizer_ready.set()

        threading.Thread(target=warm, name="ctxd-tokenizer-warmup", daemon=True).start()
        stop_pruning = threading.Event()
        if settings.manifest_retention_days > 0:
            from app.services.tenancy import prune_manifests
            from app.store.db import unit_of_work

            def prune() -> None:  # hourly manifest retention (issue 12)
                while not stop_pruning.is_set():
                    try:
                        with unit_of_work(state.session_factory) as db:
                            n = prune_manifests(db, retention_days=settings.manifest_retention_days)
                        if n:
                            log.info("manifest retention: %d manifest(s) deleted", n)
                    except Exception:
                        log.exception("manifest retention failed; retrying in an hour")
                    stop_pruning.wait(3600)

            threading.Thread(target=prune, name="ctxd-manifest-retention", daemon=True).start()
        # not ready yet: the default profile's tokenizer loads in the background ("ctxd ready"
        # follows), and uvicorn binds its port after this start-up
        log.info("ctxd starting: data directory %s, database %s, profiles %s", settings.data_dir,
                 engine.url.render_as_string(hide_password=True), registry.names())
        try:
            yield
        finally:  # after uvicorn let the in-flight requests finish (--graceful-timeout)
            stop_pruning.set()
            state.payload_counter.close()  # counts what is still queued
            if warmer is not None:
                warmer.close()
            if state.summarizer_http is not None:
                state.summarizer_http.close()
            close = getattr(token_cache, "close", None)
            if callable(close):
                close()  # the Redis client of the segment cache
            state.rate_limiter.close()
            engine.dispose()
            metrics.worker_stopped()
            log.info("ctxd stopped")

    app = FastAPI(
        title="ctxd",
        version="0.1.0",
        summary="Context assembly for LLM agents: exact-counted, budgeted, cache-stable model requests.",
        lifespan=lifespan,
    )
    problems.install(app)
    from app.api.limits import BodyLimitMiddleware

    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.include_router(v1.router)
    app.include_router(tenancy_routes.router)
    app.include_router(recall_routes.router)
    app.include_router(ops.router)
    from app.api.routes import ui

    ui_signer = ui.install(app, settings)  # the inspector pages under /ui
    from app.api.auth import AuthMiddleware

    app.add_middleware(AuthMiddleware)  # API keys, tenant scope, rate limits: before any body is read
    from app.api.openapi_links import add_links

    generate = app.openapi

    def openapi() -> dict[str, Any]:  # the generated document with its links (stateful clients)
        if app.openapi_schema is None:
            add_links(generate())
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]

    app.add_middleware(RequestContext, activity=activity)  # HTTP metrics, unexpected errors as a logged 500
    from asgi_correlation_id import CorrelationIdMiddleware

    from app.api.middleware import HEADER, HeadAsGet, new_request_id, sane_request_id

    # outermost but for HeadAsGet: the request id (X-Request-ID in and out) is set for every line logged and
    # every problem+json body, the 500s of RequestContext included
    app.add_middleware(CorrelationIdMiddleware, header_name=HEADER, generator=new_request_id,
                       validator=sane_request_id, update_request_header=False)
    app.add_middleware(HeadAsGet)  # outermost: HEAD runs as GET, without the body

    return app
