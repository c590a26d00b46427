"""Request-scoped dependencies.

The unit of work commits before the route returns, so a 2xx answer means the events are
durable ("no acknowledged event is ever lost"); services never commit.
"""

from __future__ import annotations

from typing import Annotated, ContextManager

from fastapi import Depends, Request
from sqlalchemy.orm import Session as OrmSession

from app.services.memo import AssemblyMemo
from app.store.db import unit_of_work
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry


class UnitOfWork:
    def __init__(self, request: Request) -> None:
        self._factory = request.app.state.session_factory

    def __call__(self) -> ContextManager[OrmSession]:
        return unit_of_work(self._factory)


class Database:
    """The app's session factories: ``write`` (one transaction per unit of work) and
    ``read`` (snapshot reads, no write lock; app/store/db.py ``make_read_factory``)."""

    def __init__(self, request: Request) -> None:
        self.write = request.app.state.session_factory
        self.read = request.app.state.read_factory


def profiles(request: Request) -> ProfileRegistry:
    return request.app.state.profiles  # type: ignore[no-any-return]


def meters(request: Request) -> MeterRegistry:
    return request.app.state.meters  # type: ignore[no-any-return]


def memo(request: Request) -> AssemblyMemo:
    return request.app.state.memo  # type: ignore[no-any-return]


Uow = Annotated[UnitOfWork, Depends(UnitOfWork)]
Db = Annotated[Database, Depends(Database)]
Memo = Annotated[AssemblyMemo, Depends(memo)]
Profiles = Annotated[ProfileRegistry, Depends(profiles)]
Meters = Annotated[MeterRegistry, Depends(meters)]
