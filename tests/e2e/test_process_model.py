"""Issue 13 item 1 with real processes: `ctxd serve --workers 2` sums its workers' metrics on
/metrics (Prometheus multiprocess mode), SIGTERM lets an in-flight request finish, /readyz
answers 503 naming the database while it is unreachable (a TCP proxy cut between ctxd and a
real PostgreSQL) and 200 once it is back, and shutdown closes the Redis client."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from ctxd_tools.bench_http import serve
from ctxd_tools.native_stack import free_port
from tests.api.test_api import SESSION
from tests.tcp_proxy import TcpProxy


def scrape(base: str) -> str:
    return httpx.get(f"{base}/metrics", timeout=10).text


def value(text: str, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` of a Prometheus text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if labels else "") + r" ([0-9.e+]+)$"
    for line in text.splitlines():
        if m := re.match(pattern, line):
            return float(m.group(1))
    return 0.0


def wait_for(predicate, timeout: float = 120, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def json_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("{")]


def test_metrics_sum_over_two_workers(tmp_path: Path) -> None:
    """N requests spread over 2 workers: every scrape (whichever worker answers) says N.
    Before: one process (no --workers); with plain uvicorn workers each /metrics answered its
    own process's counts only."""
    n = 80
    log = tmp_path / "serve.log"
    with serve(data_dir=tmp_path / "data", log_path=log, args=("--workers", "2"), ready_timeout=180) as base:
        wait_for(lambda: value(scrape(base), "ctxd_workers") == 2 and value(scrape(base), "ctxd_tokenizer_ready") == 1,
                 what="both workers ready")
        sid = httpx.post(f"{base}/v1/sessions", json=SESSION, timeout=30).json()["id"]
        errors: list[BaseException] = []

        def hit(i: int) -> None:
            try:  # a new connection each: the kernel hands them to either worker
                assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
                event = {"event_id": f"e{i}", "kind": "message", "role": "user", "content": f"note {i}"}
                assert httpx.post(f"{base}/v1/sessions/{sid}/events", json={"events": [event]},
                                  timeout=60).status_code == 200
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=hit, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        scrapes = [scrape(base) for _ in range(6)]
    pids = {line["pid"] for line in json_lines(log)
            if line.get("logger") == "uvicorn.access" and "/healthz" in str(line["event"])}
    assert len(pids) == 2, f"the requests were not spread over both workers: {pids}"
    for text in scrapes:
        assert value(text, "ctxd_http_requests_total", method="GET", route="/healthz", status="200") == n
        assert value(text, "ctxd_http_requests_total", method="POST", route="/v1/sessions/{session_id}/events",
                     status="200") == n
        assert value(text, "ctxd_events_appended_total", kind="message") == n
        assert value(text, "ctxd_http_request_duration_seconds_count", method="GET", route="/healthz") == n
        assert value(text, "ctxd_workers") == 2


@contextmanager
def serve_process(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    variables = os.environ | {"CTXD_DATA_DIR": str(tmp_path / "data"), "CTXD_DATABASE_URL": "", "CTXD_REDIS_URL": "",
                              "HF_HUB_OFFLINE": "1"} | (env or {})
    with (tmp_path / "serve.log").open("w", encoding="utf-8") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), *args], env=variables,
                                stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            def ready() -> bool:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                try:
                    return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(ready, 180, "ctxd ready")
            yield proc, base
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_sigterm_lets_an_in_flight_request_finish(tmp_path: Path) -> None:
    """A POST whose body arrives over ~3 s (a slow client) is in flight when the server gets
    SIGTERM: it still answers 200 and its events are stored; new connections are refused;
    the server exits 0 after the request, within --graceful-timeout."""
    with serve_process(tmp_path, "--workers", "2", "--graceful-timeout", "20") as (proc, base):
        sid = httpx.post(f"{base}/v1/sessions", json=SESSION, timeout=30).json()["id"]
        events = [{"event_id": f"slow{i}", "kind": "message", "role": "user", "content": "x" * 2000} for i in range(30)]
        body = json.dumps({"events": events}).encode()
        port = int(base.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        sock.sendall(f"POST /v1/sessions/{sid}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nX-Request-ID: slow-post\r\n\r\n".encode())
        chunks = [body[i:i + len(body) // 10 + 1] for i in range(0, len(body), len(body) // 10 + 1)]
        sock.sendall(chunks[0])
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sigterm_at = time.monotonic()
        for chunk in chunks[1:]:
            time.sleep(0.3)
            sock.sendall(chunk)
        response = b""
        while b"\r\n\r\n" not in response or len(response.split(b"\r\n\r\n", 1)[1]) < _length(response):
            data = sock.recv(65536)
            if not data:
                break
            response += data
        sock.close()
        head, _, payload = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), response[:500]
        results = json.loads(payload)["results"]
        assert [r["status"] for r in results] == ["created"] * 30 and results[-1]["seq"] == 30
        assert proc.wait(30) == 0
        stopped_after = time.monotonic() - sigterm_at
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{base}/healthz", timeout=2)
    lines = json_lines(tmp_path / "serve.log")
    assert sum(1 for line in lines if line["event"] == "ctxd stopped") == 2
    served = [line for line in lines if line.get("request_id") == "slow-post" and line["logger"] == "uvicorn.access"]
    assert len(served) == 1 and '" 200' in str(served[0]["event"])
    assert stopped_after < 20
    # the events are in the database the server left
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'ctxd.sqlite3'}")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events WHERE session_id = :s"), {"s": sid}).scalar_one() == 30
    engine.dispose()


def _length(response: bytes) -> int:
    m = re.search(rb"content-length: (\d+)", response, re.IGNORECASE)
    return int(m.group(1)) if m else 0


def test_readyz_is_503_naming_the_database_while_it_is_unreachable(tmp_path: Path, postgres_url: str) -> None:
    url = make_url(postgres_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        with serve_process(tmp_path, env={"CTXD_DATABASE_URL": proxied}) as (_proc, base):
            assert httpx.get(f"{base}/readyz").json()["checks"] == {"database": "ok", "tokenizer": "loaded"}
            proxy.cut()
            r = httpx.get(f"{base}/readyz", headers={"X-Request-ID": "db-down"}, timeout=30)
            assert r.status_code == 503 and r.headers["content-type"].startswith("application/problem+json")
            body = r.json()
            assert body["checks"] == {"database": "unavailable", "tokenizer": "loaded"}
            assert body["detail"].startswith("database: OperationalError: ") and body["request_id"] == "db-down"
            assert r.headers["retry-after"] == "5"
            assert httpx.get(f"{base}/healthz").status_code == 200  # alive, not ready
            proxy.restore()
            wait_for(lambda: httpx.get(f"{base}/readyz", timeout=30).status_code == 200, 60, "ready again")


def test_shutdown_closes_the_redis_client(tmp_path: Path, redis_url: str) -> None:
    import redis
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    admin = redis.Redis.from_url(redis_url)
    try:
        with TestClient(create_app(Settings(data_dir=tmp_path, redis_url=redis_url))) as client:
            client.app.state.ctxd.tokenizer_ready.wait(120)  # type: ignore[attr-defined]
            sid = client.post("/v1/sessions", json=SESSION).json()["id"]
            assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
            cache_id = client.app.state.ctxd.token_cache.client.client_id()  # type: ignore[attr-defined]
            assert str(cache_id) in admin.execute_command("CLIENT", "LIST", "ID", cache_id).decode()
        assert admin.execute_command("CLIENT", "LIST", "ID", cache_id).decode().strip() == ""
    finally:
        admin.close()
