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
