"""Process-local memo of per-session work that only grows (events are append-only).

Per session:

* events: the parsed events up to a seq; the next GET fetches only later rows.
* leaf: a map from what a turn group's leaf messages depend on to those messages (and
  bounded tool outputs); see ``assemble_window(leaf_cache=...)``.
* prefix: per wire format, the previous request's ids (packed little-endian uint32) and
  full chained block digests, so prefix-reuse prediction hashes only the new blocks and
  gives the exact divergence offset.

The memo is bounded in bytes (``max_bytes``, setting ``CTXD_MEMO_BYTES``, 256 MiB by
default) and in sessions (``max_sessions``): least recently used sessions are dropped
whole. A session's size is estimated from its text (event contents, payloads, reasoning
and arguments, counted twice for the leaf messages built from them, at 1 byte per
character for ASCII) and its remembered ids and digests.

Everything here is an optimisation: on a miss (another worker, a restart, an evicted
session) the service reads the database and hashes everything, with identical results.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cachetools
from sqlalchemy.orm import Session as OrmSession

from app.domain.types import Event, MessageEvent, ToolResultEvent
from app.store import repository as repo

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_SESSIONS = 512


def _event_bytes(event: Event) -> int:
    """Estimated bytes the memo holds for ``event`` (its text twice: the event and the
    leaf message built from it)."""
    if isinstance(event, ToolResultEvent):
        return 2 * len(event.payload) + 200
    if isinstance(event, MessageEvent):
        text = len(event.content) + len(event.reasoning or "")
        text += sum(len(c.arguments) + len(c.name) + len(c.call_id) for c in event.tool_calls)
        return 2 * text + 200
    return 200


@dataclass
class _Entry:
    session_id: str = ""
    seen: int = 0
    events: list[Event] = field(default_factory=list)
    event_bytes: int = 0
    leaf: dict[Any, Any] = field(default_factory=dict)
    prefix: dict[str, tuple[bytes, tuple[bytes, ...]]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.event_bytes + sum(len(ids) + 32 * len(chain) for ids, chain in self.prefix.values())


class AssemblyMemo:
    """Thread-safe, bounded (``max_bytes``, ``max_sessions``) per-session memo."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_sessions < 1 or max_bytes < 0:
            raise ValueError("max_sessions >= 1 and max_bytes >= 0 required")
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        # cachetools' LRU bounded in bytes; an entry is charged at most max_bytes, so the
        # most recently used session stays even when it alone is larger
        self._sessions: cachetools.LRUCache[str, _Entry] = cachetools.LRUCache(
            maxsize=max_bytes, getsizeof=lambda entry: min(entry.size, max_bytes))
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """Estimated bytes held (see the module docstring)."""
        return sum(entry.size for entry in self._sessions.values())

    def __len__(self) -> int:
        return len(self._sessions)

    def _entry(self, session_id: str) -> _Entry:
        """The session's entry, created if missing, marked most recently used (lock held)."""
        entry = self._sessions.get(session_id)  # marks it most recently used
        if entry is None:
            entry = self._sessions[session_id] = _Entry(session_id)
        return entry

    def _resize(self, entry: _Entry, before: int) -> None:
        """Account for a change of ``entry``'s size (``before`` is no longer needed: the LRU re-sizes
        it) and evict down to the bounds (lock held).
        The most recently used session is kept even when it alone exceeds ``max_bytes``."""
        self._sessions[entry.session_id] = entry  # re-sized; evicts least recently used sessions
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem()

    def events(self, db: OrmSession, session_id: str, last_seq: int) -> list[Event]:
        """The session's events up to ``last_seq`` (the session row's, read in this
        transaction), fetching only rows newer than the memo's."""
        with self._lock:
            entry = self._sessions.get(session_id)
            seen, cached = (entry.seen, entry.events) if entry is not None else (0, None)
        if cached is None or seen > last_seq:
            events, fresh = repo.load_events(db, session_id, upto_seq=last_seq), True
        elif seen == last_seq:
            return list(cached)
        else:
            new = repo.load_events(db, session_id, after_seq=seen, upto_seq=last_seq)
            events, fresh = list(cached) + new, False
        if events and events[-1].seq != len(events):
            return repo.load_events(db, session_id, upto_seq=last_seq)  # never memoise a surprise
        with self._lock:
            entry = self._entry(session_id)
            before = entry.size
            if not fresh and entry.events is cached:  # count only what was appended
                entry.event_bytes += sum(map(_event_bytes, events[len(cached or ()):]))
            else:
                entry.event_bytes = sum(map(_event_bytes, events))
            entry.seen, entry.events = last_seq, events
            self._resize(entry, before)
        return list(events)

    def leaf_cache(self, session_id: str) -> dict[Any, Any]:
        """The session's leaf cache (see ``assemble_window(leaf_cache=...)``)."""
        with self._lock:
            return self._entry(session_id).leaf

    def previous_request(self, session_id: str, fmt: str) -> tuple[bytes, tuple[bytes, ...]] | None:
        """(packed ids, full block digests) of the session's previous request in ``fmt``."""
        with self._lock:
            entry = self._sessions.get(session_id)
            return None if entry is None else entry.prefix.get(fmt)

    def remember_request(self, session_id: str, fmt: str, packed_ids: bytes, chain: Sequence[bytes]) -> None:
        with self._lock:
            entry = self._entry(session_id)
            before = entry.size
            entry.prefix[fmt] = (bytes(packed_ids), tuple(chain))
            self._resize(entry, before)

    def forget(self, session_id: str) -> None:
        """Drop everything held for the session (it was deleted)."""
        with self._lock:
            self._sessions.pop(session_id, None)


def install_memo(owner: Any, memo: AssemblyMemo) -> AssemblyMemo:
    """Attach ``memo`` to a long-lived object (the app's MeterRegistry)."""
    owner._ctxd_assembly_memo = memo
    return memo


def memo_of(owner: Any) -> AssemblyMemo:
    """The memo attached to ``owner`` (created with the defaults on first use)."""
    memo = getattr(owner, "_ctxd_assembly_memo", None)
    if memo is None:
        memo = install_memo(owner, AssemblyMemo())
    return memo
