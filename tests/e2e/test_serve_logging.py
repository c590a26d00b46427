"""`ctxd serve` prints its own log lines (logging was unconfigured: "ctxd ready" never
showed) in the format with the request id; responses carry X-Request-ID."""

from __future__ import annotations

import re
from pathlib import Path

import httpx


def test_serve_prints_the_ready_line_and_echoes_request_ids(server: str, tmp_path: Path) -> None:
    r = httpx.get(f"{server}/healthz", headers={"X-Request-ID": "e2e-req-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "e2e-req-1"
    generated = httpx.get(f"{server}/readyz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    log = (tmp_path / "serve.log").read_text(encoding="utf-8")
    assert re.search(r"^\S+ \S+ INFO ctxd \[request_id=-\] ctxd ready: database sqlite:///", log, re.M), log[-2000:]
