"""Request-scoped dependencies.

The unit of work commits before the route returns, so a 2xx answer means the events are
durable ("no acknowledged event is ever lost"); services never commit.

Every dependency here only reads ``app.state``, so each is an ``async def``: FastAPI runs a
plain ``def`` dependency in its thread pool, one thread hop (two wake-ups) per dependency
and request, which cost more than the GET's own work on a busy machine.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.services.memo import AssemblyMemo
from app.services.requests import CandidateLookup, PassDue, SummaryWait
from app.services.shell_inference import ShellStates
from app.services.summarizer import FoldKey, Waited
from app.store.db import unit_of_work
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry


class UnitOfWork:
    def __init__(self, factory: sessionmaker[OrmSession]) -> None:
        self._factory = factory

    def __call__(self) -> AbstractContextManager[OrmSession]:
        return unit_of_work(self._factory)


class Database:
    """The app's session factories: ``write`` (one transaction per unit of work) and
    ``read`` (snapshot reads, no write lock; app/store/db.py ``make_read_factory``)."""

    def __init__(self, write: sessionmaker[OrmSession], read: sessionmaker[OrmSession]) -> None:
        self.write = write
        self.read = read


async def unit_of_work_dep(request: Request) -> UnitOfWork:
    return UnitOfWork(request.app.state.session_factory)


async def database(request: Request) -> Database:
    return Database(request.app.state.session_factory, request.app.state.read_factory)


async def profiles(request: Request) -> ProfileRegistry:
    return request.app.state.profiles  # type: ignore[no-any-return]


async def meters(request: Request) -> MeterRegistry:
    return request.app.state.meters  # type: ignore[no-any-return]


async def memo(request: Request) -> AssemblyMemo:
    return request.app.state.memo  # type: ignore[no-any-return]


async def shell_states(request: Request) -> ShellStates | None:
    """The shell inference states kept between POSTs (``app.state.shell_states``, bounded by
    ``CTXD_SHELL_STATE_BYTES``; None when 0)."""
    return request.app.state.shell_states  # type: ignore[no-any-return]


def pass_due_of(state: Any) -> PassDue | None:
    """An override of the compaction signal for invalidation's deferral
    (``app.state.pass_due``; None, the default: select's forecast from its watermarks)."""
    return getattr(state, "pass_due", None)


def candidates_of(state: Any) -> CandidateLookup | None:
    """The summarizer's outcomes for sessions' next passes (issue 10 item 6), when one is
    configured (``app.state.summaries``)."""
    return state.summaries.source if getattr(state, "summarizer", None) is not None else None


def summary_wait_of(state: Any) -> SummaryWait | None:
    """A pass's GET waits for this worker's summarizer job of its fold, at most
    ``CTXD_SUMMARIZER_WAIT_SECONDS`` (``app.state.summary_jobs``; issue 10 item 6). None
    without a summarizer or with a wait of 0."""
    seconds = state.settings.summarizer_wait_seconds
    if getattr(state, "summarizer", None) is None or seconds <= 0:
        return None
    jobs = state.summary_jobs

    def wait(session_id: str, fold: FoldKey) -> Waited | None:
        return jobs.wait(session_id, fold, seconds)  # type: ignore[no-any-return]

    return wait


Uow = Annotated[UnitOfWork, Depends(unit_of_work_dep)]
Db = Annotated[Database, Depends(database)]
Memo = Annotated[AssemblyMemo, Depends(memo)]
Profiles = Annotated[ProfileRegistry, Depends(profiles)]
Meters = Annotated[MeterRegistry, Depends(meters)]
ShellStateCache = Annotated[ShellStates | None, Depends(shell_states)]
