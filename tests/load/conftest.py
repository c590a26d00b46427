"""Fixtures of the load and fault tests (issue 13 item 5): a native stack of PostgreSQL,
Redis and ctxd workers (ctxd_tools/native_stack.py), each test's own where it breaks something.

The figures of every test (requests, failures, events acknowledged vs stored, the
Locust table) are collected with :func:`report` and printed in pytest's terminal summary
(visible without ``-s``), and appended to ``$CTXD_LOAD_REPORT`` when it is set.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctxd_tools.native_stack import Ctxd, Postgres, Redis, have_postgres, have_redis
from tests.traces import TRACES_DIR

_REPORT: list[str] = []

#: Small real traces: many GETs per second, every route exercised.
LOAD_TRACES = [TRACES_DIR / f"{name}.traj.json" for name in (
    "pvlib__pvlib-python-1072__reasoner", "pydicom__pydicom-901__chat", "marshmallow-code__marshmallow-1343__chat",
    "pvlib__pvlib-python-1154__chat")]


def report(title: str, lines: list[str]) -> None:
    """Keep ``lines`` for the terminal summary (and ``$CTXD_LOAD_REPORT``)."""
    block = [f"{title}:", *(f"  {line}" for line in lines)]
    _REPORT.extend(block)
    path = os.environ.get("CTXD_LOAD_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(block) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REPORT:
        terminalreporter.section("load and fault tests (issue 13 item 5)")
        for line in _REPORT:
            terminalreporter.write_line(line)


def _skip_reason() -> str | None:
    if not have_postgres():
        return "PostgreSQL server binaries are not installed (apt-get install postgresql)"
    if not have_redis():
        return "redis-server is not installed (apt-get install redis-server)"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root without runuser (initdb refuses root)"
    missing = [p.name for p in LOAD_TRACES if not p.is_file()]
    if missing:
        return f"shared traces not found: {missing}"
    return None


needs_native = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


@dataclass
class Stack:
    pg: Postgres
    redis: Redis | None
    ctxd: Ctxd


@contextmanager
def native_stack(*, workers: int = 2, redis: bool = True, env: dict[str, str] | None = None) -> Iterator[Stack]:
    """PostgreSQL + Redis (unless ``redis=False``) + ``ctxd serve --workers N`` on them, each
    in a temporary directory on a free loopback port; everything stopped at the end."""
    with ExitStack() as stack:
        pg = stack.enter_context(Postgres())
        rd = stack.enter_context(Redis()) if redis else None
        variables = {"CTXD_DATABASE_URL": pg.url, "CTXD_REDIS_URL": rd.url if rd else ""} | (env or {})
        server = stack.enter_context(Ctxd(workers=workers, env=variables))
        yield Stack(pg, rd, server)


@pytest.fixture(scope="module")
def shared_stack() -> Iterator[Stack]:
    """One stack (2 workers) for the tests of a module that break nothing."""
    with native_stack() as stack:
        yield stack


def log_tail(path: Path, n: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-n:] if path.exists() else ""
