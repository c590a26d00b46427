"""The manifest: what one served request contains and why (seed 003 "assembly manifest",
DESIGN.md section 2). Frozen values with their JSON form; standard library only.

Every event of the session is accounted for (DESIGN.md section 6): as an :class:`Item`
of the request (verbatim, head + tail, pending, superseded, not rendered, dropped) or as
an elided item named with its handle.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import compress, count
from typing import Any

from app.domain.budget import Budget


class Representation(str, Enum):
    """How an event enters the request (seed 003 item ``transform``; DESIGN.md section 3).

    verbatim: as posted. head_tail: a tool result over the per-item cap, as head + marker +
    tail. elided: left out, named in the trunk's elision note with its handle. superseded:
    a step replaced by a later one. pending: an assistant turn whose calls all await their
    results. dropped: left out with a reason (nothing on the wire would carry it).
    not_rendered: bookkeeping with no text of its own (artifact writes). tombstone: a
    historical observation replaced in place by a short marker naming the revision it
    read, the write that superseded it and its handle (issue 11; seed 000 table 9).
    Compaction adds ``folded``.
    """

    VERBATIM = "verbatim"
    HEAD_TAIL = "head_tail"
    ELIDED = "elided"
    SUPERSEDED = "superseded"
    PENDING = "pending"
    DROPPED = "dropped"
    NOT_RENDERED = "not_rendered"
    FOLDED = "folded"  # in the trunk's progress record (select's compaction passes; issue 10)
    TOMBSTONE = "tombstone"


@dataclass(frozen=True)
class Transform:
    """One change applied to an item's text on its way into the request (e.g. neutralised
    control-token strings, a wrapped argument string): ``name``, how many places it
    changed (``count``, when counted) and a human ``note``."""

    name: str
    note: str = ""
    count: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.count is not None:
            out["count"] = self.count
        out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Transform:
        count = data.get("count")
        return cls(name=str(data["name"]), note=str(data.get("note", "")), count=None if count is None else int(count))


@dataclass(frozen=True)
class WriteRef:
    """The change that first superseded a historical observation (issue 11): the written
    ``artifact`` and the ``revision`` it created, the change's event ``seq`` and
    ``event_id``, and its ``cause``: ``write`` (an artifact_write event) or ``external``
    (a read whose content hash matched no logged write)."""

    artifact: str
    revision: int
    seq: int
    event_id: str
    cause: str

    def to_json(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "revision": self.revision, "seq": self.seq, "event_id": self.event_id,
                "cause": self.cause}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WriteRef:
        return cls(artifact=str(data["artifact"]), revision=int(data["revision"]), seq=int(data["seq"]),
                   event_id=str(data["event_id"]), cause=str(data["cause"]))


@dataclass(frozen=True)
class InvalidationChoice:
    """How a historical (or possibly stale) observation in the request is shown (seed 000
    table 9) and what it costs: ``choice`` ``tombstone`` (replaced in place: ``tokens`` of
    the tombstone, ``replaced_tokens`` of the output it replaces), ``notice`` or
    ``deferred`` (kept, a notice appended: ``stale_tokens_kept`` of the output left in
    the request); ``cache`` its effect on prefix reuse, in words."""

    choice: str
    cache: str
    tokens: int | None = None
    replaced_tokens: int | None = None
    stale_tokens_kept: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"choice": self.choice}
        for key in ("tokens", "replaced_tokens", "stale_tokens_kept"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["cache"] = self.cache
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InvalidationChoice:
        def opt(key: str) -> int | None:
            return None if data.get(key) is None else int(data[key])

        return cls(choice=str(data["choice"]), cache=str(data["cache"]), tokens=opt("tokens"),
                   replaced_tokens=opt("replaced_tokens"), stale_tokens_kept=opt("stale_tokens_kept"))


@dataclass(frozen=True)
class NoticeRef:
    """An appended invalidation notice in the request: after the turn group starting at
    ``after_seq``, ``tokens`` long (profile tokenizer, text only)."""

    after_seq: int
    tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"after_seq": self.after_seq, "tokens": self.tokens}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NoticeRef:
        return cls(after_seq=int(data["after_seq"]), tokens=int(data["tokens"]))


@dataclass(frozen=True)
class InvalidationReport:
    """The request's invalidation summary (issue 11): the representation ``mode`` (auto,
    tombstone, notice), ``pass_due`` (a trunk rewrite was due: tombstones of new changes
    wait for it), ``deferred`` (change seqs whose tombstones wait), ``shown_upto`` (the
    latest change seq shown as a tombstone so far), counts and tokens of the historical
    observations in the request by choice, the appended ``notices``, and ``presented``:
    the revisions (``path@rN``) the request presents as current, which an action planned
    on it assumes (checked with POST /preconditions)."""

    mode: str = "auto"
    pass_due: bool = False
    deferred: tuple[int, ...] = ()
    shown_upto: int = 0
    historical: int = 0
    tombstones: int = 0
    tombstone_tokens: int = 0
    replaced_tokens: int = 0
    noticed: int = 0
    stale_tokens_kept: int = 0
    notices: tuple[NoticeRef, ...] = ()
    presented: tuple[str, ...] = ()

    @property
    def notice_tokens(self) -> int:
        return sum(n.tokens for n in self.notices)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "pass_due": self.pass_due, "deferred": list(self.deferred),
                "shown_upto": self.shown_upto, "historical": self.historical, "tombstones": self.tombstones,
                "tombstone_tokens": self.tombstone_tokens, "replaced_tokens": self.replaced_tokens,
                "noticed": self.noticed, "stale_tokens_kept": self.stale_tokens_kept,
                "notices": [n.to_json() for n in self.notices], "notice_tokens": self.notice_tokens,
                "presented": list(self.presented)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InvalidationReport:
        """Inverse of :meth:`to_json` (``notice_tokens`` is derived)."""
        return cls(mode=str(data["mode"]), pass_due=bool(data["pass_due"]),
                   deferred=tuple(int(s) for s in data.get("deferred", ())), shown_upto=int(data.get("shown_upto", 0)),
                   historical=int(data["historical"]), tombstones=int(data["tombstones"]),
                   tombstone_tokens=int(data["tombstone_tokens"]), replaced_tokens=int(data["replaced_tokens"]),
                   noticed=int(data["noticed"]), stale_tokens_kept=int(data["stale_tokens_kept"]),
                   notices=tuple(NoticeRef.from_json(n) for n in data.get("notices", ())),
                   presented=tuple(str(p) for p in data.get("presented", ())))


@dataclass(frozen=True)
class Item:
    """One event as the manifest accounts for it.

    ``zone``: root, trunk or leaf, None when nothing of it is on the wire. For a tool
    result: ``bytes`` (UTF-8) and ``lines`` ("\n"-lines) of its payload, ``tokens`` its
    payload tokens (profile tokenizer) when known (counted once after its POST, or here
    for a payload within the cap) and ``tokens_known``. For a user or assistant message in
    the leaf, ``tokens`` is what it adds to the rendered request, its chat framing included
    (the request's own measurement, ``Measurement.leaf_tokens``; none when the meter cannot
    attribute it). None for other kinds.
    ``elided_tokens``: tokens left out by a head + tail cut (0 when not cut or not known
    yet), ``elided_bytes`` and ``elided_lines`` (first, last) the span it leaves out.
    ``pending_calls``: call ids of the turn still awaiting results. ``transforms``: changes
    applied to its text on the way into the request (provider rules, then control-token
    neutralisation), in the order applied.

    Invalidation (issue 11), for a tool result whose observation is in the dependency
    graph: ``state`` (current, historical, possibly_stale, unknown), ``bindings`` (what it
    read, ``path@rN[ lines a:b]``), for a historical one ``superseded_by`` (the writes,
    ``path@rN``) and ``write`` (the first of them), for an external binding with a TTL
    ``fetched_at`` / ``expires_at`` (epoch seconds), and, when it is in the request and
    not current, ``invalidation``: the choice made and its token and cache effect.
    """

    seq: int
    event_id: str
    kind: str
    representation: Representation
    why: str
    zone: str | None = None
    handle: str | None = None
    call_id: str | None = None
    tokens: int | None = None
    elided_tokens: int = 0
    pending_calls: tuple[str, ...] = ()
    transforms: tuple[Transform, ...] = ()
    bytes: int | None = None
    lines: int | None = None
    tokens_known: bool | None = None
    elided_bytes: int | None = None
    elided_lines: tuple[int, int] | None = None
    state: str | None = None
    bindings: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    write: WriteRef | None = None
    fetched_at: float | None = None
    expires_at: float | None = None
    invalidation: InvalidationChoice | None = None

    def to_json(self) -> dict[str, Any]:
        """The manifest entry: ``seq, event_id, kind`` and ``handle``, ``call_id``,
        ``bytes``, ``lines``, ``tokens_known``, ``tokens`` when set, then ``zone,
        representation, why``, and ``elided_bytes``, ``elided_lines``, ``elided_tokens``,
        ``pending_calls``, ``transforms``, then ``state``, ``bindings``,
        ``superseded_by``, ``write``, ``fetched_at``, ``expires_at``, ``invalidation``
        when set and not empty.

        Built once per item and returned as the same dict afterwards (read-only): a
        session's items are reused from GET to GET, so consecutive manifests share their
        unchanged entries, which the stored delta then finds by identity."""
        cached: dict[str, Any] | None = self.__dict__.get("_json")
        if cached is None:
            cached = self._build_json()
            object.__setattr__(self, "_json", cached)  # a memo of the frozen value, not a field
        return cached

    def _build_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "event_id": self.event_id, "kind": self.kind}
        if self.handle is not None:
            out["handle"] = self.handle
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.bytes is not None:
            out["bytes"] = self.bytes
        if self.lines is not None:
            out["lines"] = self.lines
        if self.tokens_known is not None:
            out["tokens_known"] = self.tokens_known
        if self.tokens is not None:
            out["tokens"] = self.tokens
        out["zone"] = self.zone
        out["representation"] = self.representation.value
        out["why"] = self.why
        if self.elided_bytes is not None:
            out["elided_bytes"] = self.elided_bytes
        if self.elided_lines is not None:
            out["elided_lines"] = list(self.elided_lines)
        if self.elided_tokens:
            out["elided_tokens"] = self.elided_tokens
        if self.pending_calls:
            out["pending_calls"] = list(self.pending_calls)
        if self.transforms:
            out["transforms"] = [t.to_json() for t in self.transforms]
        if self.state is not None:
            out["state"] = self.state
        if self.bindings:
            out["bindings"] = list(self.bindings)
        if self.superseded_by:
            out["superseded_by"] = list(self.superseded_by)
        if self.write is not None:
            out["write"] = self.write.to_json()
        if self.fetched_at is not None:
            out["fetched_at"] = self.fetched_at
        if self.expires_at is not None:
            out["expires_at"] = self.expires_at
        if self.invalidation is not None:
            out["invalidation"] = self.invalidation.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Item:
        """Inverse of :meth:`to_json`. ValueError on an unknown representation or key."""
        unknown = set(data) - _ITEM_KEYS
        if unknown:
            raise ValueError(f"unknown manifest item keys {sorted(unknown)}")
        lines = data.get("elided_lines")
        return cls(
            seq=int(data["seq"]), event_id=str(data["event_id"]), kind=str(data["kind"]),
            representation=Representation(data["representation"]), why=str(data["why"]), zone=data.get("zone"),
            handle=data.get("handle"), call_id=data.get("call_id"),
            tokens=None if data.get("tokens") is None else int(data["tokens"]),
            elided_tokens=int(data.get("elided_tokens", 0)),
            pending_calls=tuple(data.get("pending_calls", ())),
            transforms=tuple(Transform.from_json(t) for t in data.get("transforms", ())),
            bytes=None if data.get("bytes") is None else int(data["bytes"]),
            lines=None if data.get("lines") is None else int(data["lines"]),
            tokens_known=None if data.get("tokens_known") is None else bool(data["tokens_known"]),
            elided_bytes=None if data.get("elided_bytes") is None else int(data["elided_bytes"]),
            elided_lines=None if lines is None else (int(lines[0]), int(lines[1])),
            state=data.get("state"), bindings=tuple(data.get("bindings", ())),
            superseded_by=tuple(data.get("superseded_by", ())),
            write=None if data.get("write") is None else WriteRef.from_json(data["write"]),
            fetched_at=None if data.get("fetched_at") is None else float(data["fetched_at"]),
            expires_at=None if data.get("expires_at") is None else float(data["expires_at"]),
            invalidation=None if data.get("invalidation") is None else InvalidationChoice.from_json(data["invalidation"]),
        )


_ITEM_KEYS = {"seq", "event_id", "kind", "representation", "why", "zone", "handle", "call_id", "tokens",
              "elided_tokens", "pending_calls", "transforms", "bytes", "lines", "tokens_known", "elided_bytes",
              "elided_lines", "state", "bindings", "superseded_by", "write", "fetched_at", "expires_at",
              "invalidation"}


@dataclass(frozen=True)
class EventRange:
    """Older events accounted for together, so that a manifest's size is bounded by the
    request's window, not by the session: the events of ``seq_from..seq_to`` not listed
    one by one, how many of each representation, the payload ``tokens`` of the elided
    tool results among them (the known ones; ``tokens_known`` False while some count is
    not known yet) and their payload ``bytes``, and the index payload (``index``, a
    handle) that names their turn and result handles."""

    seq_from: int
    seq_to: int
    events: int
    representations: Mapping[Representation, int]
    tokens: int
    index: str | None
    why: str
    bytes: int | None = None  # None in manifests stored before payload sizes were reported
    tokens_known: bool = True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq_from": self.seq_from, "seq_to": self.seq_to, "events": self.events,
                               "representations": {r.value: n for r, n in self.representations.items()},
                               "tokens": self.tokens}
        if self.bytes is not None:
            out["bytes"] = self.bytes
            out["tokens_known"] = self.tokens_known
        out["index"] = self.index
        out["why"] = self.why
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventRange:
        return cls(seq_from=int(data["seq_from"]), seq_to=int(data["seq_to"]), events=int(data["events"]),
                   representations={Representation(r): int(n) for r, n in data["representations"].items()},
                   tokens=int(data["tokens"]), index=data.get("index"), why=str(data["why"]),
                   bytes=None if data.get("bytes") is None else int(data["bytes"]),
                   tokens_known=bool(data.get("tokens_known", True)))


@dataclass(frozen=True)
class Divergence:
    """Where and why a request stopped extending the previous one (seed 000 section 4.4.3):
    ``zone``, the event ``seq`` when known, ``token_offset`` of the first changed token."""

    zone: str
    seq: int | None
    token_offset: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"zone": self.zone, "seq": self.seq, "token_offset": self.token_offset, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Divergence:
        return cls(zone=str(data["zone"]), seq=data.get("seq"), token_offset=int(data["token_offset"]),
                   reason=str(data["reason"]))


@dataclass(frozen=True)
class CacheReport:
    """Prefix reuse against the previous request of the session in the same format
    (tokens; :func:`app.domain.prefix.predict_reuse`)."""

    model: str
    block_size: int
    predicted_cached_tokens: int
    uncached_tokens: int
    previous_tokens: int
    common_prefix_tokens: int
    common_prefix_exact: bool
    extends_previous: bool
    breakpoints: tuple[int, ...] = ()
    first_divergence: Divergence | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model, "block_size": self.block_size,
            "predicted_cached_tokens": self.predicted_cached_tokens, "uncached_tokens": self.uncached_tokens,
            "previous_tokens": self.previous_tokens, "common_prefix_tokens": self.common_prefix_tokens,
            "common_prefix_exact": self.common_prefix_exact, "extends_previous": self.extends_previous,
        }
        if self.breakpoints:
            out["breakpoints"] = list(self.breakpoints)
        if self.first_divergence is not None:
            out["first_divergence"] = self.first_divergence.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CacheReport:
        divergence = data.get("first_divergence")
        return cls(
            model=str(data["model"]), block_size=int(data["block_size"]),
            predicted_cached_tokens=int(data["predicted_cached_tokens"]), uncached_tokens=int(data["uncached_tokens"]),
            previous_tokens=int(data["previous_tokens"]), common_prefix_tokens=int(data["common_prefix_tokens"]),
            common_prefix_exact=bool(data["common_prefix_exact"]), extends_previous=bool(data["extends_previous"]),
            breakpoints=tuple(int(b) for b in data.get("breakpoints", ())),
            first_divergence=None if divergence is None else Divergence.from_json(divergence),
        )


@dataclass(frozen=True)
class TokenCounts:
    """Exact tokens of the rendered request: ``total``, ``by_zone`` (root, trunk, leaf) and
    ``by_role`` (system, tools, task_state, observations), each summing to ``total``."""

    total: int
    by_zone: Mapping[str, int]
    by_role: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "by_zone": dict(self.by_zone), "by_role": dict(self.by_role)}


@dataclass(frozen=True)
class LayoutReport:
    """Where each zone sits in the wire body, and the layout state the request was built
    with: ``cut_seq`` (first kept turn group), ``version`` (of the layout state),
    ``evicted_now`` (turn groups this request evicted), ``elision_index`` (handles of
    the index payloads the elision note names)."""

    root: str
    trunk: str
    leaf: str
    cut_seq: int
    evicted_now: int
    elision_index: tuple[str, ...] = ()
    version: int | None = None  # None in manifests served before layout states were versioned

    def to_json(self) -> dict[str, Any]:
        out = {"root": self.root, "trunk": self.trunk, "leaf": self.leaf, "cut_seq": self.cut_seq,
               "evicted_now": self.evicted_now, "elision_index": list(self.elision_index)}
        if self.version is not None:
            out["version"] = self.version
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayoutReport:
        return cls(root=str(data["root"]), trunk=str(data["trunk"]), leaf=str(data["leaf"]),
                   cut_seq=int(data["cut_seq"]), evicted_now=int(data["evicted_now"]),
                   elision_index=tuple(data.get("elision_index", ())),
                   version=None if data.get("version") is None else int(data["version"]))


def budget_json(budget: Budget) -> dict[str, Any]:
    """The manifest's ``budget``: W, O, M, ``input_limit`` (eq. 1), ``low_watermark`` (T_lo)
    and each role's planning share in tokens."""
    return budget.as_dict() | {"t_lo": budget.eviction_target, "low_watermark": budget.eviction_target,
                               "role_limits": budget.role_limits()}


