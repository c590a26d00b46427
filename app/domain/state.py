"""What a GET reads before it plans (DESIGN.md section 3, "LOAD once"): the session, its
versioned layout state, and what the session keeps of its previous request per wire
format. Frozen values, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.domain.prefix import PrefixState
from app.domain.types import Session


@dataclass(frozen=True)
class LayoutState:
    """The session's persisted layout decision, versioned for compare-and-set.

    ``cut_seq``: seq of the first kept turn group; the groups before it are elided from
    the request (named in the trunk's elision note). It only moves forward.
    ``version``: incremented by every change; a worker writes a new state only if the
    stored version is still the one it planned from (compare-and-set), else it plans
    again from the winner's state. The progress record's version joins it later
    (compaction).

    Contract: a GET may persist a layout decision; it never changes what an identical
    second GET returns (the body is a function of the events and this state, and a
    state planned from the events is a fixed point of planning on the same events).
    """

    version: int = 0
    cut_seq: int = 0

    def with_cut(self, cut_seq: int) -> LayoutState:
        """This state with the cut moved to ``cut_seq`` (the next version), or this very
        state when ``cut_seq`` does not move the cut forward."""
        if cut_seq <= self.cut_seq:
            return self
        return LayoutState(version=self.version + 1, cut_seq=cut_seq)


@dataclass(frozen=True)
class SessionState:
    """A session as a GET sees it: its definition, the seq of its last event, and its
    layout state (read together, in one snapshot)."""

    session: Session
    last_seq: int
    layout: LayoutState


@dataclass(frozen=True)
class PreviousRequest:
    """What a session keeps, per wire format, of the last request served in that format:
    the chained block digests (:class:`PrefixState`) and the layout digest
    (:func:`app.domain.prefix_layout.layout_digest`) that explains a divergence."""

    state: PrefixState
    layout: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RememberedIds:
    """The previous request's token ids and full block digests, remembered by one worker
    (packed little-endian uint32, 32-byte digests) beside the :class:`PrefixState` they
    produced. Trusted for a session only when that state equals the stored one (equal
    length, block digests, tail and breakpoints): another worker may have served a request
    of the same length since."""

    state: PrefixState
    packed: bytes = field(repr=False)
    chain: tuple[bytes, ...] = field(repr=False)

    def matches(self, stored: PrefixState | None) -> bool:
        """True when these ids are the ones ``stored`` was computed from (to 64-bit
        block digests)."""
        return stored is not None and stored == self.state

    @property
    def nbytes(self) -> int:
        """Bytes held (ids, digests), for memo accounting."""
        return len(self.packed) + 32 * len(self.chain) + len(self.state.digests)
