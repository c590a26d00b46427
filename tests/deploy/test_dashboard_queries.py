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
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.adapters.miniswe import ModelCall, load_trajectory, replay_plan, session_create_body
from tests.deploy.conftest import PROMETHEUS_YML, RULES, dashboard_exprs
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    from app.bench_http import serve

    env = {"CTXD_REDIS_URL": f"redis://127.0.0.1:{_free_port()}/0",  # nothing listens: Redis is down
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
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    with tempfile.TemporaryDirectory(prefix="ctxd-prom-") as storage:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={storage}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/-/ready", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "prometheus.log").read_text()[-3000:]
                time.sleep(0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()


def _replay(base: str, calls: int) -> dict[str, int]:
    """POST the trace's events and GET its first ``calls`` requests, then a GET of an unknown
    session (a 404); returns status counts."""
    traj = load_trajectory(TRACE)
    statuses: dict[str, int] = {}
    with httpx.Client(base_url=base, timeout=120) as http:
        def count(resp: httpx.Response) -> dict[str, Any]:
            statuses[str(resp.status_code)] = statuses.get(str(resp.status_code), 0) + 1
            assert resp.status_code < 500, resp.text
            return resp.json()  # type: ignore[no-any-return]

        sid = count(http.post("/v1/sessions", json=session_create_body(traj)))["id"]
        done = 0
        for step in replay_plan(traj):
            if isinstance(step, ModelCall):
                if done == calls:
                    break
                count(http.get(f"/v1/sessions/{sid}/request", params={"format": "openai"}))
                done += 1
            else:
                count(http.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)}))
        count(http.get("/v1/sessions/no-such-session/request"))
        count(http.get(f"/v1/sessions/{sid}/record"))
    return statuses


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]  # type: ignore[no-any-return]


def _wait_for(prom: str, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while not (result := _query(prom, expr)):
        assert time.monotonic() < deadline, f"no data for {expr} within {timeout} s"
        time.sleep(0.5)
    return result


def test_every_dashboard_query_returns_data_after_a_short_load(prometheus: str, ctxd_base: str) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 9
    # a 404 (the caller's error) before the load, scraped, and one after it: a new series
    # counts in rate() only from its second sample
    assert httpx.get(f"{ctxd_base}/v1/sessions/no-such-session/request").status_code == 404
    _wait_for(prometheus, 'ctxd_http_requests_total{status="404"}')
    statuses = _replay(ctxd_base, CALLS)
    assert statuses.get("404") == 1 and statuses.get("200", 0) >= CALLS
    metrics = httpx.get(f"{ctxd_base}/metrics").text
    assert "ctxd_compaction_passes_total{" in metrics, "the replay made no compaction pass"
    # polled: rules and rates need two scrapes after a counter moved (scrapes and rules run every second)
    four_xx = 'status_class:ctxd_http_errors:ratio_rate1m{status_class="4xx"} > 0'
    deadline = time.monotonic() + 60
    while True:
        empty = [(title, expr) for title, expr in exprs + [("4xx ratio", four_xx)] if not _query(prometheus, expr)]
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert empty == [], f"dashboard queries without data: {empty}"
    up = _query(prometheus, 'up{job="ctxd"}')
    assert [float(s["value"][1]) for s in up] == [1.0]
    passes = _query(prometheus, "sum(ctxd_compaction_passes_total)")
    assert float(passes[0]["value"][1]) >= 1
    rejected = _query(prometheus, "sum(ctxd_audit_rejections_total)")
    assert float(rejected[0]["value"][1]) >= 1
    assert 0 < float(_query(prometheus, four_xx)[0]["value"][1]) < 1
