"""How an invalidated observation enters the next request (seed 000 section 4.7.3,
table 9, notebook 4.4). Pure standard library.

Choices per historical observation shown in the request:

* ``tombstone``: replaced in place by a short marker (:func:`tombstone_text`) naming the
  revision read, the write that superseded it (``path@rN``) and the handle of the whole
  output. For a superseded read of an artifact the agent is editing: its own write
  superseded a ``file`` binding (the region later edits target). In place changes earlier tokens: the prefix is
  recomputed from that message on the call that first shows the tombstone.
* ``notice``: the output stays; a notice naming ``path@rN`` is appended after the turn
  group of the change (at the end of the request when it first shows, so earlier tokens
  and the cached prefix are kept). For inert history: a change from outside the agent's
  tools, a binding of another kind (a test run, a build), or a TTL past due.
* ``deferred``: a tombstone that waits for the next trunk rewrite (a compaction pass due
  within a few calls, ``pass_due``), so the prefix is not broken twice; meanwhile its
  notice is shown at once. It becomes a tombstone on the request that rewrites the trunk.

``mode`` forces one rule for every item (``tombstone`` or ``notice``; the eval uses it to
measure the token and cache effect of each); ``auto`` is the rule above.

Deferral is a layout decision: the caller keeps ``deferred`` (the change seqs waiting)
from one request to the next, so two GETs with no event between them decide alike.
"""

from __future__ import annotations

import time as _time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.domain.invalidation import HISTORICAL, POSSIBLY_STALE, Change, DependencyGraph, ItemState, ObservationNode

__all__ = ["MODES", "Choice", "InvalidationOptions", "InvalidationPlan", "Notice", "notice_text", "plan_invalidation",
           "tombstone_text"]

MODES = ("auto", "tombstone", "notice")
SHORT = 12  # hex chars of a handle printed (the handle API resolves prefixes)

ChoiceName = Literal["tombstone", "notice", "deferred"]


@dataclass(frozen=True)
class Choice:
    """The representation of one historical (or possibly stale) observation: ``choice``,
    the ``state`` behind it, ``text`` (the tombstone that replaces the output; None for a
    notice) and ``key``: the seq of the change (or TTL trigger) it answers."""

    seq: int
    choice: ChoiceName
    state: ItemState
    key: int
    text: str | None = None


@dataclass(frozen=True)
class Notice:
    """An appended notice: shown after the last turn group that starts before
    ``anchor_seq`` (the event that triggered it); ``seqs`` the observations it names."""

    anchor_seq: int
    text: str
    seqs: tuple[int, ...]


@dataclass(frozen=True)
class InvalidationPlan:
    """Choices by observation seq, the notices to append (anchor order), the change seqs
    whose replacement waits for a trunk rewrite (``deferred``: keep for the next request)
    and the state of every observation of the graph (for the manifest)."""

    choices: Mapping[int, Choice]
    notices: tuple[Notice, ...]
    deferred: frozenset[int]
    states: Mapping[int, ItemState] = field(default_factory=dict)


@dataclass(frozen=True)
class InvalidationOptions:
    """What a request's invalidation depends on besides the events: ``mode`` (``auto``,
    ``tombstone``, ``notice``), ``pass_due`` (a trunk rewrite is due within a few calls:
    issue 10's watermark signal; None: forecast it from select's watermarks,
    :mod:`app.domain.compaction.forecast`, and never due without them), ``deferred`` and
    ``shown_upto`` from the previous request's layout state (see :func:`plan_invalidation`)."""

    mode: str = "auto"
    pass_due: bool | None = False
    deferred: frozenset[int] = frozenset()
    shown_upto: int = 0


def _range(r: str | None) -> str:
    return f" lines {r}" if r else ""


