"""Bindings inferred at ingest from the commands of a session's declared shell tools
(issue 11 items 1, 2; rules in app/adapters/bash_effects.py, declared tools in
app/adapters/shell_tools.py).

A tool result answering a call to a declared shell tool, posted without a ``binding`` and
without ``conditions["reads"]``, gets what the offline importer (ctxd_tools/miniswe.py)
infers from the call's command: one ``artifact_write`` event per written artifact (event
id ``infer:<seq of the result>:<j>``, placed right before the result, with the content hash
of an exactly known text), the binding of its first read and the other reads, the hash of a
whole-file ``cat`` read, and the ``unknown`` binding of a command that does not parse. They
are resolved to the server's revisions like a client's (app/domain/ingest.py ``_bind_reads``). Client-supplied
bindings win: a result that carries a binding or ``conditions["reads"]``, or that follows
``artifact_write`` events in its batch (none since the batch's previous tool result: the
client's writes for that call, as ctxd_tools/miniswe.py places them), is kept as given,
and nothing is inferred for its call.

The session's :class:`~app.adapters.bash_effects.SessionEffects` (texts written so far,
artifacts seen) is kept per process for the session's last seq in :class:`ShellStates`
(``AppState.shell_states``, bounded in bytes by ``CTXD_SHELL_STATE_BYTES``) and rebuilt
from the stored tool calls when another process (or a rolled-back batch) moved the log, or
the state was evicted: the common case costs one parse per shell call, never a replay of
the session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session as OrmSession

from app.adapters.bash_effects import CallEffects, SessionEffects, command_of
from app.adapters.shell_tools import call_bindings, declared_shell_tools, hash_effects
from app.caches import ENTRY_OVERHEAD, ByteLRU
from app.domain.ingest import PostedEvent
from app.store import repository as repo
from app.store.tables import SessionRow


@dataclass
class ShellState:
    """A session's shell inference state after its events up to ``seq``: the session's
    effects and the effects of its shell calls not yet answered (call id -> effects)."""

    seq: int
    effects: SessionEffects = field(default_factory=SessionEffects)
    pending: dict[str, CallEffects] = field(default_factory=dict)

    def clone(self) -> ShellState:
        """An independent copy (texts and effects are immutable: the dicts are copied)."""
        effects = SessionEffects(cwd=self.effects.cwd, root=self.effects.root)
        effects.known_sources = dict(self.effects.known_sources)
        effects.seen = dict(self.effects.seen)
        return ShellState(seq=self.seq, effects=effects, pending=dict(self.pending))

    def call(self, call: Mapping[str, Any], shell: Mapping[str, str]) -> None:
        """Run one tool call (``{call_id, name, arguments}``) if it calls a shell tool."""
        argument = shell.get(call.get("name", ""))
        if argument is not None:
            self.pending[call["call_id"]] = self.effects.run(command_of(call.get("arguments") or "", argument))


    def size(self) -> int:
        """Estimated bytes held (characters of the texts, artifact names and call ids, plus
        ENTRY_OVERHEAD per entry): what :class:`ShellStates` charges for it."""
        effects = self.effects
        n = ENTRY_OVERHEAD + len(effects.cwd) + len(effects.root)
        n += sum(len(a) + len(t) + ENTRY_OVERHEAD for a, t in effects.known_sources.items())
        n += sum(len(a) + ENTRY_OVERHEAD for a in effects.seen)
        for call_id, call in self.pending.items():
            n += len(call_id) + ENTRY_OVERHEAD + sum(len(a) for a in call.written)
            n += sum(len(t) for t in call.contents if t is not None)
        return n


class ShellStates(ByteLRU[str, ShellState]):
    """The shell inference state per session id of this process: least recently used
    dropped first, at most ``max_bytes`` by :meth:`ShellState.size` (a state larger than
    that is not kept: its session rebuilds it per batch). Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes, lambda session_id, state: len(session_id) + state.size())


