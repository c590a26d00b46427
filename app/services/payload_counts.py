"""Token counts of new tool outputs, computed after their POST when the worker is idle
(issue 9, item 7: counted once, stored beside the payload; manifests report them).

An agent POSTs a model call's events and GETs its next request at once (on loopback the
GET arrives ~1 ms after the POST's answer). The count of the POST's outputs (~2 ms of CPU
for a small output, seconds for a 2 MB one: two short transactions and the tokenizer) ran
as soon as the POST had answered, so it ran during that GET and slowed it (the GIL, the
CPU: warm GET over HTTP ~7.0 ms without it, ~9.5 ms with it, the same GET CPU). The GET
does not need the count: it counts an output within the item cap itself, and the whole
payload's count of a longer one is a manifest figure only (``tokens_known``).

So counts run on one dedicated thread of the worker process (:class:`PayloadCounter`),
one job after another (as before: one count at a time per process),
and a job starts only once the worker has had no HTTP request in flight for
:data:`SETTLE_SECONDS` (:class:`Activity`, kept by app/api/middleware.py), or
:data:`MAX_DELAY_SECONDS` after it was queued, whichever comes first (a busy worker still
counts soon). Jobs of one session queued meanwhile are counted together. The POST's
background task awaits its job (on the event loop, holding no thread), so a client of the
app in process (TestClient, which returns once background tasks are done) finds the count
stored when its POST returns, as before. A job that fails is logged, never retried (GETs
then report the count as unknown); one still queued at shutdown is counted before the
thread ends, and any not counted by then is logged by number.

The thread's OS priority is not lowered: a niced thread that the OS preempts while it
holds the GIL (or SQLite's write lock) would stall every other thread of the worker, the
GET included (tried: no gain at p50, worse p95 in some runs on the loaded 2-core machine).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.services import requests as request_service
from app.services import sessions as session_service
from app.services.memo import AssemblyMemo
from app.store.db import unit_of_work
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry

log = logging.getLogger("ctxd")

#: A count waits for this long without an HTTP request in flight in the worker (seconds):
#: the agent's GET that follows its POST arrives within it on loopback and on a LAN.
SETTLE_SECONDS = 0.005
#: ... but never longer than this after it was queued (seconds): a busy worker counts too.
MAX_DELAY_SECONDS = 0.5


class Activity:
    """How many HTTP requests this worker process is serving, and since when none: a request
    is in flight from its first ASGI call until its response's last byte is sent (the work
    after the response, background tasks, is not in flight). Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self._quiet_since = time.monotonic()

    @property
    def in_flight(self) -> int:
        return self._busy

    def begin(self) -> None:
        with self._cond:
            self._busy += 1

    def end(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._busy == 0:
                self._quiet_since = time.monotonic()
                self._cond.notify_all()

    def wait_idle(self, settle: float, deadline: float) -> bool:
        """Block until no request has been in flight for ``settle`` seconds (True), or until
        ``deadline`` (``time.monotonic()``; False)."""
        with self._cond:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return False
                if self._busy == 0:
                    quiet = now - self._quiet_since
                    if quiet >= settle:
                        return True
                    self._cond.wait(min(settle - quiet, deadline - now))
                else:
                    self._cond.wait(deadline - now)


#: ``count(session_id, handles)``: count and store the tokens of a session's payloads
#: (app/api/routes/v1.py: app/services/sessions.py ``count_payload_tokens`` and the memo).
CountJob = Callable[[str, Sequence[str]], None]


@dataclass
class _Job:
    session_id: str
    handles: list[str]
    queued: float
    done: Future[None] = field(default_factory=Future)


class PayloadCounter:
    """One thread that runs ``count`` for the jobs :meth:`submit` queues, each once
    ``activity`` has been idle for ``settle`` seconds or ``max_delay`` seconds after the
    job was queued (module docstring). ``count`` must not raise (it logs its own errors);
    an exception that escapes it is logged here."""

    def __init__(self, count: CountJob, activity: Activity, *, settle: float = SETTLE_SECONDS,
                 max_delay: float = MAX_DELAY_SECONDS) -> None:
        self._count = count
        self._activity = activity
        self._settle = settle
        self._max_delay = max_delay
        self._cond = threading.Condition()
        self._jobs: list[_Job] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="ctxd-payload-counts", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        """Jobs queued and not yet counted."""
        with self._cond:
            return len(self._jobs)

    def submit(self, session_id: str, handles: Sequence[str]) -> Future[None]:
        """Queue a count of ``handles`` of ``session_id``; the future is done once it ran
        (whatever its outcome: failures are logged). After :meth:`close` the count runs in
        the caller's thread."""
        job = _Job(session_id, list(handles), time.monotonic())
        with self._cond:
            if not self._closing:
                self._jobs.append(job)
                self._cond.notify()
                return job.done
        self._run_jobs([job])
        return job.done

    def close(self, timeout: float = 30.0) -> None:
        """Count what is queued (without waiting for idle) and end the thread; the jobs still
        queued after ``timeout`` seconds are logged as not counted."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        left = self.pending
        if left:
            log.warning("%d payload token count job(s) not run at shutdown; GETs report those counts as unknown",
                        left)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closing:
                    self._cond.wait()
                if not self._jobs:
                    return
                first = self._jobs[0].queued
                closing = self._closing
            if not closing:
                self._activity.wait_idle(self._settle, first + self._max_delay)
            with self._cond:
                jobs, self._jobs = self._jobs, []
            self._run_jobs(jobs)

    def _run_jobs(self, jobs: list[_Job]) -> None:
        """Run the jobs, those of one session as one count (handles in first-queued order)."""
        by_session: dict[str, list[_Job]] = {}
        for job in jobs:
            by_session.setdefault(job.session_id, []).append(job)
        for session_id, group in by_session.items():
            handles = list(dict.fromkeys(h for job in group for h in job.handles))
            try:
                self._count(session_id, handles)
            except Exception:
                log.exception("counting the tokens of %d payload(s) of session %s failed", len(handles), session_id)
            finally:
                for job in group:
                    job.done.set_result(None)


def count_and_remember(factory: sessionmaker[OrmSession], profiles: ProfileRegistry, meters: MeterRegistry,
                       memo: AssemblyMemo, session_id: str, handles: Sequence[str]) -> None:
    """A :data:`CountJob`: count and store the tokens of a session's payloads
    (app/services/sessions.py ``count_payload_tokens``, its own short transactions on
    ``factory``) and keep them in this worker's memo for its next GETs. Never raises: a
    failure is logged (GETs then report the count as unknown)."""
    try:
        tokenizer_id, counts = session_service.count_payload_tokens(
            lambda: unit_of_work(factory), profiles, meters, session_id, list(handles))
        request_service.remember_payload_tokens(memo, session_id, tokenizer_id, counts)
    except Exception:  # an optimisation: never fails anything; GETs report the count as unknown
        log.exception("counting the tokens of %d payload(s) of session %s failed", len(handles), session_id)


class CountingState(Protocol):
    """What a count reads of the application's state (``AppState``, app/services/app_state.py,
    which holds this module's counter: named structurally, so neither imports the other)."""

    @property
    def session_factory(self) -> sessionmaker[OrmSession]: ...
    @property
    def profiles(self) -> ProfileRegistry: ...
    @property
    def meters(self) -> MeterRegistry: ...
    @property
    def memo(self) -> AssemblyMemo: ...


def counter_for(state: Callable[[], CountingState], activity: Activity) -> PayloadCounter:
    """The app's counter: each job counts with what ``state()`` (the application's state,
    built in the lifespan) holds when it runs: ``session_factory``, ``profiles``,
    ``meters``, ``memo``."""
    def count(session_id: str, handles: Sequence[str]) -> None:
        now = state()
        count_and_remember(now.session_factory, now.profiles, now.meters, now.memo, session_id, handles)

    return PayloadCounter(count, activity, settle=SETTLE_SECONDS, max_delay=MAX_DELAY_SECONDS)
