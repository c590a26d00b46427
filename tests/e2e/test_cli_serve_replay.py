"""The README's main job over real HTTP: `ctxd serve` on loopback, `ctxd replay` against it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx

from ctxd_tools.native_stack import free_port
from tests.e2e.conftest import ctxd
from tests.traces import TRACES_DIR as TRACES

TRACE = TRACES / "pvlib__pvlib-python-1072__reasoner.traj.json"


def test_serve_then_replay_over_http(server: str, tmp_path: Path) -> None:
    assert (tmp_path / "data").is_dir()
    out = tmp_path / "report.json"
    done = subprocess.run([*ctxd(), "replay", str(TRACE), "--url", server, "--json-out", str(out)],
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "prompt tokens" in done.stdout and "provider hit" in done.stdout and "16*" in done.stdout
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [row["call"] for row in rows] == list(range(1, 17))  # numbered as the inspector numbers them
    # the session is named, with where to look inside it (a new user had to list sessions to find it)
    sid = report["session_id"]
    assert f"session {sid}: look inside it at {server.rstrip('/')}/ui/sessions/{sid}" in done.stdout
    assert httpx.get(f"{server}/v1/sessions/{sid}").status_code == 200
    for row in rows:
        assert row["request_tokens"] == row["root"] + row["trunk"] + row["leaf"]
        assert row["request_tokens"] == row["system"] + row["tools"] + row["task_state"] + row["observations"]
        assert row["request_tokens"] <= row["input_limit"]
    metrics = httpx.get(f"{server}/metrics").text
    assert 'ctxd_http_requests_total{method="GET",route="/v1/sessions/{session_id}/request",status="200"} 16.0' in metrics


def test_replay_reports_unreachable_server(tmp_path: Path) -> None:
    done = subprocess.run([*ctxd(), "replay", str(TRACE), "--url", f"http://127.0.0.1:{free_port()}"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "ctxd serve" in done.stdout + done.stderr
