"""Alembic migrations run programmatically (``ctxd migrate``, ``ctxd serve`` and the app
lifespan), serialized by a lock so that concurrent starters never race.

The migrations ship inside the package (``app/migrations``), so a non-editable install
has them. The lock: on PostgreSQL a session-level advisory lock
(``pg_advisory_lock(MIGRATION_LOCK_KEY)``) held by the connection that runs the upgrade;
on SQLite an exclusive ``flock`` on ``<database file>.migrate.lock``. A starter that waits
for the lock then finds the schema at head and does nothing.
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, make_url, pool, text

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"
#: The advisory lock key of ctxd's migrations (any fixed 64-bit integer: "ctxd" in ASCII, "mig").
MIGRATION_LOCK_KEY = 0x63747864_6D6967
log = logging.getLogger("ctxd")


class SchemaBehind(RuntimeError):
    """The database schema is not at the head revision and auto-migration is off.
    ``current``: the database's revisions (empty: never migrated); ``heads``: the code's."""

    def __init__(self, current: tuple[str, ...], heads: tuple[str, ...]) -> None:
        self.current, self.heads = current, heads
        super().__init__(
            f"the database schema is at revision {', '.join(current) or '(none: empty database)'}, the code needs "
            f"{', '.join(heads)}; run `ctxd migrate` (or set CTXD_AUTO_MIGRATE=true to migrate at start-up)")


class SchemaAhead(RuntimeError):
    """The database is at a revision this ctxd does not know: a newer ctxd migrated it (a
    rollback to an older build). Not "behind": migrating cannot help."""

    def __init__(self, current: tuple[str, ...], heads: tuple[str, ...]) -> None:
        self.current, self.heads = current, heads
        super().__init__(
            f"the database schema is at revision {', '.join(current)}, which this ctxd does not know (its head is "
            f"{', '.join(heads)}): a newer ctxd migrated it; run that version (or restore a matching backup)")


def _known(current: tuple[str, ...]) -> None:
    """Raises SchemaAhead when a revision of ``current`` is not in the code's migrations."""
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    revisions = {script.revision for script in scripts.walk_revisions()}
    if any(rev not in revisions for rev in current):
        raise SchemaAhead(current, tuple(scripts.get_heads()))


def alembic_config(url: str) -> Config:
    """An alembic Config pointing at ``app/migrations`` with ``url`` as the database."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revisions() -> tuple[str, ...]:
    """The code's head revision(s) (one: a test checks it)."""
    return tuple(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


def current_revisions(url: str) -> tuple[str, ...]:
    """The revision(s) the database at ``url`` is at (empty: never migrated)."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return tuple(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()


@contextmanager
def _sqlite_lock(url: str) -> Iterator[None]:
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    lock_path = Path(database).resolve().with_name(Path(database).name + ".migrate.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file is closed, or the process dies
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def migration_lock(url: str) -> Iterator[Connection | None]:
    """Hold ctxd's migration lock for the database at ``url``: yields the PostgreSQL
    connection that holds the advisory lock (run the upgrade on it), or None on SQLite
    (a file lock is held). Blocks while another process holds it."""
    if make_url(url).get_backend_name() != "postgresql":
        with _sqlite_lock(url):
            log.debug("migration lock held (file lock)")
            yield None
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            conn.commit()
            log.debug("migration lock held (pg_advisory_lock %d)", MIGRATION_LOCK_KEY)
            try:
                yield conn
            finally:  # closing the connection releases it too (a crashed migrator holds nothing)
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
                conn.commit()
    finally:
        engine.dispose()


def upgrade_head(url: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Bring the database at ``url`` (default: the settings' URL) to the head revision under
    :func:`migration_lock`. Returns (revisions before, revisions after)."""
    if url is None:
        from app.settings import Settings

        url = Settings().effective_database_url
    with migration_lock(url) as conn:
        config = alembic_config(url)
        if conn is None:
            before = current_revisions(url)
            _known(before)
            command.upgrade(config, "head")
            return before, current_revisions(url)
        before = tuple(MigrationContext.configure(conn).get_current_heads())
        conn.commit()
        _known(before)
        config.attributes["connection"] = conn  # app/migrations/env.py runs on it
        command.upgrade(config, "head")
        conn.commit()
        after = tuple(MigrationContext.configure(conn).get_current_heads())
        conn.commit()
        return before, after


def prepare_schema(url: str, *, auto_migrate: bool) -> None:
    """At start-up: migrate to head under the lock (``auto_migrate``), else check that the
    schema is at head. A schema already at head takes no lock (replicas and workers that start
    after the migration do not queue on it). Raises :class:`SchemaBehind` (auto-migration
    off) or :class:`SchemaAhead` (a newer ctxd's revision), naming the current and head
    revisions."""
    current, heads = current_revisions(url), head_revisions()
    if set(current) == set(heads):
        return
    _known(current)
    if auto_migrate:
        before, after = upgrade_head(url)
        if before != after:
            log.info("database migrated from %s to %s", ", ".join(before) or "(empty)", ", ".join(after))
        return
    raise SchemaBehind(current, heads)
