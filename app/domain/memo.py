"""A memo for pure domain functions, bounded in size with the standard library only.

``functools.lru_cache`` bounds the number of entries, not their size: a memo keyed by
message texts holds as many texts as it has entries, whatever their length. Here an
argument larger than ``max_chars`` (by ``size``) is computed without being memoized, so the
memo holds at most ``maxsize * max_chars`` characters of keys (issue 9, item 7: every
cache bounded in bytes; the service's own caches use cachetools, see app/caches.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any, TypeVar

R = TypeVar("R")


def bounded_memo(maxsize: int, max_chars: int, size: Callable[..., int]) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Memoize a pure function (hashable arguments) for calls whose arguments measure at
    most ``max_chars`` (``size(*args)``), least recently used first out past ``maxsize``
    entries. ``functools.lru_cache`` underneath: a hit costs about a C call, which matters
    on the GET path where these run hundreds of times a request. The wrapper has
    ``cache_clear()``."""

    def decorate(function: Callable[..., R]) -> Callable[..., R]:
        cached = lru_cache(maxsize=maxsize)(function)

        @wraps(function)
        def wrapper(*args: Any) -> R:
            if size(*args) <= max_chars:
                return cached(*args)
            return function(*args)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper

    return decorate
