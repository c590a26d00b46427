"""Every Prometheus metric of ctxd, defined once (bounded label sets only).

Under ``ctxd serve`` the metrics are in multiprocess mode (app/observability/multiproc.py):
counters and histograms are summed over the workers; each gauge names how its workers'
values combine (``multiprocess_mode``; ``live*``: only workers still running count).
:func:`exposition` is the text ``/metrics`` answers.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from app.observability.multiproc import dead_worker_pids, multiprocess_dir

__all__ = ["CONTENT_TYPE_LATEST", "exposition", "worker_started", "worker_stopped"]

HTTP_REQUESTS = Counter(
    "ctxd_http_requests_total", "HTTP requests served.", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "ctxd_http_request_duration_seconds", "HTTP request latency in seconds.", ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
ASSEMBLED_TOKENS = Counter(
    "ctxd_assembled_tokens_total", "Tokens of assembled requests, by budget role (eq. 1).", ["profile", "role"]
)
REQUEST_TOKENS = Histogram(
    "ctxd_request_tokens", "Tokens per assembled request.", ["profile"],
    buckets=(1000, 2000, 4000, 8000, 16000, 24000, 32000, 48000, 64000, 96000, 128000, 200000),
)
ELIDED_TOKENS = Counter(
    "ctxd_elided_tokens_total", "Payload tokens kept out of requests behind handles.", ["profile", "reason"]
)
EVENTS_APPENDED = Counter("ctxd_events_appended_total", "Events appended to session logs.", ["kind"])
SEGMENT_CACHE = Counter(
    "ctxd_segment_cache_total", "Segment-cache lookups of rendered text segments, by zone and result.",
    ["profile", "zone", "result"],
)
PREDICTED_REUSED_TOKENS = Counter(
    "ctxd_predicted_reused_tokens_total", "Prompt tokens predicted to hit the provider's prefix cache.", ["profile", "format"]
)
REUSE_RATIO = Histogram(
    "ctxd_reuse_ratio", "Predicted cached tokens / request tokens, per assembled request.", ["profile", "format"],
    buckets=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 1.0),
)
BUDGET_OCCUPANCY = Histogram(
    "ctxd_budget_occupancy_ratio", "Tokens of a budget role / input_limit, per assembled request (eq. 1).",
    ["profile", "role"], buckets=(0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)
REDIS_FALLBACKS = Counter(
    "ctxd_redis_fallbacks_total", "Segment-cache operations that fell back to local encoding (Redis down or slow).",
    ["reason"],
)
TRUNK_REWRITES = Counter(
    "ctxd_prefix_divergences_total", "Requests that did not extend the previous request of their session, by reason.",
    ["profile", "zone"],
)
# issue 12: tenancy, limits, redaction
AUTH_FAILURES = Counter("ctxd_auth_failures_total", "Requests refused 401 (missing, unknown or revoked API key).")
RATE_LIMITED = Counter("ctxd_rate_limited_total", "Requests refused 429 by a tenant's rate limit.")
RATE_LIMIT_ERRORS = Counter(
    "ctxd_rate_limit_errors_total", "Rate-limit checks that could not reach their storage (the request was admitted).")
REDACTIONS = Counter("ctxd_redactions_total", "Secrets redacted at ingest, by kind.", ["kind"])
# issue 13: the compaction and audit panels of deploy/grafana/dashboards/ctxd.json
COMPACTION_PASSES = Counter(
    "ctxd_compaction_passes_total",
    "Moves of the cut saved with the layout state (eq. 3): compaction passes into the progress record under "
    "select, evictions under window; counted after commit.", ["profile", "policy"],
)
AUDIT_REJECTIONS = Counter(
    "ctxd_audit_rejections_total",
    "Model-written progress-record candidates rejected by the audit (listing 2), by the first finding's kind "
    "(lost, altered, missing_or_altered, no_evidence, contradicts_event, needs_current_evidence, schema, ...).",
    ["kind"],
)


# issue 13: the process model
WORKERS = Gauge("ctxd_workers", "Worker processes serving (1 per live worker, summed).", multiprocess_mode="livesum")
TOKENIZER_READY = Gauge(
    "ctxd_tokenizer_ready", "1 when the default profile's tokenizer is loaded; the minimum over live workers.",
    multiprocess_mode="livemin")


def worker_started() -> None:
    """Count this process among the live workers (``ctxd_workers``), tokenizer not yet loaded."""
    WORKERS.set(1)
    TOKENIZER_READY.set(0)


def worker_stopped() -> None:
    """At a worker's shutdown: its live gauges no longer count (its counters still do)."""
    WORKERS.set(0)
    path = multiprocess_dir()
    if path is not None:
        multiprocess.mark_process_dead(os.getpid(), path)  # type: ignore[no-untyped-call]  # unannotated upstream


def exposition() -> bytes:
    """The Prometheus text of every metric: in multiprocess mode the sum over all workers'
    files (live gauges of workers that died without shutting down, e.g. killed, are removed
    first), else this process's registry."""
    path = multiprocess_dir()
    if path is None:
        return generate_latest()
    for pid in dead_worker_pids(path):
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]  # unannotated upstream
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]  # unannotated upstream
    return generate_latest(registry)
