"""Load-test smoke: `ctxd serve` on loopback, the Locust scenario headless for ~15 s with 2 users.

Skipped when locust is not installed (`pip install -e '.[load]'`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ctxd_tools.loadgen import locust_table, run_locust
from tests.traces import TRACES_DIR as TRACES

SMOKE_TRACES = [TRACES / "pvlib__pvlib-python-1072__reasoner.traj.json", TRACES / "pydicom__pydicom-901__chat.traj.json"]
ROUTES = ("/v1/sessions", "/v1/sessions/[id]/events", "/v1/sessions/[id]/request")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("locust") is None,
                       reason="locust is not installed (pip install -e '.[load]')"),
]


def test_locust_replay_smoke(server: str, tmp_path: Path) -> None:
    missing = [str(p) for p in SMOKE_TRACES if not p.is_file()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    stats, failed, output = run_locust(server, users=2, seconds=15, csv_prefix=tmp_path / "smoke",
                                       traces=SMOKE_TRACES, max_calls=8, timeout=180)
    total = stats["Aggregated"]
    assert int(total["Request Count"]) > 0, output[-4000:]
    assert int(total["Failure Count"]) == 0 and not failed, (failed, output[-4000:])
    for route in ROUTES:
        assert route in stats and int(stats[route]["Request Count"]) > 0, f"no {route} requests:\n{output[-4000:]}"
    print(f"locust smoke, 2 users, 15 s, against {server}:")
    print("\n".join(locust_table(stats)))
