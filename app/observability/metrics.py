"""Every Prometheus metric of ctxd, defined once (bounded label sets only)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
# issue 13 item 8: what session affinity buys
ASSEMBLY_MEMO = Counter(
    "ctxd_assembly_memo_total",
    "GETs after an earlier GET of the session in the same format: hit when this process served that earlier one "
    "and still holds it in its assembly memo, miss when it reads and rebuilds it from the database.",
    ["result"],
)
