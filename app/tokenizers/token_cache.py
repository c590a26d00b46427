"""The segment cache's port and back ends (:mod:`app.tokenizers.segments` keys and fills it):
:class:`TokenCache` (bytes to bytes, never raises on back-end trouble), the in-process
:class:`LocalLRUCache`, :class:`RedisTokenCache` (one ``MGET`` per request, a circuit
breaker, every failure a counted fallback) and :class:`TieredTokenCache` (L1 in process
over L2 in Redis)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from app.caches import ByteLRU

if TYPE_CHECKING:  # pragma: no cover
    import redis

# The cache's log lines keep the name they had inside the segment encoder's module.
log = logging.getLogger("app.tokenizers.segments")

__all__ = ["LocalLRUCache", "RedisTokenCache", "TieredTokenCache", "TokenCache"]


class TokenCache(Protocol):
    """Bytes-to-bytes cache of packed segment ids. Implementations never raise on
    back-end trouble: a failed lookup is a miss, a failed store is dropped."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Values for ``keys`` in order, ``None`` for a miss. One round trip."""
        ...

    def set_many(self, items: dict[bytes, bytes]) -> None:
        """Store all ``items`` (best effort)."""
        ...


class LocalLRUCache(ByteLRU[bytes, bytes]):
    """Thread-safe in-process LRU bounded by bytes (``len(key) + len(value)`` per entry),
    on cachetools (:class:`app.caches.ByteLRU`).

    An entry larger than ``max_bytes`` is not stored. ``hits``, ``misses``,
    ``evictions`` and ``current_bytes`` are plain counters for metrics.
    """

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        super().__init__(max_bytes, lambda key, value: len(key) + len(value))


class RedisTokenCache:
    """Segment cache in Redis: one ``MGET`` per request, one pipelined ``SET .. EX`` for
    the misses. Never fails the request: any Redis error or timeout turns into "all
    misses" (or a dropped store) and is recorded as a fallback.

    * ``fallbacks``: Counter of reasons (``get_error``, ``get_timeout``, ``set_error``,
      ``set_timeout``, ``circuit_open``); ``on_fallback(reason)`` is called for each
      (wire it to a Prometheus counter).
    * After a failure Redis is skipped for ``cooldown_seconds`` (reason ``circuit_open``)
      so an outage costs one timeout per cooldown, not one per request.

    The client must have a short ``socket_timeout`` (<= ``timeout_seconds``) and should not
    retry; :meth:`from_url` builds such a client. ValueError if the client has no
    socket timeout or a longer one.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        *,
        ttl_seconds: int,
        timeout_seconds: float,
        cooldown_seconds: float = 1.0,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        kwargs = getattr(getattr(redis_client, "connection_pool", None), "connection_kwargs", {})
        sock_timeout = kwargs.get("socket_timeout")
        if sock_timeout is None or sock_timeout > timeout_seconds:
            raise ValueError(
                f"redis client socket_timeout={sock_timeout!r} must be set and <= "
                f"timeout_seconds={timeout_seconds}; use RedisTokenCache.from_url()"
            )
        self.client = redis_client
        self.ttl_seconds = int(ttl_seconds)
        self.timeout_seconds = timeout_seconds
        self.cooldown_seconds = cooldown_seconds
        self.on_fallback = on_fallback
        self.fallbacks: Counter[str] = Counter()
        self._open_until = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        ttl_seconds: int,
        timeout_seconds: float = 0.05,
        cooldown_seconds: float = 1.0,
        on_fallback: Callable[[str], None] | None = None,
        max_connections: int | None = None,
    ) -> RedisTokenCache:
        """A dedicated client: socket and connect timeouts = ``timeout_seconds``, no retries."""
        import redis as redis_mod
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis_mod.Redis.from_url(
            url,
            socket_timeout=timeout_seconds,
            socket_connect_timeout=timeout_seconds,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
            max_connections=max_connections,
        )
        return cls(
            client,
            ttl_seconds=ttl_seconds,
            timeout_seconds=timeout_seconds,
            cooldown_seconds=cooldown_seconds,
            on_fallback=on_fallback,
        )

    @property
    def fallback_count(self) -> int:
        return sum(self.fallbacks.values())

    def close(self) -> None:
        """Close the client's connections (at shutdown)."""
        self.client.close()

    def _record(self, reason: str, exc: BaseException | None = None) -> None:
        with self._lock:
            self.fallbacks[reason] += 1
            if reason != "circuit_open":
                self._open_until = time.monotonic() + self.cooldown_seconds
        if exc is not None:
            log.warning("segment cache: redis %s (%s: %s); encoding locally", reason, type(exc).__name__, exc)
        if self.on_fallback is not None:
            try:
                self.on_fallback(reason)
            except Exception:  # a metrics hook must not fail the request
                log.exception("on_fallback hook failed")

    def _circuit_open(self) -> bool:
        return time.monotonic() < self._open_until

    @staticmethod
    def _reason(op: str, exc: BaseException) -> str:
        name = type(exc).__name__.lower()
        return f"{op}_timeout" if "timeout" in name else f"{op}_error"

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        if self._circuit_open():
            self._record("circuit_open")
            return [None] * len(keys)
        try:
            values = self.client.mget(keys)
        except Exception as exc:  # redis.RedisError, OSError, ...: never fail the request
            self._record(self._reason("get", exc), exc)
            return [None] * len(keys)
        if not isinstance(values, list) or len(values) != len(keys):
            self._record("get_error")
            return [None] * len(keys)
        return [v if isinstance(v, bytes) else None for v in values]

    def set_many(self, items: dict[bytes, bytes]) -> None:
        if not items:
            return
        if self._circuit_open():
            self._record("circuit_open")
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for k, v in items.items():
                pipe.set(k, v, ex=self.ttl_seconds)
            pipe.execute()
        except Exception as exc:
            self._record(self._reason("set", exc), exc)


class TieredTokenCache:
    """An in-process LRU in front of another cache (usually Redis): L1 hits skip the
    round trip; L2 hits are copied into L1; stores go to both."""

    def __init__(self, l1: TokenCache, l2: TokenCache) -> None:
        self.l1 = l1
        self.l2 = l2

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        out = self.l1.get_many(keys)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            got = self.l2.get_many([keys[i] for i in missing])
            fill: dict[bytes, bytes] = {}
            for i, v in zip(missing, got):
                if v is not None:
                    out[i] = v
                    fill[keys[i]] = v
            if fill:
                self.l1.set_many(fill)
        return out

    def set_many(self, items: dict[bytes, bytes]) -> None:
        self.l1.set_many(items)
        self.l2.set_many(items)
