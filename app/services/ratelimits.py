"""Per-tenant request rate limits (issue 12) on the ``limits`` library (MIT): a moving
window per tenant (exact: ``Retry-After`` is when the oldest counted request leaves the
window, so a client that waits it is admitted; the sliding-window counter's weighted
estimate refused such a client under load), in Redis when ``CTXD_REDIS_URL`` is set (shared by every worker),
in process otherwise.

When Redis cannot be reached the request is admitted (the limit protects the service, an
outage of its cache must not stop it) and ``ctxd_rate_limit_errors_total`` counts it.

In process the moving window is :class:`LocalMovingWindow` (a deque of admission times per
tenant and limit, under one lock), not ``limits``' ``memory://`` storage: that one starts a
new ``threading.Timer`` thread on most requests (its expiry timer lives 10 ms) and prepends
to a list of up to the limit's size (20,000 entries by default) on every request, costs paid
on every ``/v1`` request of the embedded default (issue 9 item 8). ``limits`` still parses
the setting and keeps the Redis counts. The semantics are the same: a request is counted
only when admitted, each limit in turn; ``Retry-After`` is when the oldest counted request
leaves the window.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque

from limits import RateLimitItem, parse_many
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from app.domain.errors import RateLimited

log = logging.getLogger("ctxd")


class LocalMovingWindow:
    """Moving-window counts in this process: per (limit, tenant) the monotonic times of the
    requests admitted within the window (at most the limit's amount; a tenant's deque is
    dropped when it empties). Thread-safe (one lock, held for microseconds): the event loop
    and worker threads call it alike."""

    def __init__(self, items: list[RateLimitItem]) -> None:
        self.items = [(item, item.amount, float(item.get_expiry())) for item in items]
        self._times: dict[tuple[int, str], deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, tenant_id: str) -> tuple[RateLimitItem, int] | None:
        """Count one request of ``tenant_id`` in every limit, in order, up to the first
        that is full: None when all admitted it, else (that limit, seconds until its
        oldest counted request leaves the window, rounded up, at least 1)."""
        now = time.monotonic()
        with self._lock:
            for i, (item, amount, window) in enumerate(self.items):
                key = (i, tenant_id)
                times = self._times.get(key)
                if times is None:
                    times = self._times[key] = deque()
                while times and times[0] + window <= now:
                    times.popleft()
                if len(times) >= amount:
                    return item, max(1, math.ceil(times[0] + window - now))
                times.append(now)
        return None

    def reset(self) -> None:
        with self._lock:
            self._times.clear()


class TenantRateLimiter:
    """``check(tenant_id)`` admits a request or raises :class:`RateLimited` (429) with
    ``retry_after`` in whole seconds (at least 1). ``spec`` is in the ``limits`` notation,
    several limits separated by ``;`` (e.g. ``"600/minute;50/second"``); empty: no limit."""

    def __init__(self, spec: str, *, redis_url: str = "", namespace: str = "ctxd-rate") -> None:
        self.spec = spec
        self.items: list[RateLimitItem] = parse_many(spec) if spec.strip() else []
        #: the in-process counts (no Redis), else None
        self.local: LocalMovingWindow | None = None if redis_url else LocalMovingWindow(self.items)
        self.storage: Storage | None = None
        self.limiter: MovingWindowRateLimiter | None = None
        if redis_url:
            storage = storage_from_string(redis_url, key_prefix=namespace)
            if not isinstance(storage, Storage):  # an async+ scheme: this limiter is synchronous
                raise TypeError(f"rate limit storage: {redis_url.split(':', 1)[0]}: is asynchronous")
            self.storage = storage
            self.limiter = MovingWindowRateLimiter(storage)

    @property
    def in_process(self) -> bool:
        """True when the counts are this process's (no I/O: the event loop may call
        :meth:`check`), False when they are in Redis."""
        return self.local is not None

    def check(self, tenant_id: str) -> None:
        """Count one request of ``tenant_id``. Raises RateLimited when a limit is exceeded."""
        if self.local is not None:
            refused = self.local.hit(tenant_id) if self.items else None
            if refused is not None:
                item, retry_after = refused
                raise _limited(item, retry_after)
            return
        assert self.limiter is not None
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
                raise _limited(item, max(1, math.ceil(stats.reset_time - time.time())))

    def reset(self) -> None:
        """Forget every count (tests)."""
        if self.local is not None:
            self.local.reset()
        if self.storage is not None:
            self.storage.reset()

    def close(self) -> None:
        """Close the Redis client of the counts, if any (at shutdown)."""
        client = getattr(self.storage, "storage", None)  # limits' Redis storage keeps its client there
        close = getattr(client, "close", None)
        if callable(close):
            close()


def _limited(item: RateLimitItem, retry_after: int) -> RateLimited:
    return RateLimited(f"tenant request rate over the limit of {item} (setting CTXD_RATE_LIMIT); retry "
                       f"after {retry_after} s", limit=str(item), retry_after=retry_after)
