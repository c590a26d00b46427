"""In-process caches bounded in bytes, on cachetools (issue 9, item 7).

Every in-process cache of the service holds at most a configured number of bytes, so
memory does not grow with the sessions, payloads or requests seen. Two building blocks,
both thread-safe and least-recently-used:

* :class:`ByteLRU`: a mapping-like cache whose entries are sized by a function of the key
  and the value (``sizeof(key, value)``, bytes); an entry larger than the bound is not
  stored. Counters ``hits``, ``misses``, ``evictions`` for metrics.
* :func:`memoize`: ``cachetools.cached`` over an LRU bounded by ``sizeof(result)`` bytes;
  the key is ``key(*args)`` (e.g. the sha256 of a long text, so the cache does not hold
  the text).

Sizes are estimates of what the cache holds (text and bytes lengths plus a fixed overhead
per entry), not ``sys.getsizeof`` graphs.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

import cachetools

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")

#: Bytes charged per entry on top of its key and value (dict slot, tuple, object headers).
ENTRY_OVERHEAD = 100


class _LRU(cachetools.LRUCache):  # type: ignore[type-arg]
    """cachetools' LRU, counting the evictions it makes to stay within its bound."""

    evictions = 0

    def popitem(self) -> tuple[Any, Any]:
        item = super().popitem()
        self.evictions += 1
        return item


class ByteLRU(Generic[K, V]):
    """Thread-safe LRU cache holding at most ``max_bytes`` by ``sizeof(key, value)``.

    ``put`` of an entry larger than ``max_bytes`` stores nothing (and drops an older value
    of that key). Raises ValueError when ``max_bytes`` is not positive.
    """

    def __init__(self, max_bytes: int, sizeof: Callable[[K, V], int]) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        # values are stored as (key, value) so that the size function sees both
        self._data = _LRU(maxsize=max_bytes, getsizeof=lambda kv: sizeof(kv[0], kv[1]))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def current_bytes(self) -> int:
        return int(self._data.currsize)

    @property
    def evictions(self) -> int:
        return self._data.evictions

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K) -> V | None:
        """The value of ``key`` (marked most recently used), or None."""
        with self._lock:
            kv = self._data.get(key)
            if kv is None:
                self.misses += 1
                return None
            self.hits += 1
            return kv[1]  # type: ignore[no-any-return]

    def get_many(self, keys: list[K]) -> list[V | None]:
        data = self._data
        out: list[V | None] = []
        with self._lock:
            for key in keys:
                try:
                    out.append(data[key][1])
                except KeyError:
                    out.append(None)
            misses = out.count(None)
            self.misses += misses
            self.hits += len(out) - misses
        return out

    def put(self, key: K, value: V) -> bool:
        """Store ``value`` under ``key``, evicting least recently used entries to stay within
        ``max_bytes``. Returns False (nothing stored) for an entry larger than the bound."""
        with self._lock:
            return self._put(key, value)

    def _put(self, key: K, value: V) -> bool:
        try:
            self._data[key] = (key, value)
            return True
        except ValueError:  # larger than the whole cache
            self._data.pop(key, None)
            return False

    def set_many(self, items: dict[K, V]) -> None:
        with self._lock:
            for key, value in items.items():
                self._put(key, value)

    def replace(self, key: K, old: V, new: V) -> bool:
        """Store ``new`` under ``key`` only if ``key`` holds ``old`` (the same object), as one
        step. Returns whether it was stored."""
        with self._lock:
            kv = self._data.get(key)
            return kv is not None and kv[1] is old and self._put(key, new)

    def pop(self, key: K) -> V | None:
        with self._lock:
            kv = self._data.pop(key, None)
            return None if kv is None else kv[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def items(self) -> Iterator[tuple[K, V]]:
        """A snapshot of the entries, least recently used first."""
        with self._lock:
            return iter([kv for kv in self._data.values()])


def text_key(text: str) -> bytes:
    """A cache key for a long text: its sha256 digest (32 bytes), so the cache does not hold
    the text. ``surrogatepass``: any Python str has a key."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def memoize(max_bytes: int, *, key: Callable[..., Hashable], sizeof: Callable[[Any], int]
            ) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``cachetools.cached`` with an LRU of ``max_bytes`` by ``sizeof(result)`` and a lock.

    ``key(*args)`` gives the cache key; keep it small (e.g. :func:`text_key` of a long
    text plus ENTRY_OVERHEAD in ``sizeof``), since only results are sized. A result larger
    than the bound is returned but not stored. The wrapper has ``cache`` and
    ``cache_clear()``. Two threads missing one key at once may both compute it (the
    function must be pure)."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    return cachetools.cached(cachetools.LRUCache(maxsize=max_bytes, getsizeof=sizeof), key=key,
                             lock=threading.Lock())


class SessionOwners:
    """Which tenant owns which session, as the API's authorization found it
    (app/api/auth.py, step 3): ``(tenant_id, session_id)`` pairs, least recently used dropped past ``max_bytes``. Only positive answers are kept
    (an absent or foreign session is read again each time). Thread-safe."""

    def __init__(self, max_bytes: int = 4 * 1024 * 1024) -> None:
        self._cache: ByteLRU[tuple[str, str], bool] = ByteLRU(
            max_bytes, lambda key, _value: len(key[0]) + len(key[1]) + ENTRY_OVERHEAD)

    def known(self, tenant_id: str, session_id: str) -> bool:
        return self._cache.get((tenant_id, session_id)) is not None

    def add(self, tenant_id: str, session_id: str) -> None:
        self._cache.put((tenant_id, session_id), True)

    def forget(self, tenant_id: str, session_id: str) -> None:
        """Drop an entry (the session was deleted)."""
        self._cache.pop((tenant_id, session_id))
