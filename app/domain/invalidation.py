"""The dependency graph of invalidation (seed 000 section 4.7, eq. 5, figure 4): which
observations still support claims about the current state, which are historical, and
which derived items must be reassessed. Pure standard library; values in, values out.

Nodes
-----
* **observations**: tool results with their bindings (eq. 5: ``(artifact, kind,
  revision, range, content_hash)``): the result's ``binding`` plus the further reads
  the adapter put in ``conditions["reads"]`` (one per artifact the command showed).
* **changes**: what made each revision of an artifact. Revision ``n`` of an artifact is
  made by its ``n``-th change: an ``artifact_write`` (cause ``write``), or a read whose
  content hash revealed a change no write logged (cause ``external``: the server gave
  that read a new revision at ingest, so its binding's revision is ahead of the writes).
* **derived items** (hypotheses, progress-record claims): ``depends_on`` edges to
  observations (by seq) and to other derived items (by id).

Propagation (section 4.7.1)
---------------------------
A change of artifact A to revision ``n`` marks every observation bound to A at a
revision below ``n`` **historical**: still true of the revision it read, no longer
support for the current state. It never marks an observation that has no binding to A,
whatever its text says (the negative control of example 4.1: an observation about B
whose text mentions A keeps its state). Derived items downstream of a historical
observation (or of a derived item needing reassessment) are flagged
**needs_reassessment**; nothing is deleted.

A binding of kind ``unknown`` (the command's effect could not be inferred) supports
nothing and is marked by nothing: its state says ``unknown``. A binding of kind
an observation whose artifact a later command named without a known effect (the result's
``conditions["touches"]``, inferred from a program ctxd does not know) is ``possibly_stale``
(a notice naming that command, no tombstone, no new revision); ``external`` with
``ttl_seconds`` is ``possibly_stale`` once the time of the latest event
is past ``fetched_at + ttl_seconds`` (a heuristic, section 4.7.2 footnote 11: judged at
the latest event's time, so two GETs with no event between them agree).

Writes are named ``path@rN`` (N the revision the write produced), the form the eval's
stale-support metric recognises (:func:`ctxd_tools.eval.measures.names_write`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

from app.domain.errors import InvalidEvent
from app.domain.types import ArtifactWriteEvent, Binding, Event, ToolResultEvent

__all__ = [
    "CURRENT",
    "HISTORICAL",
    "NEEDS_REASSESSMENT",
    "POSSIBLY_STALE",
    "UNBOUND",
    "UNKNOWN",
    "ArtifactLedger",
    "Change",
    "Claim",
    "ClaimSupport",
    "DependencyGraph",
    "DerivedItem",
    "GraphBuilder",
    "ItemState",
    "ObservationNode",
    "Supersession",
    "bindings_of",
    "build_graph",
    "content_hash",
    "current_support",
    "known_hash_after",
    "label",
    "over_invalidation",
    "resolve_read",
    "reveals_external_change",
]

UNKNOWN_KIND = "unknown"
EXTERNAL_KIND = "external"

State = Literal["current", "historical", "needs_reassessment", "possibly_stale", "unbound", "unknown"]
CURRENT: State = "current"
HISTORICAL: State = "historical"
NEEDS_REASSESSMENT: State = "needs_reassessment"
POSSIBLY_STALE: State = "possibly_stale"
UNBOUND: State = "unbound"
UNKNOWN: State = "unknown"


def label(artifact: str, revision: int) -> str:
    """``path@rN``: an artifact at a revision (the form the eval recognises)."""
    return f"{artifact}@r{revision}"


@dataclass(frozen=True)
class Change:
    """What made ``revision`` of ``artifact``: event ``seq`` / ``event_id``, ``cause``
    ``write`` (an artifact_write) or ``external`` (a read's content hash matched no
    logged state: the change happened outside the agent's tools)."""

    artifact: str
    revision: int
    seq: int
    event_id: str
    cause: Literal["write", "external"] = "write"

    @property
    def label(self) -> str:
        return label(self.artifact, self.revision)


@dataclass(frozen=True)
class Supersession:
    """Why a binding no longer supports the current state: it read ``artifact`` at
    ``read_revision``; ``change`` made the next revision (the write that superseded it);
    ``current_revision`` is the artifact's revision now."""

    artifact: str
    read_revision: int
    range: str | None
    change: Change
    current_revision: int

    @property
    def read_label(self) -> str:
        return label(self.artifact, self.read_revision)


@dataclass(frozen=True)
class ObservationNode:
    """A tool result in the graph: ``bindings`` with their revisions resolved (the
    server's, or the revision current at ``seq`` when the stored binding has none)."""

    seq: int
    event_id: str
    call_id: str
    handle: str
    bindings: tuple[Binding, ...]

    @property
    def unknown_effect(self) -> bool:
        return any(b.kind == UNKNOWN_KIND for b in self.bindings)


@dataclass(frozen=True)
class DerivedItem:
    """A derived entry (hypothesis, record claim, test summary): ``depends_on`` holds
    observation seqs (int) and derived ids (str)."""

    id: str
    depends_on: tuple[int | str, ...]


@dataclass(frozen=True)
class ItemState:
    """The state of one node. ``superseded``: for a historical observation, one entry
    per superseded binding (the write naming it first). ``because``: for a derived item
    needing reassessment, the observation seqs / derived ids that lost support.
    ``expires_at`` / ``fetched_at``: epoch seconds of an external binding with a TTL."""

    state: State
    superseded: tuple[Supersession, ...] = ()
    because: tuple[int | str, ...] = ()
    fetched_at: float | None = None
    expires_at: float | None = None
    #: possibly stale because a later command named the artifact (a program ctxd does not
    #: know as read-only nor interprets): that result's seq and the artifact
    touched_by: int | None = None
    touched: str | None = None

    @property
    def writes(self) -> tuple[str, ...]:
        """The superseding writes as ``path@rN`` (each once, in binding order)."""
        return tuple(dict.fromkeys(s.change.label for s in self.superseded))


def bindings_of(result: ToolResultEvent) -> tuple[Binding, ...]:
    """The bindings of a tool result: ``binding`` then each entry of
    ``conditions["reads"]`` (``{artifact, kind?, range?, revision?, content_hash?}``),
    distinct, in order. Malformed read entries are skipped (conditions are free-form)."""
    out: list[Binding] = [result.binding] if result.binding is not None else []
    reads = result.conditions.get("reads") if result.conditions else None
    for r in reads if isinstance(reads, list) else ():
        if not isinstance(r, Mapping) or not isinstance(r.get("artifact"), str):
            continue
        revision = r.get("revision")
        b = Binding(artifact=r["artifact"], kind=str(r.get("kind") or "file"),
                    revision=revision if isinstance(revision, int) and revision >= 0 else -1,
                    range=r.get("range") if isinstance(r.get("range"), str) else None,
                    content_hash=r.get("content_hash") if isinstance(r.get("content_hash"), str) else None)
        if b not in out:
            out.append(b)
    return tuple(out)


@dataclass(frozen=True)
class DependencyGraph:
    """Observations (by seq), changes (per artifact, by revision), derived items (by id),
    and ``now``: the latest event's time (epoch seconds) when known."""

    observations: Mapping[int, ObservationNode]
    changes: Mapping[str, tuple[Change, ...]]
    derived: Mapping[str, DerivedItem] = field(default_factory=dict)
    now: float | None = None
    times: tuple[tuple[int, float], ...] = ()  # (seq, at) of the events that carry a time, by seq
    #: artifact -> seqs of the tool results whose command named it without a known effect
    #: (``conditions["touches"]``): the reads before them are possibly stale
    touches: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def first_event_after(self, moment: float) -> int | None:
        """The seq of the first event whose time is past ``moment`` (epoch seconds)."""
        return next((seq for seq, at in self.times if at > moment), None)

    def revision(self, artifact: str) -> int:
        """The artifact's current revision (0 when never changed)."""
        changes = self.changes.get(artifact, ())
        return changes[-1].revision if changes else 0

    def change(self, artifact: str, revision: int) -> Change | None:
        """The change that made ``revision`` of ``artifact`` (None for revision 0)."""
        for c in self.changes.get(artifact, ()):
            if c.revision == revision:
                return c
        return None

    # ------------------------------------------------------------------ states

    def observation_state(self, seq: int) -> ItemState:
        """The state of observation ``seq``: historical (a binding's artifact has changed
        since the read; every such binding listed), unknown (the command's effect could
        not be inferred), possibly_stale (an external binding past its TTL at ``now``),
        current (bound, nothing changed), unbound (no binding: the graph knows nothing
        of it). KeyError for an unknown seq."""
        node = self.observations[seq]
        superseded = []
        for b in node.bindings:
            if b.kind == UNKNOWN_KIND:
                continue
            current = self.revision(b.artifact)
            if current > b.revision:
                first = self.change(b.artifact, b.revision + 1)
                assert first is not None  # revisions are dense: every one has its change
                superseded.append(Supersession(b.artifact, b.revision, b.range, first, current))
        if superseded:
            return ItemState(HISTORICAL, superseded=tuple(superseded))
        if node.unknown_effect:
            return ItemState(UNKNOWN)
        for b in node.bindings:
            later = next((t for t in self.touches.get(b.artifact, ()) if t > node.seq), None)
            if later is not None:
                return ItemState(POSSIBLY_STALE, touched_by=later, touched=b.artifact)
        for b in node.bindings:
            if b.kind == EXTERNAL_KIND and b.ttl_seconds is not None and b.fetched_at is not None:
                expires = b.fetched_at + b.ttl_seconds
                if self.now is not None and self.now > expires:
                    return ItemState(POSSIBLY_STALE, fetched_at=b.fetched_at, expires_at=expires)
        return ItemState(CURRENT) if node.bindings else ItemState(UNBOUND)

    def observation_states(self) -> dict[int, ItemState]:
        return {seq: self.observation_state(seq) for seq in self.observations}

    def derived_states(self) -> dict[str, ItemState]:
        """Each derived item's state: needs_reassessment when a dependency (transitively)
        is historical or possibly stale, naming the direct dependencies that lost support;
        else current. A dependency on an unknown seq or id counts as lost support (a
        missing edge never proves freshness, section 4.7.1). Cycles are cut."""
        obs = self.observation_states()
        out: dict[str, ItemState] = {}

        def lost(dep: int | str, visiting: frozenset[str]) -> bool:
            if isinstance(dep, int):
                s = obs.get(dep)
                return s is None or s.state in (HISTORICAL, POSSIBLY_STALE)
            if dep in visiting:
                return False
            if dep not in self.derived:
                return True
            return visit(dep, visiting).state == NEEDS_REASSESSMENT

        def visit(item_id: str, visiting: frozenset[str] = frozenset()) -> ItemState:
            if item_id in out:
                return out[item_id]
            item = self.derived[item_id]
            because = tuple(d for d in item.depends_on if lost(d, visiting | {item_id}))
            state = ItemState(NEEDS_REASSESSMENT, because=because) if because else ItemState(CURRENT)
            if not visiting:
                out[item_id] = state
            return state

        for item_id in self.derived:
            visit(item_id)
        return out

    def marked_by(self, change: Change) -> tuple[int, ...]:
        """Observations that ``change`` made historical: bound to its artifact at the
        revision just before ``change.revision`` (the first change after a read marks it;
        a read that ran before a write of the same call carries its older revision and is
        marked though its seq is later). Seq order."""
        return tuple(seq for seq, node in sorted(self.observations.items()) if any(
            b.artifact == change.artifact and b.kind != UNKNOWN_KIND and b.revision == change.revision - 1
            for b in node.bindings))

    def current_observations(self, artifact: str) -> tuple[ObservationNode, ...]:
        """Observations bound to ``artifact`` at its current revision, newest first."""
        current = self.revision(artifact)
        return tuple(n for _, n in sorted(self.observations.items(), reverse=True)
                     if any(b.artifact == artifact and b.revision == current and b.kind != UNKNOWN_KIND
                            for b in n.bindings))


def build_graph(events: Sequence[Event], *, derived: Iterable[DerivedItem] = (),
                now: float | None = None) -> DependencyGraph:
    """The graph of a session's events (any order; sorted by seq here).

    Revisions: an ``artifact_write`` carries the server's revision; a binding without one
    (``revision < 0``, e.g. a read entry stored before revisions were resolved) is bound
    to the revision current at its seq. A binding ahead of the writes logged before it
    records an external change (the server bumps the revision at ingest when a read's
    content hash contradicts the recorded one). ``now``: the latest event's time
    (default: the largest ``at`` among ``events``)."""
    builder = GraphBuilder()
    builder.extend(sorted(events, key=attrgetter("seq")))
    return builder.graph(derived=derived, now=now)


class GraphBuilder:
    """:func:`build_graph` kept up to date as events are appended: a session's events only
    grow (increasing seqs), so a GET adds only the events the previous one had not seen
    (the request path keeps one per session in its memo: app/domain/assembly.py
    ``cached_graph``). :meth:`copy` before :meth:`extend` when the builder is shared (a
    builder whose :meth:`graph` was taken must not change: the graph holds its mappings)."""

    __slots__ = ("changes", "last_seq", "latest", "observations", "readers", "seen", "timed", "times", "touches")

    def __init__(self) -> None:
        self.changes: dict[str, list[Change]] = {}
        self.observations: dict[int, ObservationNode] = {}
        self.latest: float | None = None
        self.times: list[tuple[int, float]] = []
        self.seen: list[Event] = []  # the events added, in order
        self.last_seq = -1
        self.readers: dict[str, list[int]] = {}  # artifact -> the observations bound to it (seqs)
        self.timed: list[int] = []  # observations with an external binding that has a TTL (seqs)
        self.touches: dict[str, list[int]] = {}  # artifact -> results whose command named it (seqs)

    def copy(self) -> GraphBuilder:
        out = GraphBuilder()
        out.changes = {a: list(c) for a, c in self.changes.items()}
        out.observations = dict(self.observations)
        out.latest, out.times, out.seen, out.last_seq = self.latest, list(self.times), list(self.seen), self.last_seq
        out.readers = {a: list(r) for a, r in self.readers.items()}
        out.timed = list(self.timed)
        out.touches = {a: list(t) for a, t in self.touches.items()}
        return out

    def states_after(self, graph: DependencyGraph, before: DependencyGraph,
                     states: Mapping[int, ItemState]) -> dict[int, ItemState]:
        """``graph.observation_states()`` (``graph``: this builder's graph) from ``states``,
        those of ``before`` (the graph of a builder this one was copied from and extended):
        only the observations the new events can have changed are judged again (the new
        ones, those bound to an artifact with a new change, and those with a TTL when the
        latest event's time moved); every other keeps its state object. Equal to
        ``graph.observation_states()``; O(what changed) but for copying ``states``."""
        out = dict(states)
        again: set[int] = set()
        for artifact, changes in graph.changes.items():
            if len(changes) != len(before.changes.get(artifact, ())):
                again.update(self.readers.get(artifact, ()))
        for artifact, touches in graph.touches.items():
            if len(touches) != len(before.touches.get(artifact, ())):
                again.update(self.readers.get(artifact, ()))
        if graph.now != before.now:
            again.update(self.timed)
        for seq in again:
            if seq in out:
                out[seq] = graph.observation_state(seq)
        # observations are only added, in seq order: the new ones follow those ``before`` had
        for seq in list(graph.observations)[len(before.observations):]:
            out[seq] = graph.observation_state(seq)
        return out

    def extend(self, events: Sequence[Event]) -> None:
        """Add ``events``, in seq order after every event added so far (the caller's
        guarantee: revisions are resolved in that order)."""
        changes, observations, times = self.changes, self.observations, self.times
        for event in events:
            self.last_seq = max(self.last_seq, event.seq)
            at = getattr(event, "at", None)
            if at is not None:
                self.latest = at if self.latest is None else max(self.latest, at)
                times.append((event.seq, at))
            if isinstance(event, ArtifactWriteEvent):
                known = changes.setdefault(event.artifact, [])
                # revisions are dense; a write below the known one (never from the server) is kept in order
                revision = max(event.revision, (known[-1].revision + 1) if known else 1)
                known.append(Change(event.artifact, revision, event.seq, event.event_id, "write"))
            elif isinstance(event, ToolResultEvent):
                resolved = []
                for b in bindings_of(event):
                    if b.kind == UNKNOWN_KIND:
                        resolved.append(b)
                        continue
                    known = changes.setdefault(b.artifact, [])
                    at_seq = known[-1].revision if known else 0
                    if b.revision < 0:
                        b = Binding(b.artifact, b.kind, at_seq, b.range, b.content_hash, b.ttl_seconds, b.fetched_at)
                    for r in range(at_seq + 1, b.revision + 1):  # external change(s) detected at this read
                        known.append(Change(b.artifact, r, event.seq, event.event_id, "external"))
                    resolved.append(b)
                    readers = self.readers.setdefault(b.artifact, [])
                    if not readers or readers[-1] != event.seq:
                        readers.append(event.seq)
                    if b.kind == EXTERNAL_KIND and b.ttl_seconds is not None and b.fetched_at is not None \
                            and (not self.timed or self.timed[-1] != event.seq):
                        self.timed.append(event.seq)
                observations[event.seq] = ObservationNode(event.seq, event.event_id, event.call_id, event.handle,
                                                          tuple(resolved))
                touched = event.conditions.get("touches") if event.conditions else None
                for artifact in touched if isinstance(touched, list) else ():
                    if isinstance(artifact, str):
                        self.touches.setdefault(artifact, []).append(event.seq)
        self.seen.extend(events)

    def graph(self, *, derived: Iterable[DerivedItem] = (), now: float | None = None) -> DependencyGraph:
        """The graph of the events added (see :func:`build_graph`)."""
        return DependencyGraph(observations=self.observations,
                               changes={a: tuple(c) for a, c in self.changes.items() if c},
                               derived={d.id: d for d in derived}, now=now if now is not None else self.latest,
                               times=tuple(self.times), touches={a: tuple(t) for a, t in self.touches.items()})


# --------------------------------------------------------------------------- record support


@dataclass(frozen=True)
class Claim:
    """A current-state claim a progress record wants to make about ``artifact`` (or about
    nothing in particular: None), citing observations by seq (``cites``)."""

    id: str
    cites: tuple[int, ...]
    artifact: str | None = None


@dataclass(frozen=True)
class ClaimSupport:
    """What a claim may cite. ``current``: cited observations that still support the
    current state. ``historical``: cited ones that do not, with why (their handles stay
    readable: they are history, not deleted). ``fresher``: observations of the claim's
    artifact at its current revision that the claim does not cite (newest first): the
    evidence to cite instead. ``state``: current when some current evidence remains and
    nothing cited is historical, else needs_reassessment."""

    claim: Claim
    current: tuple[ObservationNode, ...]
    historical: tuple[tuple[ObservationNode, ItemState], ...]
    fresher: tuple[ObservationNode, ...]
    state: State

    def to_json(self) -> dict[str, Any]:
        return {"claim": self.claim.id, "state": self.state,
                "current": [n.seq for n in self.current],
                "historical": [{"seq": n.seq, "handle": n.handle, "superseded_by": list(s.writes)}
                               for n, s in self.historical],
                "fresher": [n.seq for n in self.fresher]}


def current_support(graph: DependencyGraph, claims: Sequence[Claim]) -> tuple[ClaimSupport, ...]:
    """For a progress record (issue 10's compaction): split each claim's citations into
    current and historical evidence, and name the current observations of its artifact it
    should cite instead. A record cites only ``current`` (and ``fresher``) evidence for a
    current-state claim; ``historical`` stays reachable by handle as history.

    Example (issue 11): ``config.yaml`` read at r0 (``timeout: 30``, seq 3), written
    (r1, seq 5), read again at r1 (``timeout: 60``, seq 7): a claim about config.yaml
    citing seq 3 and 7 has ``current`` = (seq 7,), ``historical`` = ((seq 3, historical
    by config.yaml@r1),), so the record's current value is 60 and 30 is history.

    Unknown seqs are ignored (the graph has no such observation)."""
    out = []
    for claim in claims:
        current: list[ObservationNode] = []
        historical: list[tuple[ObservationNode, ItemState]] = []
        for seq in claim.cites:
            node = graph.observations.get(seq)
            if node is None:
                continue
            s = graph.observation_state(seq)
            if s.state in (HISTORICAL, POSSIBLY_STALE):
                historical.append((node, s))
            elif s.state == CURRENT:
                current.append(node)
        cited = set(claim.cites)
        fresher = tuple(n for n in graph.current_observations(claim.artifact) if n.seq not in cited) \
            if claim.artifact else ()
        state: State = CURRENT if current and not historical else NEEDS_REASSESSMENT
        out.append(ClaimSupport(claim, tuple(current), tuple(historical), fresher, state))
    return tuple(out)


# --------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class OverInvalidation:
    """Over a session: ``writes`` changes, of which ``over`` marked an observation that
    has no binding to the written artifact (must stay 0: the graph's edges are exact),
    and ``coarse``: writes flagged coarse by the caller (a tree write expanded to
    artifacts the command did not name) that marked at least one observation."""

    writes: int
    over: int
    coarse: int
    marked: int

    @property
    def rate(self) -> float:
        return (self.over + self.coarse) / self.writes if self.writes else 0.0


def over_invalidation(graph: DependencyGraph, coarse_writes: Iterable[str] = ()) -> OverInvalidation:
    """How often a write invalidates more than its own artifact (issue 11 item 2).

    ``coarse_writes``: event ids of writes the adapter inferred coarsely (a tree write
    over a directory, expanded to the artifacts seen there): each such write that marks
    an observation counts as over-invalidating, since the command did not name the file.
    ``marked``: observation markings in total (an observation marked by two writes counts
    twice)."""
    coarse_ids = set(coarse_writes)
    writes = over = coarse = marked = 0
    for artifact, changes in graph.changes.items():
        for change in changes:
            if change.cause != "write":
                continue
            writes += 1
            hit = graph.marked_by(change)
            marked += len(hit)
            if any(not any(b.artifact == artifact for b in graph.observations[s].bindings) for s in hit):
                over += 1
            elif hit and change.event_id in coarse_ids:
                coarse += 1
    return OverInvalidation(writes, over, coarse, marked)


# --------------------------------------------------------------------------- ingest


def content_hash(text: str) -> str | None:
    """The content hash ctxd and its adapters use (eq. 5's ``content_hash``): SHA-256 of
    the text's UTF-8 bytes, 64 lowercase hex digits (the form of a payload's handle, so a
    whole-file read's hash equals its payload's handle). None when the text cannot be
    encoded as UTF-8 (a lone surrogate): no hash rather than a wrong one. Clients may use
    any hash, as long as they use one consistently: hashes are compared as strings."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return hashlib.sha256(data).hexdigest()


def reveals_external_change(*, read_revision: int, current_revision: int, whole: bool,
                            read_hash: str | None, known_hash: str | None) -> bool:
    """Does a read reveal a change no logged write made (issue 11, "Also")?

    True exactly when all hold:

    * the read is bound to the artifact's **current** revision (``read_revision ==
      current_revision``): no logged write came between the state whose hash is known and
      this read (a read that names an older revision, one that ran before a write of the
      same call, is history and is not compared);
    * it read the **whole** artifact (``whole``: no range) and carries a hash
      (``read_hash``): a range's hash says nothing about the file's;
    * a hash is **known** for the current revision (``known_hash``: given by the write
      that made it, or adopted from the first whole read at it);
    * and the two **differ**.

    A write of unknown content (``sed -i``, a script, ``git checkout``) leaves its revision's
    hash unknown, so the next whole read cannot be compared: it is no external change,
    and its hash becomes the revision's known hash (:func:`known_hash_after`)."""
    return (read_revision == current_revision and whole and read_hash is not None
            and known_hash is not None and read_hash != known_hash)


