"""Every query of the Grafana dashboard returns data from a real Prometheus (issue 13 item 3).

Grafana is not packaged here, so its dashboard's PromQL is what is checked: ``ctxd serve``
starts natively (SQLite), a real Prometheus (Debian's ``/usr/bin/prometheus``) scrapes it on
loopback every second with the repo's config (target and intervals rewritten) and rules
file, a real trace is replayed over HTTP (its first calls, past a compaction pass), and then
every ``expr`` of ``deploy/grafana/dashboards/ctxd.json`` must return a non-empty series.

To give every panel data, as in production:
* Redis is down: ``CTXD_REDIS_URL`` names a loopback port nothing listens on, so the segment
  cache falls back to local encoding (``ctxd_redis_fallbacks_total``);
* a summarizer is configured (a loopback HTTP server answering chat completions) whose
  candidate fails the audit (``ctxd_audit_rejections_total``);
* two GETs name an unknown session (404s: the error-rate panel's 4xx series).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from ctxd_tools.native_stack import free_port, stop, wait_ready
from tests.deploy.conftest import PROMETHEUS_YML, RULES
from tests.traces import TRACES_DIR

PROMETHEUS = "/usr/bin/prometheus"
TRACE = TRACES_DIR / "pvlib__pvlib-python-1707__chat.traj.json"
CALLS = 10  # GETs replayed: past qwen3's t_hi (8448 tokens): select's first pass is at call 8 (ctxd eval), so at least one

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK),
                       reason=f"{PROMETHEUS} is not installed (Debian package prometheus: .ci/run installs it)"),
]


class _Summarizer(BaseHTTPRequestHandler):
    """A chat-completions endpoint whose candidate record is ``{}``: the audit rejects it
    (schema findings), so ctxd keeps the deterministic record."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"id": "x", "object": "chat.completion", "model": "summarizer",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "{}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def summarizer_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Summarizer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def ctxd_base(tmp_path: Path, summarizer_url: str) -> Iterator[str]:
    from ctxd_tools.bench_http import serve

    env = {"CTXD_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens: Redis is down
           "CTXD_SUMMARIZER_URL": summarizer_url, "CTXD_SUMMARIZER_RETRIES": "0"}
    with serve(data_dir=tmp_path / "data", env=env, log_path=tmp_path / "serve.log", ready_timeout=120) as base:
        yield base


def _prometheus_config(target: str) -> dict[str, Any]:
    """The repo's prometheus.yml, scraping ``target`` every second, rules evaluated every second."""
    config: dict[str, Any] = yaml.safe_load(PROMETHEUS_YML.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    config["rule_files"] = [str(RULES)]
    jobs = [job for job in config["scrape_configs"] if job["job_name"] == "ctxd"]
    assert len(jobs) == 1, "prometheus.yml scrapes ctxd in one job"
    jobs[0]["static_configs"] = [{"targets": [target]}]
    jobs[0].pop("scrape_timeout", None)
    config["scrape_configs"] = jobs
    return config


@pytest.fixture()
def prometheus(ctxd_base: str, tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_prometheus_config(ctxd_base.removeprefix("http://"))))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    with tempfile.TemporaryDirectory(prefix="ctxd-prom-") as storage:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={storage}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(f"{base}/-/ready", timeout=60, alive=lambda: proc.poll() is None, what="prometheus",
                       log=tmp_path / "prometheus.log")
            yield base
        finally:
            stop(proc, 20)
            log.close()
