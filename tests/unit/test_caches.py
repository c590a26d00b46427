"""Byte-bounded caches (app/caches.py, issue 9 item 7): bounds in bytes, LRU order, entries
over the bound (thread safety: tests/unit/test_segments.py, on LocalLRUCache)."""

from __future__ import annotations

import pytest

from app.caches import ByteLRU, memoize, text_key


def test_byte_lru_counts_key_and_value_and_evicts_least_recent() -> None:
    cache: ByteLRU[str, str] = ByteLRU(100, lambda k, v: len(k) + len(v))
    for k in "abc":
        assert cache.put(k, k * 29)  # 30 bytes each
    assert cache.current_bytes == 90 and len(cache) == 3
    assert cache.get("a") == "a" * 29  # a becomes the most recent
    cache.put("d", "d" * 29)
    assert "b" not in cache and cache.evictions == 1 and cache.current_bytes == 90
    assert cache.put("big", "x" * 200) is False and "big" not in cache and len(cache) == 3
    cache.put("a", "a" * 300)  # too large now: the old value of the key is dropped too
    assert "a" not in cache and cache.current_bytes == 60
    assert (cache.hits, cache.misses) == (1, 0)
    assert cache.get("zz") is None and cache.misses == 1
    assert [k for k, _ in cache.items()] == ["c", "d"]
    assert cache.pop("c") == "c" * 29 and cache.pop("c") is None and cache.current_bytes == 30
    cache.clear()
    assert len(cache) == 0 and cache.current_bytes == 0
    with pytest.raises(ValueError):
        ByteLRU(0, lambda k, v: 1)


def test_memoize_bounds_results_in_bytes_and_keys_by_digest() -> None:
    calls: list[str] = []

    @memoize(1_000, key=text_key, sizeof=lambda result: len(result) + 100)
    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert shout("hello") == "HELLO" and shout("hello") == "HELLO" and calls == ["hello"]
    long = "x" * 5_000
    assert shout(long) == long.upper() and shout(long) == long.upper()
    assert calls == ["hello", long, long], "a result over the bound is returned, never stored"
    for i in range(50):
        shout(f"w{i:03d}")
    cache = shout.cache  # type: ignore[attr-defined]
    assert len(cache) == 9 and cache.currsize == 9 * 104, "1,000 bytes hold nine 104-byte results"
    assert text_key("w049") in cache and text_key("hello") not in cache, "least recently used first out"
    shout.cache_clear()  # type: ignore[attr-defined]
    assert shout.cache.currsize == 0  # type: ignore[attr-defined]