@dataclass(frozen=True)
class ResolvedRead:
    """A binding's revision as the server records it: ``revision``, and ``external``
    when the read revealed a change no write logged (the artifact moves to ``revision``,
    one past the previous current revision). ``known_hash``: the hash known for the
    artifact's current revision after this read (unchanged, adopted from the read, or the
    read's after an external change)."""

    revision: int
    external: bool = False
    known_hash: str | None = None


def resolve_read(artifact: str, current_revision: int, current_hash: str | None, *, revision: int | None,
                 content_hash: str | None, range: str | None = None) -> ResolvedRead:
    """The revision a client's binding gets (eq. 5; revisions are the server's counters).

    * ``revision`` omitted: the current one. Given: kept when not ahead of the current one
      (a read that ran before a write of the same call names its older revision).
    * A whole read's ``content_hash`` (``range`` None) at the current revision that
      differs from the hash known for it (``current_hash``: by its write or an earlier
      whole read) reveals an external change (:func:`reveals_external_change`): the read
      gets ``current_revision + 1`` and the observations of older revisions become
      historical. With no hash known for the current revision, the read's is adopted
      (nothing to contradict).

    Raises:
        InvalidEvent: ``revision`` ahead of the server's (a revision from the future was
            never observed: 422, nothing stored).
    """
    if revision is not None and revision > current_revision:
        raise InvalidEvent(f"binding revision {revision} of {artifact!r} is ahead of the server's revision "
                           f"{current_revision}: revisions are the server's counters (0 before the first "
                           "artifact_write, +1 per write); omit it to bind to the current one",
                           artifact=artifact, revision=revision, current_revision=current_revision)
    at = current_revision if revision is None else revision
    whole = range is None
    if reveals_external_change(read_revision=at, current_revision=current_revision, whole=whole,
                               read_hash=content_hash, known_hash=current_hash):
        return ResolvedRead(current_revision + 1, external=True, known_hash=content_hash)
    return ResolvedRead(at, known_hash=known_hash_after(at, current_revision, whole=whole, read_hash=content_hash,
                                                        known_hash=current_hash))


