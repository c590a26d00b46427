"""`ctxd serve` prints its own log lines (logging was unconfigured: "ctxd ready" never
showed), each once, as JSON objects (structlog; CTXD_LOG_FORMAT=json, the default when
stderr is not a terminal) with the request id on every line logged inside a request (null
outside), at CTXD_LOG_LEVEL; responses carry X-Request-ID (asgi-correlation-id)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from ctxd_tools.bench_http import serve


def _lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    out = []
    for line in text.splitlines():
        assert line.startswith("{"), f"not a JSON line: {line!r}"
        out.append(json.loads(line))
    return out


def test_serve_prints_the_ready_line_once_and_echoes_request_ids(server: str, tmp_path: Path) -> None:
    r = httpx.get(f"{server}/healthz", headers={"X-Request-ID": "e2e-req-1"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "e2e-req-1"
    generated = httpx.get(f"{server}/readyz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    missing = httpx.get(f"{server}/v1/sessions/nope", headers={"X-Request-ID": "e2e-req-404"})
    assert missing.status_code == 404 and missing.json()["request_id"] == "e2e-req-404"
    lines = _lines(tmp_path / "serve.log")
    data_dir = (tmp_path / "data").resolve()
    starting = [line for line in lines if line["event"].startswith("ctxd starting")]
    assert len(starting) == 1, lines[-20:]
    assert starting[0]["event"] == (f"ctxd starting: data directory {data_dir}, database sqlite:///"
                                    f"{data_dir / 'ctxd.sqlite3'}, profiles ['mistral-tekken', 'qwen3', 'qwen3-128k', "
                                    "'qwen3-nothink']")
    assert (starting[0]["level"], starting[0]["logger"], starting[0]["request_id"]) == ("info", "ctxd", None)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", starting[0]["timestamp"]) and starting[0]["pid"] > 0
    # "ready" only once the tokenizer is loaded (what /readyz says), after the start-up line
    # and after uvicorn bound its port (before: "ctxd ready" came first, even when the bind failed)
    ready = [i for i, line in enumerate(lines) if line["event"].startswith("ctxd ready")]
    bound = [i for i, line in enumerate(lines) if line["event"].startswith("Uvicorn running on")]
    assert len(ready) == 1 and len(bound) == 1, lines[-20:]
    assert re.fullmatch(r"ctxd ready: the tokenizer of profile qwen3 loaded in \d+\.\d s; /readyz answers 200",
                        lines[ready[0]]["event"])
    assert lines.index(starting[0]) < bound[0] < ready[0]
    access = {line["request_id"]: line for line in lines if line["logger"] == "uvicorn.access"}
    assert '"GET /healthz HTTP/1.1" 200' in access["e2e-req-1"]["event"]
    assert '"GET /readyz HTTP/1.1"' in access[generated]["event"]
    assert '"GET /v1/sessions/nope HTTP/1.1" 404' in access["e2e-req-404"]["event"]


def test_serve_log_level_applies_to_ctxd_and_uvicorn(tmp_path: Path) -> None:
    """CTXD_LOG_LEVEL=warning: neither the start-up line nor access lines are printed."""
    with serve(data_dir=tmp_path / "data", log_path=tmp_path / "serve.log", env={"CTXD_LOG_LEVEL": "warning"},
               ready_timeout=90) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200
    log = (tmp_path / "serve.log").read_text(encoding="utf-8")
    assert "ctxd ready" not in log and "GET /healthz" not in log, log[-2000:]


def test_serve_debug_level_and_console_format(tmp_path: Path) -> None:
    """CTXD_LOG_LEVEL=debug shows ctxd's debug lines (e.g. the migration lock's) and
    CTXD_LOG_FORMAT=console prints text for humans, the request id in each request's line."""
    with serve(data_dir=tmp_path / "data", log_path=tmp_path / "serve.log",
               env={"CTXD_LOG_LEVEL": "debug", "CTXD_LOG_FORMAT": "console"}, ready_timeout=90) as base:
        assert httpx.get(f"{base}/healthz", headers={"X-Request-ID": "human-1"}).status_code == 200
    log = (tmp_path / "serve.log").read_text(encoding="utf-8")
    assert not log.lstrip().startswith("{")
    assert re.search(r"\[debug\s*\] migration lock held", log), log[-2000:]
    assert re.search(r"\[info\s*\] ctxd starting: data directory", log)
    (access,) = [line for line in log.splitlines() if "GET /healthz" in line]
    assert "request_id=human-1" in access
