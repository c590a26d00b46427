"""What a GET reads before it plans (DESIGN.md section 3, "LOAD once"): the session, its
versioned layout state, and what the session keeps of its previous request per wire
format. Frozen values, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.domain.prefix import BodyDigest, PrefixState
from app.domain.tenancy import DEFAULT_TENANT
from app.domain.types import Session


@dataclass(frozen=True)
class LayoutState:
    """The session's persisted layout decision, versioned for compare-and-set.

    ``cut_seq``: seq of the first kept turn group; the groups before it are elided from
    the request (named in the trunk's elision note). It only moves forward.
    ``version``: incremented by every change; a worker writes a new state only if the
    stored version is still the one it planned from (compare-and-set), else it plans
    again from the winner's state. Under select, ``cut_seq`` is the fold point of the
    progress record, which is saved (as JSON) with the state that moves it; ``passes``
    counts the moves.

    Invalidation's deferral (issue 11; seed 000 table 9): ``deferred``, the seqs of the
    changes (writes) whose in-place tombstones wait for the next trunk rewrite because a
    compaction pass was due (their notices are shown meanwhile), and ``shown_upto``, the
    latest change seq whose tombstones were shown: a change at or before it is never
    deferred, so a tombstone once shown is never turned back into a notice. Kept here so
    that every worker, and a restarted one, decides alike.

    Contract: a GET may persist a layout decision; it never changes what an identical
    second GET returns (the body is a function of the events and this state, and a
    state planned from the events is a fixed point of planning on the same events).
    """

    version: int = 0
    cut_seq: int = 0
    deferred: tuple[int, ...] = ()
    shown_upto: int = 0
    passes: int = 0  # moves of the cut: compaction passes under select, evictions under window

    def with_cut(self, cut_seq: int) -> LayoutState:
        """This state with the cut moved to ``cut_seq`` (the next version), or this very
        state when ``cut_seq`` does not move the cut forward."""
        return self.advanced(cut_seq=cut_seq)

    def advanced(self, *, cut_seq: int | None = None, deferred: tuple[int, ...] | None = None,
                 shown_upto: int | None = None, folded: bool | None = None) -> LayoutState:
        """This state with a request's decisions applied, as the next version: the cut
        moved forward to ``cut_seq``, the deferred changes replaced by ``deferred``
        (sorted), ``shown_upto`` moved forward. This very state when nothing changes (None:
        keep that part). ``folded``: whether the request folded (or evicted) turn groups,
        which alone counts a pass: a session's first request moves the cut from 0 to its
        first group without folding anything (None: any forward move of the cut counts)."""
        cut = max(self.cut_seq, cut_seq if cut_seq is not None else self.cut_seq)
        waiting = tuple(sorted(set(deferred))) if deferred is not None else self.deferred
        shown = max(self.shown_upto, shown_upto if shown_upto is not None else self.shown_upto)
        if (cut, waiting, shown) == (self.cut_seq, self.deferred, self.shown_upto):
            return self
        return LayoutState(version=self.version + 1, cut_seq=cut, deferred=waiting, shown_upto=shown,
                           passes=self.passes + (cut > self.cut_seq and (folded is None or folded)))


@dataclass(frozen=True)
class SessionState:
    """A session as a GET sees it: its definition, the seq of its last event, its layout
    state (read together, in one snapshot) and the ``model`` its request bodies name
    (its own, set at create; None: the profile's); ``tenant_id``: the tenant it belongs to
    (issue 12: the payloads its requests derive are linked to it)."""

    session: Session
    last_seq: int
    layout: LayoutState
    model: str | None = None
    tenant_id: str = DEFAULT_TENANT


@dataclass(frozen=True)
class PreviousRequest:
    """What the store keeps, per session and wire format, of the last request served in
    that format: enough to recognise its ids (``length`` in tokens and the
    :attr:`PrefixState.fingerprint`) and to rebuild them (the events up to ``last_seq``
    laid out with the cut ``cut_seq``), and the id of its manifest (the base of the next
    manifest's delta). A few hundred bytes, rewritten by every GET. ``deferred`` and
    ``shown_upto``: the invalidation deferral it left (:class:`LayoutState`), with the cut
    what rebuilds it."""

    length: int
    fingerprint: str
    last_seq: int
    cut_seq: int
    manifest_id: int | None = None
    deferred: tuple[int, ...] = ()
    shown_upto: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": 3, "length": self.length, "fingerprint": self.fingerprint,
                               "last_seq": self.last_seq, "cut_seq": self.cut_seq, "manifest_id": self.manifest_id}
        if self.deferred or self.shown_upto:  # absent in records stored before issue 11
            out["deferred"], out["shown_upto"] = list(self.deferred), self.shown_upto
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreviousRequest:
        """ValueError/KeyError on another version or a malformed record."""
        if data.get("v") != 3:
            raise ValueError(f"unsupported previous-request record version {data.get('v')!r}")
        manifest_id = data.get("manifest_id")
        return cls(length=int(data["length"]), fingerprint=str(data["fingerprint"]), last_seq=int(data["last_seq"]),
                   cut_seq=int(data["cut_seq"]), manifest_id=None if manifest_id is None else int(manifest_id),
                   deferred=tuple(int(s) for s in data.get("deferred", ())),
                   shown_upto=int(data.get("shown_upto", 0)))


@dataclass(frozen=True)
class RememberedIds:
    """A served request's token ids and full block digests (packed little-endian uint32,
    32-byte digests), its :class:`PrefixState`, its layout digest
    (:func:`app.domain.prefix_layout.layout_digest`) and its bytes' digest
    (:class:`~app.domain.prefix.BodyDigest`), as one worker holds them. Trusted
    for a session only when the state's fingerprint and length equal the stored
    :class:`PreviousRequest`'s: another worker may have served a request since, even one
    of the same length."""

    state: PrefixState
    packed: bytes = field(repr=False)
    chain: tuple[bytes, ...] = field(repr=False)
    layout: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # the request's bytes and their sha256 midstates: the next request's digest hashes only
    # what follows their common prefix (compared byte for byte, so trusted whatever matches says)
    body: BodyDigest | None = field(default=None, repr=False, compare=False)

    def matches(self, stored: PreviousRequest | None) -> bool:
        """True when these ids are the ones ``stored`` was recorded from."""
        return stored is not None and stored.length == self.state.length and stored.fingerprint == self.state.fingerprint

    @property
    def nbytes(self) -> int:
        """Bytes held (ids, digests, about 40 per leaf message of the layout), for memo accounting."""
        return (len(self.packed) + 32 * len(self.chain) + len(self.state.digests) + 40 * len(self.layout.get("leaf", ()))
                + (self.body.nbytes if self.body is not None else 0))