def known_hash_after(read_revision: int, current_revision: int, *, whole: bool, read_hash: str | None,
                     known_hash: str | None) -> str | None:
    """The hash known for the current revision after a read that revealed no external
    change: the known one, else the read's when it is a whole read of the current revision
    (a write of unknown content gets its hash from the first whole read after it)."""
    if known_hash is None and whole and read_revision == current_revision:
        return read_hash
    return known_hash


@dataclass
class ArtifactLedger:
    """What the server keeps per artifact at ingest, as a pure value for replays and the
    eval: ``revisions`` (artifact -> current revision, 0 never changed) and ``hashes``
    (artifact -> hash known for the current revision). :meth:`write` and :meth:`read`
    apply the server's rules (:func:`resolve_read`), so a replay numbers revisions as the
    server does, external changes included."""

    revisions: dict[str, int] = field(default_factory=dict)
    hashes: dict[str, str | None] = field(default_factory=dict)

    def write(self, artifact: str, content_hash: str | None = None) -> int:
        """An ``artifact_write``: the next revision, its hash (None: content unknown)."""
        self.revisions[artifact] = self.revisions.get(artifact, 0) + 1
        self.hashes[artifact] = content_hash
        return self.revisions[artifact]

    def read(self, artifact: str, *, revision: int | None = None, range: str | None = None,
             content_hash: str | None = None) -> ResolvedRead:
        """A read binding: its resolved revision (a bump when it reveals an external change).
        Raises InvalidEvent for a revision from the future."""
        resolved = resolve_read(artifact, self.revisions.get(artifact, 0), self.hashes.get(artifact),
                                revision=revision, content_hash=content_hash, range=range)
        if resolved.external:
            self.revisions[artifact] = resolved.revision
        self.hashes[artifact] = resolved.known_hash
        return resolved

    def revision_of(self, artifact: str, *, revision: int | None = None, range: str | None = None,
                    content_hash: str | None = None) -> int:
        """:meth:`read`'s revision, for a replay that must not stop: a revision from the
        future (which the server refuses) is returned as given and changes nothing."""
        try:
            return self.read(artifact, revision=revision, range=range, content_hash=content_hash).revision
        except InvalidEvent:
            return revision if revision is not None else self.revisions.get(artifact, 0)