class Inference:
    """The shell inference of one ingest batch of one session, built by :meth:`load` with
    what the batch needs read up front (its :class:`ShellState`, when a call or result of
    the batch may use it); it reads no database afterwards (the
    :class:`app.domain.ingest.ShellInference` port of the batch's plan). Not thread-safe:
    one per batch. ``states``: the process's cached states (None: none kept, every batch
    that needs one rebuilds it)."""

    def __init__(self, session_id: str, start_seq: int, shell: Mapping[str, str], states: ShellStates | None = None,
                 state: ShellState | None = None) -> None:
        self.states = states
        self.session_id = session_id
        self.start_seq = start_seq
        self.shell = shell
        self._state = state

    @classmethod
    def load(cls, db: OrmSession, row: SessionRow, events: Sequence[PostedEvent],
             states: ShellStates | None = None) -> Inference | None:
        """The inference of ``events`` (the batch's new events) for the session ``row``
        (locked), or None when the session declares no shell tool. The session's state is
        taken (a copy of the cached one at the session's last seq, else rebuilt from the
        stored tool calls) when a result, or a message calling a shell tool, is among them."""
        shell = declared_shell_tools(row.tools or [], row.meta or {})
        if not shell:
            return None
        needed = any(e.kind == "tool_result" or (e.kind == "message" and any(
            c.get("name") in shell for c in e.fields.get("tool_calls") or [])) for e in events)
        state = None
        if needed:
            cached = states.get(row.id) if states is not None else None
            if cached is not None and cached.seq == row.last_seq:
                state = cached.clone()  # a rolled-back batch leaves the cached one intact
            else:
                state = ShellState(seq=row.last_seq)
                for call in repo.message_tool_calls(db, row.id, upto_seq=row.last_seq):
                    state.call(call, shell)
        return cls(row.id, row.last_seq, shell, states, state)

    def _loaded(self) -> ShellState:
        if self._state is None:
            raise RuntimeError("the shell inference state of a batch is loaded with it (Inference.load)")
        return self._state

    def message(self, body: Mapping[str, Any]) -> None:
        """Run the shell calls of a new message event (its stored body)."""
        calls = [c for c in body.get("tool_calls") or [] if c.get("name") in self.shell]
        if calls:
            state = self._loaded()
            for call in calls:
                state.call(call, self.shell)

    def result(self, body: dict[str, Any], payload: str, *, described: bool = False,
               revision_of: Callable[[str], int] = lambda artifact: 0) -> list[dict[str, Any]] | None:
        """For a new tool result (its body, before its binding is resolved; ``payload`` its
        raw text; ``revision_of``: an artifact's current revision): None when nothing is
        inferred: no shell call, or the client described it (a binding,
        ``conditions["reads"]``, or ``described``: the batch posted artifact writes right
        before it, since its previous tool result). Else the bodies of the
        ``artifact_write`` events to append before the result: ``{"artifact",
        "content_hash"?}``; the body gets the inferred binding and ``conditions["reads"]``."""
        if not self.shell:
            return None
        conditions = body.get("conditions") or {}
        state = self._loaded()
        call = state.pending.pop(body["call_id"], None)
        if call is None or described or body.get("binding") is not None or "reads" in conditions:
            return None  # not a shell call, or bound by the client: kept as given
        revisions = {r.artifact: revision_of(r.artifact) for r in call.effects.reads if r.artifact in call.written}
        binding, reads = call_bindings(call, revisions)
        writes: list[dict[str, Any]] = [{"artifact": a} for a in call.written]
        hash_effects(call, writes, binding, exit_code=body.get("exit_code"),
                     failed=bool(conditions.get("exception_info")), payload=payload)
        if binding is not None:
            body["binding"] = binding
        if reads:
            body["conditions"] = {**conditions, "reads": reads}
        if call.touched:  # named by a program ctxd does not know: earlier reads are possibly stale
            body["conditions"] = {**(body.get("conditions") or {}), "touches": list(call.touched)}
        return writes

    def committed(self, seq: int) -> Callable[[], None] | None:
        """What to do once the batch that ended at ``seq`` has committed: keep its state
        (valid for ``seq``), or move the cached one on, unchanged, when the batch never
        needed it (unless another batch of this process published meanwhile); None: nothing."""
        states = self.states
        if states is None:
            return None
        if self._state is not None:
            self._state.seq = seq
            state, session_id = self._state, self.session_id

            def keep() -> None:
                states.put(session_id, state)

            return keep
        cached = states.get(self.session_id) if seq != self.start_seq else None
        if cached is None or cached.seq != self.start_seq:
            return None
        moved = ShellState(seq=seq, effects=cached.effects, pending=cached.pending)

        def move() -> None:
            states.replace(self.session_id, cached, moved)

        return move
