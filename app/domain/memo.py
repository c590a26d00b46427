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
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")


def bounded_memo(maxsize: int, max_chars: int, size: Callable[[A], int]) -> Callable[[Callable[[A], R]], Callable[[A], R]]:
    """Memoize a one-argument pure function for arguments of at most ``max_chars`` (by
    ``size``), least recently used first out past ``maxsize`` entries. The wrapper has
    ``cache_clear()``."""

    def decorate(function: Callable[[A], R]) -> Callable[[A], R]:
        cached = lru_cache(maxsize=maxsize)(function)

        @wraps(function)
        def wrapper(argument: A) -> R:
            if size(argument) <= max_chars:
                return cached(argument)
            return function(argument)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper

    return decorate