def tombstone_text(node: ObservationNode, state: ItemState) -> str:
    """The marker that replaces a superseded output in place (issue 11 item 4): each
    revision read (``path@rN``, with its line range when there is one), the change that
    superseded it (``path@rM``, the first write after the read, or an external change, with
    its seq), one instruction, and the handle of the whole output (12 hex chars, once: the
    recall tool's ``handle`` or ``GET /v1/handles/{handle}`` reads it back). E.g.
    ``[ctxd tombstone: src/a.py@r2 lines 1:80 superseded by src/a.py@r3 (write, seq 57).
    Re-read before use; output: handle 3f9a2c1b7d4e]``: 57 Qwen3 tokens for one read
    (seed 000 section 4.7.3 budgets 24; the labels and the handle alone take about 40),
    about 20 more per further read. Reads of one revision superseded by the same change are
    named once: their ranges joined, or none when one of them read the whole file.

    Its text depends only on facts fixed when it is first shown, never on later writes (it
    does not name the file's current revision), so once in a request it stays
    byte-identical: a later write of the file does not break the cached prefix at every
    tombstone of that file (DESIGN.md section 6, "work per call does not grow with the
    session")."""
    ranges: dict[tuple[str, Change], list[str | None]] = {}
    for s in state.superseded:  # reads of one revision superseded by one change are named once
        ranges.setdefault((s.read_label, s.change), []).append(s.range)
    parts = []
    for (read, change), rs in ranges.items():
        lines = None if None in rs else ", ".join(dict.fromkeys(r for r in rs if r))
        parts.append(f"{read}{_range(lines)} superseded by {change.label} "
                     f"({'write' if change.cause == 'write' else 'external change'}, seq {change.seq})")
    return f"[ctxd tombstone: {'; '.join(parts)}. Re-read before use; output: handle {node.handle[:SHORT]}]"


def notice_text(change: Change, nodes: Sequence[ObservationNode], *, deferred: bool = False) -> str:
    """The notice appended for ``change``: which outputs above it made historical."""
    seqs = ", ".join(str(n.seq) for n in nodes)
    cause = "written" if change.cause == "write" else "changed outside the agent's tools"
    text = (f"[ctxd notice: {change.artifact} was {cause} at seq {change.seq}: now {change.label}. "
            f"The output(s) of seq {seqs} above read {change.artifact}@r{change.revision - 1} or earlier: "
            "historical, true of that revision, not of the current file.")
    if deferred:
        text += " They are replaced by a tombstone at the next trunk rewrite."
    return text + "]"


def _stale_notice(node: ObservationNode, state: ItemState) -> str:
    if state.touched_by is not None:
        return (f"[ctxd notice: the command of seq {state.touched_by} names {state.touched}, and ctxd cannot tell "
                f"whether it rewrote it: the output of seq {node.seq} above, read before it, is possibly stale. "
                f"Read {state.touched} again before editing it.]")
    fetched = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(state.fetched_at or 0))
    ttl = (state.expires_at or 0) - (state.fetched_at or 0)
    return (f"[ctxd notice: the output of seq {node.seq} was fetched at {fetched}; its TTL of {ttl:g} s has passed: "
            "possibly stale. Fetch it again before relying on it.]")


