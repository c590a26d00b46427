"""Process-local memo of per-session work that only grows (events are append-only).

Per session:

* events: the parsed events up to a seq; the next GET fetches only later rows. A POST
  appends the events it committed (:meth:`AssemblyMemo.extend`), so a GET after a POST
  to the same worker reads no event rows at all.
* leaf: a map from what a turn group's leaf messages depend on to those messages (and
  bounded tool outputs); see ``assemble_window(leaf_cache=...)``.
* prefix: per wire format, the last served request's ids (packed little-endian uint32),
  full chained block digests and layout digest (:class:`~app.domain.state.RememberedIds`),
  so prefix-reuse prediction hashes only the new blocks and gives the exact divergence.
  The planner trusts them only when their fingerprint equals the stored one (another
  worker may have served since); otherwise it rebuilds the previous request.
* manifests: per wire format, the last stored manifest (the base of the next one's delta).

The memo does no I/O: the GET's load step passes it a loader for the rows it lacks, and
the planner receives its values explicitly. One memo per app (``app.state.ctxd.memo``).

The memo is bounded in bytes (``max_bytes``, setting ``CTXD_MEMO_BYTES``, 256 MiB by
default) and in sessions (``max_sessions``): least recently used sessions are dropped
whole. A session's size is estimated, not walked: per event, its text twice (the event
and the leaf message built from it: contents, payloads, reasoning and arguments, at 1 byte
per character for ASCII) plus :data:`EVENT_DERIVED_BYTES` for what the leaf cache derives
from it; the manifest held at :data:`MANIFEST_HELD_FACTOR` times its JSON bytes; the
remembered ids and digests at their size. The constants are measured with tracemalloc on
the 32 traces of ../shared/traces under the qwen3 and qwen3-128k profiles, where the
estimate is 1.03x to 1.83x what the session's entry holds (never less);
tests/integration/test_memo_bytes.py measures it again on real traces.

Everything here is an optimisation: on a miss (another worker, a restart, an evicted
session) the service reads the database and rebuilds, with identical results.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cachetools
import orjson

from app.domain.session_memo import SessionMemo
from app.domain.state import RememberedIds
from app.domain.types import Event, MessageEvent, ToolResultEvent
from app.store.repository import StoredManifest

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_SESSIONS = 512


#: Bytes charged per event for what the session's leaf cache derives from it beside its text:
#: the leaf message's encodings (wire JSON, template render, digest), the turn group's view,
#: manifest items with their JSON, invalidation and compaction memos. Measured: 12.6 to 26.9
#: kB per event over the 32 traces and both qwen3 profiles (module docstring).
EVENT_DERIVED_BYTES = 27_000

#: The manifest the memo keeps (the next delta's base: its JSON as Python values, and the
#: bytes of its parts, the domain value it was built from) is charged this many times its
#: JSON bytes. Measured: 14.6x to 20.3x.
MANIFEST_HELD_FACTOR = 21


def _event_bytes(event: Event) -> int:
    """Estimated bytes the memo holds for ``event``: its text twice (the event and the leaf
    message built from it) and :data:`EVENT_DERIVED_BYTES`."""
    if isinstance(event, ToolResultEvent):
        text = len(event.payload)
    elif isinstance(event, MessageEvent):
        text = len(event.content) + len(event.reasoning or "")
        text += sum(len(c.arguments) + len(c.name) + len(c.call_id) for c in event.tool_calls)
    else:  # plans, documents, conclusions (issue 16) carry a text
        text_of = getattr(event, "text", None)
        text = len(text_of) if isinstance(text_of, str) else 0
    return 2 * text + EVENT_DERIVED_BYTES


@dataclass
class _Entry:
    session_id: str = ""
    seen: int = 0
    events: list[Event] = field(default_factory=list)
    event_bytes: int = 0
    leaf: SessionMemo = field(default_factory=SessionMemo)
    prefix: dict[str, RememberedIds] = field(default_factory=dict)
    manifests: dict[str, tuple[StoredManifest, int]] = field(default_factory=dict)  # (manifest, its JSON bytes)
    # held while this worker plans the session (a GET's plan, a warm-up after a POST): both use its leaf cache
    plan_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def size(self) -> int:
        return (self.event_bytes + sum(r.nbytes for r in self.prefix.values())
                + sum(n for _, n in self.manifests.values()))


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

    def events(self, session_id: str, last_seq: int, load: Callable[[int], list[Event]]) -> list[Event]:
        """The session's events up to ``last_seq`` (read in the caller's snapshot).

        ``load(after_seq)`` returns the events with ``after_seq < seq <= last_seq`` in seq
        order (the caller's repository read); it is called only for what the memo lacks.
        Events are append-only with dense seqs, so memoized ones never go stale."""
        with self._lock:
            entry = self._sessions.get(session_id)
            seen, cached = (entry.seen, entry.events) if entry is not None else (0, None)
        if cached is not None and seen >= last_seq:
            return cached[:last_seq]  # another request of this worker read a newer snapshot
        base = cached or []
        events = base + load(seen if cached is not None else 0)
        if events and events[-1].seq != len(events):
            return load(0)  # never memoise a surprise
        with self._lock:
            entry = self._entry(session_id)
            before = entry.size
            if entry.events is cached and cached is not None:  # count only what was appended
                entry.event_bytes += sum(map(_event_bytes, events[len(cached):]))
            else:
                entry.event_bytes = sum(map(_event_bytes, events))
            entry.seen, entry.events = last_seq, events
            self._resize(entry, before)
        return list(events)

    def held_events(self, session_id: str, last_seq: int) -> list[Event] | None:
        """The session's events up to ``last_seq`` when the memo holds exactly those (no
        read), else None."""
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None or entry.seen != last_seq or len(entry.events) != last_seq:
                return None
            return list(entry.events)

    def extend(self, session_id: str, events: Sequence[Event]) -> bool:
        """Append events just committed (a POST's batch, in seq order) to the session's
        memoized events, so that the next GET of this worker reads none of them. Only when
        they follow the memoized ones exactly (dense seqs from the memo's last seq + 1; a
        session the memo does not hold only from seq 1); otherwise nothing changes and the
        GET reads what the memo lacks. The caller passes events of a committed transaction
        only, equal to what the repository reads back. Returns whether they were appended."""
        with self._lock:
            entry = self._sessions.get(session_id)
            seen = entry.seen if entry is not None else 0
            if not events or any(event.seq != seen + 1 + i for i, event in enumerate(events)):
                return False
            entry = entry if entry is not None else self._entry(session_id)
            before = entry.size
            # a new list: a GET outside the lock may hold the old one
            entry.events = [*entry.events, *events]
            entry.event_bytes += sum(map(_event_bytes, events))
            entry.seen = events[-1].seq
            self._resize(entry, before)
            return True

    def plan_lock(self, session_id: str) -> threading.Lock:
        """The lock a plan of the session holds in this worker: a GET's plan and the
        warm-up after a POST (app/services/requests.py ``warm_after_post``) both work in
        its leaf cache."""
        with self._lock:
            return self._entry(session_id).plan_lock

    def leaf_cache(self, session_id: str) -> SessionMemo:
        """The session's leaf cache (see ``assemble_window(leaf_cache=...)``)."""
        with self._lock:
            return self._entry(session_id).leaf

    def remembered(self, session_id: str, fmt: str) -> RememberedIds | None:
        """The ids of the last request this worker served for the session in ``fmt``."""
        with self._lock:
            entry = self._sessions.get(session_id)
            return None if entry is None else entry.prefix.get(fmt)

    def manifest(self, session_id: str, fmt: str) -> StoredManifest | None:
        """The last manifest this worker stored for the session in ``fmt``."""
        with self._lock:
            entry = self._sessions.get(session_id)
            held = None if entry is None else entry.manifests.get(fmt)
            return None if held is None else held[0]

    def remember(self, session_id: str, fmt: str, remembered: RememberedIds,
                 manifest: StoredManifest | None = None, *, manifest_bytes: int | None = None) -> None:
        """Keep the ids (and the stored manifest) of the request just served in ``fmt``.
        ``manifest_bytes``: the manifest's JSON size when the caller knows it (else it is
        serialized here to be measured); charged :data:`MANIFEST_HELD_FACTOR` times."""
        size = 0
        if manifest is not None:
            size = MANIFEST_HELD_FACTOR * (manifest_bytes if manifest_bytes is not None
                                           else len(orjson.dumps(manifest.data)))
        with self._lock:
            entry = self._entry(session_id)
            before = entry.size
            entry.prefix[fmt] = remembered
            if manifest is not None:
                entry.manifests[fmt] = (manifest, size)
            self._resize(entry, before)

    def forget(self, session_id: str) -> None:
        """Drop everything held for the session (it was deleted)."""
        with self._lock:
            self._sessions.pop(session_id, None)