@dataclass(frozen=True)
class Manifest:
    """What one served request contains and why; persisted per request (seed 003).

    ``id`` is None until the manifest is stored. ``budget`` is kept as its JSON form (so a
    stored manifest reads back exactly even if the profile changed since).
    ``items``: the request's window one by one; ``elided``: the newest evicted turn groups'
    events one by one (those the elision note lists line by line); ``ranges``: older events
    together. Every event of the session up to ``last_seq`` is in exactly one of them.
    ``elided_tokens``: tokens left out of this request (evicted turns plus head + tail cuts),
    summing the known counts; ``elided_tokens_exact``: False while some elided or cut
    output's count is not known yet (None in manifests stored before it was reported).
    """

    session_id: str
    profile: str
    format: str
    last_seq: int
    request_sha256: str
    tokens: TokenCounts
    budget: Mapping[str, Any]
    cache: CacheReport
    layout: LayoutReport
    items: tuple[Item, ...]
    elided: tuple[Item, ...]
    elided_tokens: int
    layout_warnings: tuple[str, ...] = ()
    ranges: tuple[EventRange, ...] = ()
    id: int | None = None
    elided_tokens_exact: bool | None = None
    #: select's compaction report (issue 10): policy, whether this request ran a pass, the
    #: watermarks, the record's fold point, tokens and budget; None under window
    compaction: Mapping[str, Any] | None = None
    invalidation: InvalidationReport | None = None  # None in manifests served before issue 11

    def to_json(self, previous: tuple[Manifest, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The manifest as served (``id`` last, when stored).

        ``previous``: an earlier manifest and its JSON (from this method, ``items`` and
        ``elided`` as built): a session's items are reused from GET to GET and their JSON
        is built once (:meth:`Item.to_json`), so for the leading items that are the same
        objects as ``previous``'s, its entries are taken as they are (the same dicts) instead
        of reading every item again. The result is the same."""
        before = previous[0] if previous is not None else None
        before_json = previous[1] if previous is not None else {}
        out: dict[str, Any] = {
            "session_id": self.session_id, "profile": self.profile, "format": self.format, "last_seq": self.last_seq,
            "request_sha256": self.request_sha256, "tokens": self.tokens.to_json(), "budget": dict(self.budget),
            "cache": self.cache.to_json(), "layout": self.layout.to_json(),
            "items": _items_json(self.items, before.items if before else (), before_json.get("items")),
            "elided": _items_json(self.elided, before.elided if before else (), before_json.get("elided")),
        }
        if self.invalidation is not None:
            out["invalidation"] = self.invalidation.to_json()
        out["elided_tokens"] = self.elided_tokens
        if self.elided_tokens_exact is not None:
            out["elided_tokens_exact"] = self.elided_tokens_exact
        out["layout_warnings"] = list(self.layout_warnings)
        if self.compaction is not None:
            out["compaction"] = dict(self.compaction)
        if self.ranges:
            out["ranges"] = [r.to_json() for r in self.ranges]
        if self.id is not None:
            out["id"] = self.id
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """Inverse of :meth:`to_json`. ValueError/KeyError on a malformed manifest."""
        tokens = data["tokens"]
        return cls(
            session_id=str(data["session_id"]), profile=str(data["profile"]), format=str(data["format"]),
            last_seq=int(data["last_seq"]), request_sha256=str(data["request_sha256"]),
            tokens=TokenCounts(int(tokens["total"]), dict(tokens["by_zone"]), dict(tokens["by_role"])),
            budget=dict(data["budget"]), cache=CacheReport.from_json(data["cache"]),
            layout=LayoutReport.from_json(data["layout"]),
            items=tuple(Item.from_json(i) for i in data["items"]),
            elided=tuple(Item.from_json(i) for i in data["elided"]),
            elided_tokens=int(data["elided_tokens"]), layout_warnings=tuple(data.get("layout_warnings", ())),
            elided_tokens_exact=None if data.get("elided_tokens_exact") is None else bool(data["elided_tokens_exact"]),
            ranges=tuple(EventRange.from_json(r) for r in data.get("ranges", ())),
            id=None if data.get("id") is None else int(data["id"]),
            compaction=dict(data["compaction"]) if data.get("compaction") is not None else None,
            invalidation=None if data.get("invalidation") is None else InvalidationReport.from_json(data["invalidation"]),
        )


def shared_prefix(before: Sequence[Any], after: Sequence[Any]) -> int:
    """How many leading elements of ``after`` are the same objects as ``before``'s (found
    in C, without reading the objects)."""
    return next(compress(count(), map(operator.is_not, before, after)), min(len(before), len(after)))


def _items_json(items: tuple[Item, ...], before: tuple[Item, ...] = (),
                before_json: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Each item's JSON (:meth:`Item.to_json`; the memo read inline: hundreds a manifest),
    the leading ones that are ``before``'s items taken from ``before_json`` (their JSON)."""
    reused = before_json[:shared_prefix(before, items)] if before_json is not None and len(before_json) == len(before) \
        else []
    return reused + [i.__dict__.get("_json") or i.to_json() for i in items[len(reused):]]


@dataclass(frozen=True)
class ManifestSummary:
    """One line of a session's manifest list (the stored summary columns only)."""

    id: int
    format: str
    last_seq: int
    request_sha256: str
    tokens_total: int
    created_at: str  # ISO 8601

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "format": self.format, "last_seq": self.last_seq, "request_sha256": self.request_sha256,
                "tokens_total": self.tokens_total, "created_at": self.created_at}
