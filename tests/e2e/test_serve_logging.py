"""`ctxd serve` prints its own log lines (logging was unconfigured: "ctxd ready" never
showed) in the format with the request id, each once (uvicorn's log configuration and
ctxd's own handler once both printed ctxd's lines), at CTXD_LOG_LEVEL; responses carry
X-Request-ID."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from app.bench_http import serve


def test_serve_prints_the_ready_line_once_and_echoes_request_ids(server: str, tmp_path: Path) -> None:
    r = httpx.get(f"{server}/healthz", headers={"X-Request-ID": "e2e-req-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "e2e-req-1"
    generated = httpx.get(f"{server}/readyz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    log = (tmp_path / "serve.log").read_text(encoding="utf-8")
    data_dir = (tmp_path / "data").resolve()
    ready = [line for line in log.splitlines() if "ctxd ready" in line]
    assert len(ready) == 1, log[-2000:]
    assert re.fullmatch(rf"\S+ \S+ INFO ctxd \[request_id=-\] ctxd ready: data directory {re.escape(str(data_dir))}, "
                        rf"database sqlite:///{re.escape(str(data_dir / 'ctxd.sqlite3'))}, profiles \[.*\]", ready[0])


def test_serve_log_level_applies_to_ctxd_and_uvicorn(tmp_path: Path) -> None:
    """CTXD_LOG_LEVEL=warning: neither the start-up line nor access lines are printed."""
    with serve(data_dir=tmp_path / "data", log_path=tmp_path / "serve.log", env={"CTXD_LOG_LEVEL": "warning"},
               ready_timeout=90) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200
    log = (tmp_path / "serve.log").read_text(encoding="utf-8")
    assert "ctxd ready" not in log and "GET /healthz" not in log, log[-2000:]
