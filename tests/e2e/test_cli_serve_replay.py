"""The README's main job over real HTTP: `ctxd serve` on loopback, `ctxd replay` against it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.replay_checks import TRACES

TRACE = TRACES / "pvlib__pvlib-python-1072__reasoner.traj.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ctxd() -> list[str]:
    exe = shutil.which("ctxd", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "app.cli"]


@pytest.fixture()
def server(tmp_path: Path):
    port = free_port()
    env = os.environ | {"CTXD_DATA_DIR": str(tmp_path / "data"), "CTXD_DATABASE_URL": "", "CTXD_REDIS_URL": ""}
    proc = subprocess.Popen([*ctxd(), "serve", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"ctxd serve exited early: {proc.stdout.read() if proc.stdout else ''}")
            time.sleep(0.3)
        else:
            pytest.fail("ctxd serve did not become ready in 90 s")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert (tmp_path / "data" / "ctxd.sqlite3").exists(), "embedded default: a SQLite file in CTXD_DATA_DIR"


def test_serve_then_replay_over_http(server: str, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = subprocess.run([*ctxd(), "replay", str(TRACE), "--url", server, "--json-out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "prompt tokens" in done.stdout and "provider hit" in done.stdout and "15*" in done.stdout
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert len(rows) == 16
    for row in rows:
        assert row["request_tokens"] == row["root"] + row["trunk"] + row["leaf"]
        assert row["request_tokens"] == row["system"] + row["tools"] + row["task_state"] + row["observations"]
        assert row["request_tokens"] <= row["input_limit"]
    metrics = httpx.get(f"{server}/metrics").text
    assert 'ctxd_http_requests_total{method="GET",route="/v1/sessions/{session_id}/request",status="200"} 16.0' in metrics


def test_replay_reports_unreachable_server(tmp_path: Path) -> None:
    done = subprocess.run([*ctxd(), "replay", str(TRACE), "--url", f"http://127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "ctxd serve" in done.stdout + done.stderr
