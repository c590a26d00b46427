"""Prometheus multiprocess directory per start (issue 13 item 1).

Peer fault, geolens-io/geolens#1245: a directory left by an earlier run (another worker
topology, a restarted container) still held its workers' ``*.db`` files, and their counts were
added to the new run's sums. ``ctxd serve`` empties an operator-given directory before its
workers start (:func:`app.observability.multiproc.fresh_multiprocess_dir`). The samples are
written and read by real prometheus_client processes in multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.observability.multiproc import ENV, fresh_multiprocess_dir

_WRITE = """
from prometheus_client import Counter
Counter("ctxd_test_events", "test").inc(5)
"""
_READ = """
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry)
print(registry.get_sample_value("ctxd_test_events_total") or 0)
"""


def _run(code: str, directory: Path) -> str:
    r = subprocess.run([sys.executable, "-c", code], env=os.environ | {ENV: str(directory)}, check=True,
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def test_an_earlier_runs_counts_are_not_summed_into_a_new_start(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    _run(_WRITE, directory)  # an earlier run's worker
    assert _run(_READ, directory) == "5.0"
    (directory / "notes.txt").write_text("the operator's own file")
    monkeypatch.setenv(ENV, str(directory))
    fresh = fresh_multiprocess_dir()
    assert fresh.path == directory and not fresh.created
    assert _run(_READ, directory) == "0"
    _run(_WRITE, directory)  # this run's worker
    assert _run(_READ, directory) == "5.0"
    fresh.cleanup()  # not ctxd's directory: kept, with the operator's file
    assert (directory / "notes.txt").exists()


def test_without_a_given_directory_each_start_gets_its_own_and_removes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    first = fresh_multiprocess_dir()
    monkeypatch.delenv(ENV, raising=False)
    second = fresh_multiprocess_dir()
    assert first.created and second.created and first.path != second.path
    assert os.environ[ENV] == str(second.path)
    for d in (first, second):
        d.cleanup()
        assert not d.path.exists()
