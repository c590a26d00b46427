"""Prometheus multiprocess mode for ``ctxd serve --workers N`` (prometheus-client's
``PROMETHEUS_MULTIPROC_DIR``).

Each worker process writes its samples to memory-mapped files in one directory; the
worker that answers ``/metrics`` reads every file and sums them (``MultiProcessCollector``),
so a counter is the total over all workers, whichever worker is scraped. This module
imports nothing of prometheus_client: the variable must be set before prometheus_client
is first imported (it picks its value class at import), i.e. before ``app.main``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


@dataclass(frozen=True)
class MultiprocessDir:
    """The directory in use; :meth:`cleanup` removes it when ctxd created it."""

    path: Path
    created: bool

    def cleanup(self) -> None:
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)


def fresh_multiprocess_dir() -> MultiprocessDir:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory for this start: the
    operator's (its ``*.db`` files removed: an earlier run's counters must not be added to
    this run's) or, when unset, a new temporary directory (removed by ``cleanup``)."""
    given = os.environ.get(ENV, "")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for f in path.glob("*.db"):
            f.unlink(missing_ok=True)
        return MultiprocessDir(path, created=False)
    path = Path(tempfile.mkdtemp(prefix="ctxd-prometheus-"))
    os.environ[ENV] = str(path)
    return MultiprocessDir(path, created=True)


def multiprocess_dir() -> str | None:
    """The multiprocess directory when this process runs in multiprocess mode, else None."""
    path = os.environ.get(ENV, "")
    return path if path and os.path.isdir(path) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def dead_worker_pids(path: str) -> set[int]:
    """Pids whose live-gauge files are in ``path`` but whose process is gone (a worker that
    crashed or was killed, replaced by uvicorn with a new pid)."""
    pids = {int(m.group(1)) for name in os.listdir(path) if (m := _LIVE_GAUGE.match(name))}
    return {pid for pid in pids if not _alive(pid)}
