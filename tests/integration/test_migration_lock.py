"""Migrations under a lock (issue 13 item 2): concurrent `ctxd migrate` processes against one
real PostgreSQL database (an advisory lock) or one SQLite file (a file lock) never race;
with CTXD_AUTO_MIGRATE=false a schema behind the code stops the start naming both revisions;
the migrations ship in the package (a built wheel has every file alembic needs).

Before: every starter ran ``alembic upgrade`` unguarded; two `ctxd serve --workers 2`
workers on a fresh SQLite file failed one of them (``KeyError: 'layout'`` in 0006's batch
migration, the other worker's half-done table)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.main import create_app
from app.settings import Settings
from app.store.migrate import (
    MIGRATION_LOCK_KEY,
    SchemaBehind,
    alembic_config,
    current_revisions,
    head_revisions,
    migration_lock,
)

REPO = Path(__file__).resolve().parents[2]
N = 5


def _ctxd(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def _env(url: str, **extra: str) -> dict[str, str]:
    return os.environ | {"CTXD_DATABASE_URL": url, "HF_HUB_OFFLINE": "1", **extra}


def _start_migrators(url: str) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen(_ctxd("migrate"), env=_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(N)]


def _finish(procs: list[subprocess.Popen[str]]) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        outs.append(out)
    return outs


def _assert_one_migrated(outs: list[str]) -> None:
    head = ", ".join(head_revisions())
    migrated = [o for o in outs if "migrated from (empty)" in o]
    assert len(migrated) == 1, outs
    assert f"to head ({head})" in migrated[0]
    assert sum(f"at head ({head}); nothing to do" in o for o in outs) == N - 1, outs


def test_concurrent_migrate_processes_on_postgres_wait_on_the_advisory_lock(
        postgres_database_factory: Callable[[], str]) -> None:
    """The test holds the lock while N `ctxd migrate` processes start, sees all N waiting on it in
    pg_locks, then releases it: exactly one migrates, the others find the schema at head."""
    url = postgres_database_factory()
    engine = create_engine(url)
    with migration_lock(url):
        procs = _start_migrators(url)
        deadline = time.monotonic() + 120
        waiting = 0
        while time.monotonic() < deadline and waiting < N:
            with engine.connect() as conn:
                waiting = conn.execute(text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND "
                    "((classid::bigint << 32) | objid::bigint) = :key"), {"key": MIGRATION_LOCK_KEY}).scalar_one()
            assert all(p.poll() is None for p in procs), "a migrator did not wait for the lock"
            time.sleep(0.2)
        assert waiting == N
        assert current_revisions(url) == ()  # nobody migrated while the lock was held
    outs = _finish(procs)
    _assert_one_migrated(outs)
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))] == list(head_revisions())
    engine.dispose()


def test_concurrent_migrate_processes_on_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxd.sqlite3'}"
    with migration_lock(url):
        procs = _start_migrators(url)
        time.sleep(3)
        assert all(p.poll() is None for p in procs)  # all wait on the file lock
        assert not (tmp_path / "ctxd.sqlite3").exists() or current_revisions(url) == ()
    _assert_one_migrated(_finish(procs))
    assert current_revisions(url) == head_revisions()


def _at_previous_revision(url: str) -> str:
    """Migrate ``url`` to the revision before head; returns it."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config(url))
    previous = scripts.get_revision(head_revisions()[0]).down_revision
    assert isinstance(previous, str)
    command.upgrade(alembic_config(url), previous)
    return previous


def test_serve_without_auto_migration_refuses_a_schema_behind_naming_the_revisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxd.sqlite3'}"
    previous = _at_previous_revision(url)
    head = head_revisions()[0]
    r = subprocess.run(_ctxd("serve", "--port", "1"), env=_env(url, CTXD_AUTO_MIGRATE="false"), check=False,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"error: the database schema is at revision {previous}, the code needs {head}; run `ctxd migrate`" in r.stderr
    assert current_revisions(url) == (previous,)  # untouched
    r = subprocess.run(_ctxd("migrate"), env=_env(url), check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and f"migrated from {previous} to head ({head})" in r.stdout


def test_app_without_auto_migration_on_postgres_fails_at_start_then_starts_after_migrate(
        postgres_database_factory: Callable[[], str], tmp_path: Path) -> None:
    url = postgres_database_factory()
    settings = Settings(data_dir=tmp_path, database_url=url, auto_migrate=False)
    with pytest.raises(SchemaBehind) as info, TestClient(create_app(settings)):
        pass
    assert info.value.current == () and info.value.heads == head_revisions()
    assert "(none: empty database)" in str(info.value)
    previous = _at_previous_revision(url)
    with pytest.raises(SchemaBehind, match=f"at revision {previous}, the code needs {head_revisions()[0]}"), \
            TestClient(create_app(settings)):
        pass
    assert subprocess.run(_ctxd("migrate"), env=_env(url), check=False, capture_output=True, timeout=120).returncode == 0
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
    # auto-migration on (the default) migrates a database that is behind at start
    url2 = postgres_database_factory()
    _at_previous_revision(url2)
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=url2))):
        assert current_revisions(url2) == head_revisions()


@pytest.mark.parametrize("auto_migrate", ["true", "false"])
def test_a_schema_ahead_of_the_code_is_named_as_ahead_not_behind(tmp_path: Path, auto_migrate: str) -> None:
    """Soju06/codex-lb#1256: an older build restarted against a schema a newer build migrated
    was told "the schema is behind; upgrade", sending the operator the wrong way (and
    ``upgrade`` then fails inside alembic). ctxd names the revision it does not know as
    *ahead*, for `ctxd migrate` and `ctxd serve` alike, exits 1 and writes nothing."""
    url = f"sqlite:///{tmp_path / 'ctxd.sqlite3'}"
    command.upgrade(alembic_config(url), "head")
    with create_engine(url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_a_newer_ctxd'"))
    head = head_revisions()[0]
    want = (f"error: the database schema is at revision 9999_from_a_newer_ctxd, which this ctxd does not know "
            f"(its head is {head}): a newer ctxd migrated it")
    for args in (("migrate",), ("serve", "--port", "1")):
        r = subprocess.run(_ctxd(*args), env=_env(url, CTXD_AUTO_MIGRATE=auto_migrate), check=False,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (args, r.stdout, r.stderr[-2000:])
        assert want in r.stderr, (args, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and "behind" not in r.stderr
    assert current_revisions(url) == ("9999_from_a_newer_ctxd",)  # untouched


def test_the_wheel_ships_the_migrations(tmp_path: Path) -> None:
    """A non-editable install has env.py, the template and every revision (the image and
    `pip install .` run `ctxd migrate` from site-packages)."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                        str(tmp_path), str(REPO)], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("ctxd-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = sorted(p.name for p in (REPO / "app" / "migrations" / "versions").glob("*.py"))
    assert len(versions) >= 9
    expected = {"app/migrations/env.py", "app/migrations/script.py.mako",
                *(f"app/migrations/versions/{v}" for v in versions)}
    assert expected <= names, sorted(expected - names)
