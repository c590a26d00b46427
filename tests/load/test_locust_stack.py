"""The Locust load test against the native production stack (issue 13 item 5): PostgreSQL +
Redis + ``ctxd serve`` with 2 workers, 4 simulated agents replaying real traces for a bounded
time (``CTXD_LOAD_SECONDS``, default 45 s). Reports throughput, p50/p95 per route and errors
(in the terminal summary); fails on any failed request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxd_tools.loadgen import ROUTES, locust_table, run_locust
from tests.load.conftest import LOAD_TRACES, log_tail, native_stack, needs_native, report

pytestmark = [pytest.mark.slow, needs_native, pytest.mark.timeout(900),
              pytest.mark.skipif(__import__("importlib").util.find_spec("locust") is None,
                                 reason="locust is not installed (pip install -e '.[load]')")]

USERS = 4
SECONDS = int(os.environ.get("CTXD_LOAD_SECONDS", "45"))


def test_locust_against_postgres_redis_two_workers(tmp_path: Path) -> None:
    with native_stack(workers=2) as stack:
        stats, failed, output = run_locust(stack.ctxd.base, users=USERS, seconds=SECONDS, csv_prefix=tmp_path / "load",
                                           traces=LOAD_TRACES, max_calls=20)
        server_log = log_tail(stack.ctxd.log)
    report(f"Locust, {USERS} agents, {SECONDS} s, PostgreSQL + Redis + 2 workers (real traces)", locust_table(stats))
    total = stats["Aggregated"]
    assert int(total["Request Count"]) > 0, output[-4000:]
    assert int(total["Failure Count"]) == 0 and not failed, (failed[:5], output[-3000:], server_log)
    for route in ROUTES.values():
        assert int(stats[route]["Request Count"]) > 0, f"no {route} requests:\n{output[-3000:]}"
