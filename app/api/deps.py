"""Request-scoped dependencies.

The unit of work commits before the route returns, so a 2xx answer means the events are
durable ("no acknowledged event is ever lost"); services never commit.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Annotated, Iterator

from fastapi import Depends, Request
from sqlalchemy.orm import Session as OrmSession

from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry


class UnitOfWork:
    def __init__(self, request: Request) -> None:
        self._factory = request.app.state.session_factory

    @contextmanager
    def __call__(self) -> Iterator[OrmSession]:
        with self._factory() as db:
            try:
                yield db
                db.commit()
            except BaseException:
                db.rollback()
                raise


def profiles(request: Request) -> ProfileRegistry:
    return request.app.state.profiles  # type: ignore[no-any-return]


def meters(request: Request) -> MeterRegistry:
    return request.app.state.meters  # type: ignore[no-any-return]


Uow = Annotated[UnitOfWork, Depends(UnitOfWork)]
Profiles = Annotated[ProfileRegistry, Depends(profiles)]
Meters = Annotated[MeterRegistry, Depends(meters)]