class InvalidationMemo(Protocol):
    """The session memo's fields this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    invalidation_choices: dict[int, Choice]
    invalidation_judgements: dict[int, tuple[Any, ...]]


def plan_invalidation(graph: DependencyGraph, *, mode: str = "auto", pass_due: bool = False,
                      trunk_rewrite: bool = False, deferred: frozenset[int] = frozenset(),
                      shown_upto: int = 0, states: Mapping[int, ItemState] | None = None,
                      memo: InvalidationMemo | None = None) -> InvalidationPlan:
    """Choose, for every historical or possibly stale observation of ``graph``, how the
    request shows it (module docstring).

    ``pass_due``: a trunk rewrite is due within a few calls (issue 10's watermarks).
    ``trunk_rewrite``: this request rewrites the trunk anyway (eviction or compaction):
    every deferred tombstone is applied and nothing new is deferred. ``deferred``: the
    change seqs deferred by the previous request. ``shown_upto``: the last seq the
    previous request covered (only changes after it are new enough to defer: a tombstone
    already shown is never turned back into a notice). A possibly stale observation's
    notice is anchored at the first event past its TTL.

    ``states``: ``graph.observation_states()`` when the caller has them (the request path
    keeps them from GET to GET, app/domain/assembly.py ``cached_states``). ``memo``: a
    mapping kept across calls (the session's), where each observation's last choice is
    kept: a choice equal to it is that same object, and a tombstone for the same state
    object takes its text instead of writing it again.

    Raises ValueError for an unknown ``mode``."""
    if mode not in MODES:
        raise ValueError(f"unknown invalidation mode {mode!r}; one of {', '.join(MODES)}")
    if states is None:
        states = graph.observation_states()
    made: dict[int, Choice] = memo.invalidation_choices if memo is not None else {}
    judgements: dict[int, tuple[Any, ...]] = memo.invalidation_judgements if memo is not None else {}

    def chosen(seq: int, name: ChoiceName, state: ItemState, key: int, text: str | None = None) -> Choice:
        """The choice, the same object as the last plan's when equal (compared by identity)."""
        held = made.get(seq)
        if held is not None and held.state is state and held.choice == name and held.key == key \
                and held.text is text:
            return held
        made[seq] = out = Choice(seq, name, state, key, text)
        return out

    choices: dict[int, Choice] = {}
    noticed: dict[tuple[int, int], list[tuple[Change | None, ObservationNode, bool]]] = {}
    still: set[int] = set()
    for seq, state in sorted(states.items()):
        node = graph.observations[seq]
        if state.state == POSSIBLY_STALE:
            key = state.touched_by if state.touched_by is not None else \
                max(graph.first_event_after(state.expires_at or 0.0) or seq, seq)
            choices[seq] = chosen(seq, "notice", state, key)
            noticed.setdefault((key, 1), []).append((None, node, False))
            continue
        if state.state != HISTORICAL:
            continue
        # the first superseding change and whether the agent is editing the artifact: a
        # function of the state and the node, kept with the state object (the same from GET to GET)
        judged = judgements.get(seq)
        if judged is not None and judged[0] is state and judged[1] is node:
            key, editing = judged[2], judged[3]
        else:
            key = min(state.superseded, key=lambda s: s.change.seq).change.seq
            editing = all(s.change.cause == "write" and node_kind(node, s.artifact) == "file"
                          for s in state.superseded)
            judgements[seq] = (state, node, key, editing)
        if mode == "notice" or (mode == "auto" and not editing):
            choice: ChoiceName = "notice"
        elif mode == "tombstone":
            choice = "tombstone"
        elif key in deferred:
            choice = "tombstone" if trunk_rewrite else "deferred"
        elif pass_due and not trunk_rewrite and key > shown_upto:
            choice = "deferred"
        else:
            choice = "tombstone"
        if choice == "deferred":
            still.add(key)
        text = None
        if choice == "tombstone":  # the text is a function of the observation and its state
            last = made.get(seq)
            text = last.text if last is not None and last.state is state and last.text is not None \
                else tombstone_text(node, state)
        choices[seq] = chosen(seq, choice, state, key, text)
        if choice != "tombstone":
            for s in state.superseded:  # one notice per change (its first superseding write)
                noticed.setdefault((s.change.seq, 0), []).append((s.change, node, choice == "deferred"))
    notices = []
    for (anchor, _), entries in sorted(noticed.items()):
        change = next((c for c, _, _ in entries if c is not None), None)
        nodes = list(dict.fromkeys(n for _, n, _ in entries))
        if change is None:
            text = "\n".join(_stale_notice(n, states[n.seq]) for n in nodes)
        else:
            text = notice_text(change, nodes, deferred=any(d for _, _, d in entries))
        notices.append(Notice(anchor, text, tuple(n.seq for n in nodes)))
    return InvalidationPlan(choices=choices, notices=tuple(notices), deferred=frozenset(still), states=states)


def node_kind(node: ObservationNode, artifact: str) -> str:
    """The kind of ``node``'s binding to ``artifact`` (the first one)."""
    return next((b.kind for b in node.bindings if b.artifact == artifact), "")
