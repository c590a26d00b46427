"""Request-scoped dependencies: typed parts of the application's state
(:class:`~app.services.app_state.AppState`, built by the lifespan in app/main.py and kept on
the app as ``app.state.ctxd``; :func:`state_of` is the one place that reads it).

The unit of work commits before the route returns, so a 2xx answer means the events are
durable ("no acknowledged event is ever lost"); services never commit.

Every dependency here only reads the application's state, so each is an ``async def``:
FastAPI runs a plain ``def`` dependency in its thread pool, one thread hop (two wake-ups)
per dependency and request, which cost more than the GET's own work on a busy machine.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.services.app_state import AppState
from app.services.memo import AssemblyMemo
from app.services.requests import CandidateLookup, PassDue, SummaryWait
from app.services.shell_inference import ShellStates
from app.services.summarizer import FoldKey, Waited
from app.settings import Settings
from app.store.db import unit_of_work
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry


def state_of(app: Any) -> AppState:
    """The application's state of ``app`` (a FastAPI app or ASGI scope's ``app``), set by
    its lifespan. Raises RuntimeError before the lifespan ran."""
    state = getattr(app.state, "ctxd", None)
    if not isinstance(state, AppState):
        raise TypeError("the application's state is built by its lifespan, which has not run")
    return state


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


async def app_state(request: Request) -> AppState:
    return state_of(request.app)


async def unit_of_work_dep(request: Request) -> UnitOfWork:
    return UnitOfWork(state_of(request.app).session_factory)


async def database(request: Request) -> Database:
    state = state_of(request.app)
    return Database(state.session_factory, state.read_factory)


async def settings(request: Request) -> Settings:
    return state_of(request.app).settings


async def profiles(request: Request) -> ProfileRegistry:
    return state_of(request.app).profiles


async def meters(request: Request) -> MeterRegistry:
    return state_of(request.app).meters


async def memo(request: Request) -> AssemblyMemo:
    return state_of(request.app).memo


async def shell_states(request: Request) -> ShellStates | None:
    """The shell inference states kept between POSTs (``AppState.shell_states``, bounded by
    ``CTXD_SHELL_STATE_BYTES``; None when 0)."""
    return state_of(request.app).shell_states


def pass_due_of(state: AppState) -> PassDue | None:
    """An override of the compaction signal for invalidation's deferral
    (``AppState.pass_due``; None, the default: select's forecast from its watermarks)."""
    return state.pass_due


def candidates_of(state: AppState) -> CandidateLookup | None:
    """The summarizer's outcomes for sessions' next passes, when one is
    configured (``AppState.summaries``)."""
    return state.summaries.source if state.summarizer is not None else None


def summary_wait_of(state: AppState) -> SummaryWait | None:
    """A pass's GET waits for this worker's summarizer job of its fold, at most
    ``CTXD_SUMMARIZER_WAIT_SECONDS`` (``AppState.summary_jobs``). None
    without a summarizer or with a wait of 0."""
    seconds = state.settings.summarizer_wait_seconds
    if state.summarizer is None or seconds <= 0:
        return None
    jobs = state.summary_jobs

    def wait(session_id: str, fold: FoldKey) -> Waited | None:
        return jobs.wait(session_id, fold, seconds)

    return wait


State = Annotated[AppState, Depends(app_state)]
Uow = Annotated[UnitOfWork, Depends(unit_of_work_dep)]
Db = Annotated[Database, Depends(database)]
Config = Annotated[Settings, Depends(settings)]
Memo = Annotated[AssemblyMemo, Depends(memo)]
Profiles = Annotated[ProfileRegistry, Depends(profiles)]
Meters = Annotated[MeterRegistry, Depends(meters)]
ShellStateCache = Annotated[ShellStates | None, Depends(shell_states)]
