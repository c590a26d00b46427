"""Engine and session factory (built in the app lifespan, never at import)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker


def json_dumps(value: Any) -> str:
    """JSON columns' serializer: orjson (several times faster than ``json`` on the large
    manifests and prefix states a GET writes), falling back to ``json`` for what orjson
    refuses (integers beyond 64 bits, NaN)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
    except (TypeError, ValueError):
        return json.dumps(value, ensure_ascii=False)


def json_loads(text: str | bytes) -> Any:
    """JSON columns' deserializer: orjson, falling back to ``json`` (NaN, Infinity)."""
    try:
        return orjson.loads(text)
    except ValueError:
        return json.loads(text)


READ_ONLY = "ctxd_read_only"  # execution option of the read-only session factory's engine
#: Execution option of a write whose loss on power failure is harmless (a GET's save: its manifest,
#: layout state and prefix state are derived from the events and planned again if lost). Every
#: other write (events, sessions, keys, deletes) is durable before it is acknowledged.
RELAXED = "ctxd_relaxed_durability"
POOL_SIZE = 10  # connections kept open per process (each worker has its own pool)
MAX_OVERFLOW = 10  # more connections opened under load, closed when returned


def pool_capacity(engine: Engine) -> int:
    """How many connections ``engine``'s pool hands out at once (size + overflow): the
    thread pool of sync routes is sized to it (app/main.py), so a thread never waits for
    a connection another thread of the same process holds."""
    pool = engine.pool
    size = getattr(pool, "size", None)
    overflow = getattr(pool, "_max_overflow", 0)
    if not callable(size):  # a pool without a bound (SQLite in memory: one connection per thread)
        return POOL_SIZE + MAX_OVERFLOW
    return int(size()) + max(0, int(overflow))




def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``. SQLite gets WAL, foreign keys and a 30 s busy timeout, is
    shared across the server's worker threads, and starts every transaction with
    ``BEGIN IMMEDIATE``: a read that later writes (POST appends events) would otherwise
    fail at once with "database is locked" when another writer committed after its
    snapshot; IMMEDIATE makes concurrent writers wait their turn instead. Transactions of
    :func:`make_read_factory` start with a plain (deferred) ``BEGIN``: a snapshot read
    that takes no lock and waits for no writer.

    Durability: SQLite commits with ``PRAGMA synchronous=FULL`` (WAL synced at every commit: an
    acknowledged event survives a power loss or OS crash, not only a crash of ctxd), except a
    transaction on a connection with the :data:`RELAXED` execution option, which commits with
    ``NORMAL`` (the WAL is synced at checkpoints only; the database is never corrupted, the last
    such commits may roll back after a power loss). The mode is set before ``BEGIN``, only when
    it changes."""
    kwargs.setdefault("json_serializer", json_dumps)
    kwargs.setdefault("json_deserializer", json_loads)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # let the "begin" hook below issue BEGIN
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            options = conn.get_execution_options()
            if options.get(READ_ONLY):
                conn.exec_driver_sql("BEGIN")
                return
            mode = "NORMAL" if options.get(RELAXED) else "FULL"
            info = conn.connection.info
            if info.get("synchronous", "FULL") != mode:  # outside any transaction: autocommit driver
                conn.connection.dbapi_connection.execute(f"PRAGMA synchronous={mode}")
                info["synchronous"] = mode
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW, **kwargs)


_PENDING = "ctxd_after_commit"


def _run_pending(db: OrmSession) -> None:
    actions = db.info.pop(_PENDING, [])
    for action in actions:
        action()


def _drop_pending(db: OrmSession) -> None:
    db.info.pop(_PENDING, None)


def after_commit(db: OrmSession, action: Callable[[], None]) -> None:
    """Run ``action`` once ``db``'s current transaction has committed; never if it rolls back
    (metrics count what was stored: a batch refused by its quota, or failing half-way, is not
    counted). Actions run in the order given."""
    pending = db.info.get(_PENDING)
    if pending is None:
        if not event.contains(db, "after_commit", _run_pending):
            event.listen(db, "after_commit", _run_pending)
            event.listen(db, "after_rollback", _drop_pending)
        pending = db.info[_PENDING] = []
    pending.append(action)


def make_session_factory(engine: Engine) -> sessionmaker[OrmSession]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def make_read_factory(engine: Engine) -> sessionmaker[OrmSession]:
    """Sessions for snapshot reads: a deferred ``BEGIN`` on SQLite (no write lock; WAL
    gives the transaction one snapshot from its first read), ``REPEATABLE READ`` on
    PostgreSQL (one snapshot for every statement of the transaction). Use them with
    :func:`read_only`."""
    options: dict[str, Any] = {READ_ONLY: True}
    if engine.dialect.name == "postgresql":
        options["isolation_level"] = "REPEATABLE READ"
    return sessionmaker(bind=engine.execution_options(**options), expire_on_commit=False)


@contextmanager
def read_only(factory: sessionmaker[OrmSession]) -> Iterator[OrmSession]:
    """One read transaction, always rolled back (it writes nothing)."""
    with factory() as db:
        try:
            yield db
        finally:
            db.rollback()


@contextmanager
def unit_of_work(factory: sessionmaker[OrmSession]) -> Iterator[OrmSession]:
    """One transaction: committed when the block ends normally (before a response is
    sent, so an acknowledged event is durable), rolled back on any exception."""
    with factory() as db:
        try:
            yield db
            db.commit()
        except BaseException:
            db.rollback()
            raise


@contextmanager
def core_read(factory: sessionmaker[OrmSession]) -> Iterator[Connection | OrmSession]:
    """:func:`read_only` on a Core connection of ``factory``'s engine (no ORM session): for a
    path that sends only Core statements (the GET's load). The transaction begins at the
    first statement and is always rolled back. Falls back to :func:`read_only` for a
    factory without a bound engine."""
    bind = factory.kw.get("bind")
    if bind is None:
        with read_only(factory) as db:
            yield db
        return
    with bind.connect() as conn:
        try:
            yield conn
        finally:
            conn.rollback()


@contextmanager
def core_write(factory: sessionmaker[OrmSession], *, durable: bool = True) -> Iterator[Connection | OrmSession]:
    """:func:`unit_of_work` on a Core connection of ``factory``'s engine (no ORM session):
    the transaction begins at the first statement, is committed when the block ends
    normally (nothing to commit after an explicit ``rollback()``), rolled back on any
    exception. Falls back to :func:`unit_of_work` for a factory without a bound engine.

    ``durable=False`` only for a write that is planned again if lost (a GET's save): on SQLite
    it commits with ``synchronous=NORMAL`` (:func:`make_engine`), on PostgreSQL with
    ``SET LOCAL synchronous_commit = off`` (no wait for the WAL flush; never inconsistent,
    the last such commits may be lost on a server crash)."""
    bind = factory.kw.get("bind")
    if bind is None:
        with unit_of_work(factory) as db:
            yield db
        return
    with bind.connect() as conn:
        if not durable:
            conn = conn.execution_options(**{RELAXED: True})
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
        try:
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
