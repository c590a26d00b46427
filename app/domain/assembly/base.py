"""What the assembly modules share: the bounded form of a tool result and small helpers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter
from typing import Any

from app.domain.compaction.record import longest
from app.domain.cuts import ElidedSpan
from app.domain.manifest import (
    Representation,
)

_SEQ = attrgetter("seq")


_HANDLE = attrgetter("handle")


SHORT_HANDLE = 12  # hex chars of a handle printed in breadcrumbs (48 bits; the API resolves prefixes)


@dataclass(frozen=True)
class BoundedResult:
    """A tool result as it enters the request: verbatim or head + marker + tail.

    ``payload_tokens``: the whole payload's tokens when known (counted once and stored,
    or counted here for a payload within the cap), else None; ``elided_tokens``: those
    left out by the cut, when known (0 for a verbatim result); ``span``: what the cut
    leaves out in bytes and lines (None when verbatim); ``payload_bytes`` (UTF-8) and
    ``payload_lines`` (split on "\n") of the whole payload; ``neutralised``: control
    strings broken in the payload before it was measured."""

    text: str
    payload_tokens: int | None
    elided_tokens: int | None
    span: ElidedSpan | None = None
    payload_bytes: int = 0
    payload_lines: int = 0
    neutralised: int = 0

    @property
    def representation(self) -> Representation:
        return Representation.HEAD_TAIL if self.span is not None else Representation.VERBATIM


NOTES_KEPT = 8  # elision notes kept in a leaf cache (the cuts one GET's search tries, and the last one)


def _extends(new: Mapping[Any, Any], old: Mapping[Any, Any]) -> bool:
    """Whether ``new`` holds ``old``'s entries first, unchanged, then others (mappings grown
    by adding keys: the request path's known counts and bindings). C-level compares."""
    if new is old:
        return True
    return len(new) >= len(old) and dict(islice(new.items(), len(old))) == old


def _shared_prefix(new: Sequence[Any], old: Sequence[Any]) -> int:
    """The length of the longest common prefix of two lists (elements compared as list ==
    does: by identity first), found with C-level slice compares."""
    n = min(len(new), len(old))
    if new[:n] == old[:n]:  # the usual case: one compare
        return n
    return longest(n - 1, lambda k: new[:k] == old[:k])
