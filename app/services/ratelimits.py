"""Per-tenant request rate limits (issue 12) on the ``limits`` library (MIT): a moving
window per tenant (exact: ``Retry-After`` is when the oldest counted request leaves the
window, so a client that waits it is admitted; the sliding-window counter's weighted
estimate refused such a client under load), in Redis when ``CTXD_REDIS_URL`` is set (shared by every worker),
in process otherwise.

When Redis cannot be reached the request is admitted (the limit protects the service, an
outage of its cache must not stop it) and ``ctxd_rate_limit_errors_total`` counts it.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem, parse_many
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from app.domain.errors import RateLimited

log = logging.getLogger("ctxd")


class TenantRateLimiter:
    """``check(tenant_id)`` admits a request or raises :class:`RateLimited` (429) with
    ``retry_after`` in whole seconds (at least 1). ``spec`` is in the ``limits`` notation,
    several limits separated by ``;`` (e.g. ``"600/minute;50/second"``); empty: no limit."""

    def __init__(self, spec: str, *, redis_url: str = "", namespace: str = "ctxd-rate") -> None:
        self.spec = spec
        self.items: list[RateLimitItem] = parse_many(spec) if spec.strip() else []
        uri = redis_url or "memory://"
        options = {"key_prefix": namespace} if redis_url else {}
        storage = storage_from_string(uri, **options)
        if not isinstance(storage, Storage):  # an async+ scheme: this limiter is synchronous
            raise TypeError(f"rate limit storage: {uri.split(':', 1)[0]}: is asynchronous")
        self.storage: Storage = storage
        self.limiter = MovingWindowRateLimiter(self.storage)

    def check(self, tenant_id: str) -> None:
        """Count one request of ``tenant_id``. Raises RateLimited when a limit is exceeded."""
        for item in self.items:
            try:
                admitted = self.limiter.hit(item, tenant_id)
            except Exception as exc:  # Redis down or timing out: admit, count, log
                from app.observability import metrics

                metrics.RATE_LIMIT_ERRORS.inc()
                log.warning("rate limiter unavailable (%s): request admitted", type(exc).__name__)
                return
            if not admitted:
                stats = self.limiter.get_window_stats(item, tenant_id)
                retry_after = max(1, math.ceil(stats.reset_time - time.time()))
                raise RateLimited(f"tenant request rate over the limit of {item} (setting CTXD_RATE_LIMIT); retry "
                                  f"after {retry_after} s", limit=str(item), retry_after=retry_after)

    def reset(self) -> None:
        """Forget every count (tests)."""
        self.storage.reset()

    def close(self) -> None:
        """Close the Redis client of the counts, if any (at shutdown)."""
        client = getattr(self.storage, "storage", None)  # limits' Redis storage keeps its client there
        close = getattr(client, "close", None)
        if callable(close):
            close()
