"""Process-local memo of per-session work that only grows (events are append-only).

* events: a session's parsed events up to a seq; the next GET fetches only later rows.
* leaf: per session, a map from what a turn group's leaf messages depend on to those
  messages (and bounded tool outputs); see ``assemble_window(leaf_cache=...)``. It goes
  with the session's entry.
* prefix: the previous request's ids (packed little-endian uint32) and full chained
  block digests per (session, format), so prefix-reuse prediction hashes only the new
  blocks and gives the exact divergence offset.

Everything here is an optimisation: on a miss (another worker, a restart) the service
reads the database and hashes everything, with identical results.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

from sqlalchemy.orm import Session as OrmSession

from app.domain.types import Event
from app.store import repository as repo


class AssemblyMemo:
    def __init__(self, max_sessions: int = 512) -> None:
        self.max_sessions = max_sessions
        self._events: OrderedDict[str, tuple[int, list[Event]]] = OrderedDict()
        self._leaf: OrderedDict[str, dict[Any, Any]] = OrderedDict()
        self._prefix: OrderedDict[tuple[str, str], tuple[bytes, tuple[bytes, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def _put(self, table: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > self.max_sessions:
                table.popitem(last=False)

    def events(self, db: OrmSession, session_id: str, last_seq: int) -> list[Event]:
        """The session's events up to ``last_seq`` (the session row's, read in this
        transaction), fetching only rows newer than the memo's."""
        with self._lock:
            known = self._events.get(session_id)
        if known is None or known[0] > last_seq:
            events = repo.load_events(db, session_id, upto_seq=last_seq)
        else:
            seen, cached = known
            if seen == last_seq:
                return list(cached)
            events = list(cached) + repo.load_events(db, session_id, after_seq=seen, upto_seq=last_seq)
        if events and events[-1].seq != len(events):
            return repo.load_events(db, session_id, upto_seq=last_seq)  # never memoise a surprise
        self._put(self._events, session_id, (last_seq, events))
        return list(events)

    def leaf_cache(self, session_id: str) -> dict[Any, Any]:
        """The session's leaf cache (created empty; dropped with the least recently used
        sessions beyond ``max_sessions``)."""
        with self._lock:
            cache = self._leaf.get(session_id)
            if cache is not None:
                self._leaf.move_to_end(session_id)
                return cache
        cache = {}
        self._put(self._leaf, session_id, cache)
        return cache

    def previous_request(self, session_id: str, fmt: str) -> tuple[bytes, tuple[bytes, ...]] | None:
        """(packed ids, full block digests) of the session's previous request in ``fmt``."""
        with self._lock:
            return self._prefix.get((session_id, fmt))

    def remember_request(self, session_id: str, fmt: str, packed_ids: bytes, chain: Sequence[bytes]) -> None:
        self._put(self._prefix, (session_id, fmt), (bytes(packed_ids), tuple(chain)))


def memo_of(owner: Any) -> AssemblyMemo:
    """The memo attached to a long-lived object (the app's MeterRegistry), created once."""
    memo = getattr(owner, "_ctxd_assembly_memo", None)
    if memo is None:
        memo = AssemblyMemo()
        setattr(owner, "_ctxd_assembly_memo", memo)
    return memo
