"""Deterministic tool-call id mapping shared by the wire formats (README "Provider rules").

An id the format accepts is kept; any other becomes ``prefix`` + hex of its sha256, so
a call and its result map to the same value in every request (prefix reuse survives)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable


def mapped_id(call_id: str, *, valid: Callable[[str], bool], prefix: str, hex_chars: int) -> str:
    """``call_id`` when ``valid(call_id)``, else ``prefix + sha256(call_id)[:hex_chars]``."""
    return call_id if valid(call_id) else prefix + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:hex_chars]
