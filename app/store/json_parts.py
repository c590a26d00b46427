"""A manifest's JSON kept by parts (issue 9, speed): each top-level value's JSON bytes, and
a list's element by element.

Consecutive manifests of a session share most of their objects (``Item.to_json`` returns
the same dict for an item from GET to GET, app/domain/manifest.py), so with the previous
manifest's parts at hand the next one serializes only its new elements and values, finds
its unchanged top-level values by comparing bytes (no recursive walk: see
:func:`unchanged`), and is served by joining bytes instead of serializing ~100 kB again.

``join(encode(data)) == orjson.dumps(data)`` byte for byte, for any dict with str keys that
orjson serializes: orjson's compact JSON of a dict is its keys' and values' JSON, in order,
joined by ``:`` and ``,``, and of a list its elements' JSON joined by ``,``. The objects are
read-only once serialized (a value reused by identity is taken to still serialize as it
did): the manifests' JSON is never mutated after ``to_json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.domain.manifest import shared_prefix

#: key -> its value's JSON, or for a list value, its elements' JSON in order
Parts = dict[str, bytes | list[bytes]]


def encode(data: Mapping[str, Any], base: Mapping[str, Any] | None = None, base_parts: Parts | None = None) -> Parts:
    """The parts of ``data`` (a dict with str keys). With ``base`` and its parts (from
    ``encode(base)``): an element of a list that is the same object as an element of
    ``base``'s list under the same key reuses that element's bytes (found by identity: a
    leading run in C, the rest by ``id``, valid while ``base`` holds those objects)."""
    parts: Parts = {}
    for key, value in data.items():
        if type(value) is not list:
            parts[key] = orjson.dumps(value)
            continue
        old = base.get(key) if base is not None else None
        old_parts = base_parts.get(key) if base_parts is not None else None
        if type(old) is not list or type(old_parts) is not list or len(old) != len(old_parts):
            parts[key] = [orjson.dumps(v) for v in value]
            continue
        n = shared_prefix(old, value)
        reused = old_parts[:n]
        if n < len(value):
            known = dict(zip(map(id, old[n:]), old_parts[n:]))
            reused += [known.get(id(v)) or orjson.dumps(v) for v in value[n:]]
        parts[key] = reused
    return parts


def join(parts: Parts, extra: Mapping[str, Any] | None = None) -> bytes:
    """``orjson.dumps(data | extra)`` for ``parts == encode(data)`` (``extra``'s keys, not in
    ``data``, last: e.g. a stored manifest's ``id``)."""
    pieces: list[bytes] = []
    for key, part in parts.items():
        pieces += (b",", orjson.dumps(key), b":")
        pieces += (b"[", b",".join(part), b"]") if isinstance(part, list) else (part,)
    for key, value in (extra or {}).items():
        pieces += (b",", orjson.dumps(key), b":", orjson.dumps(value))
    if not pieces:
        return b"{}"
    pieces[0] = b"{"
    pieces.append(b"}")
    return b"".join(pieces)


def unchanged(base_parts: Parts, parts: Parts) -> frozenset[str]:
    """The keys whose values serialize to the same bytes in both (equal JSON, types and key
    order included: what :func:`app.store.delta.diff` would find unchanged; reused
    elements compare by identity first, so an extending manifest's items cost a pointer
    walk, and only when they are unchanged)."""
    return frozenset(key for key, part in parts.items() if base_parts.get(key) == part)
