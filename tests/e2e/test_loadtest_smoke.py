"""Load-test smoke: `ctxd serve` on loopback, the Locust scenario headless for ~15 s with 2 users.

Skipped when locust is not installed (`pip install -e '.[load]'`).
"""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.traces import TRACES_DIR as TRACES

LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtests" / "locustfile.py"
SMOKE_TRACES = [TRACES / "pvlib__pvlib-python-1072__reasoner.traj.json", TRACES / "pydicom__pydicom-901__chat.traj.json"]
ROUTES = ("/v1/sessions", "/v1/sessions/[id]/events", "/v1/sessions/[id]/request")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("locust") is None,
                       reason="locust is not installed (pip install -e '.[load]')"),
]


def _stats(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_locust_replay_smoke(server: str, tmp_path: Path) -> None:
    missing = [str(p) for p in SMOKE_TRACES if not p.is_file()]
    if missing:
        pytest.skip(f"shared traces not found: {missing}")
    prefix = tmp_path / "smoke"
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2", "-t", "15s",
           "--stop-timeout", "10", "--host", server, "--only-summary", "--csv", str(prefix),
           "--ctxd-traces", ",".join(str(p) for p in SMOKE_TRACES), "--ctxd-max-calls", "8"]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"locust exited {done.returncode}:\n{output[-4000:]}"

    stats = _stats(Path(f"{prefix}_stats.csv"))
    total = stats["Aggregated"]
    assert int(total["Request Count"]) > 0, output[-4000:]
    assert int(total["Failure Count"]) == 0, output[-4000:]
    for route in ROUTES:
        assert route in stats and int(stats[route]["Request Count"]) > 0, f"no {route} requests:\n{output[-4000:]}"
    failures = Path(f"{prefix}_failures.csv")
    if failures.exists():
        rows = list(csv.DictReader(failures.open(newline="", encoding="utf-8")))
        assert not rows, rows

    lines = [f"locust smoke, 2 users, 15 s, against {server}:"]
    for name in (*ROUTES, "Aggregated"):
        row = stats[name]
        lines.append(f"  {name}: {row['Request Count']} requests, {float(row['Requests/s']):.1f} req/s, "
                     f"p50 {row['50%']} ms, p95 {row['95%']} ms, max {float(row['Max Response Time']):.0f} ms, "
                     f"failures {row['Failure Count']}")
    print("\n".join(lines))
