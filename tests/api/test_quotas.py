"""Issue 12 items 1 and 4: when keys are required (CTXD_AUTH=auto), per-tenant rate limits
(429 + Retry-After, in process and in a real Redis shared by two app instances) and the
per-tenant storage quota (429, counted as if not deduplicated: whether the content exists
elsewhere never changes the answer)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api.auth import auth_required
from app.main import create_app
from app.services import tenancy
from app.settings import Settings
from app.store.db import unit_of_work
from tests.api.test_api import SESSION, assert_problem, assistant, result
from tests.in_thread import served


def key_headers(client: TestClient, tenant: str) -> dict[str, str]:
    with unit_of_work(client.app.state.ctxd.session_factory) as db:  # type: ignore[attr-defined]
        return {"Authorization": f"Bearer {tenancy.create_key(db, tenant)[1]}"}


# --- CTXD_AUTH ----------------------------------------------------------------------------

@pytest.mark.parametrize(("auth", "host", "server", "required"), [
    ("auto", "127.0.0.1", ("127.0.0.1", 8000), False),
    ("auto", "localhost", ("::1", 8000), False),
    ("auto", "127.0.0.1", ("testserver", 80), False),  # in-process test client: no socket
    ("auto", "0.0.0.0", ("10.0.0.5", 8000), True),
    ("auto", "0.0.0.0", ("127.0.0.1", 8000), True),  # bound to every interface: keys even from loopback
    ("auto", "127.0.0.1", ("10.0.0.5", 8000), True),  # served on 0.0.0.0 by hand with the default CTXD_HOST
    ("required", "127.0.0.1", ("127.0.0.1", 8000), True),
    ("off", "0.0.0.0", ("10.0.0.5", 8000), False),
])
def test_auth_required_by_mode_and_address(auth: str, host: str, server: tuple[str, int], required: bool) -> None:
    settings = Settings(auth=auth, host=host)  # type: ignore[arg-type]
    assert auth_required(settings, {"type": "http", "server": server}) is required


def test_auto_on_loopback_needs_no_key_over_real_http(tmp_path: Path) -> None:
    """The README's first command (``ctxd serve``: 127.0.0.1) keeps working without a key."""
    with served(create_app(Settings(data_dir=tmp_path))) as url:
        r = httpx.post(f"{url}/v1/sessions", json=SESSION, timeout=30)
        assert r.status_code == 201, r.text


def test_auto_on_a_public_address_requires_a_key(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path, host="0.0.0.0"))) as client:
        assert_problem(client.post("/v1/sessions", json=SESSION), 401)
        assert client.post("/v1/sessions", json=SESSION, headers=key_headers(client, "t")).status_code == 201
        assert client.get("/healthz").status_code == 200  # probes need no key


# --- rate limits --------------------------------------------------------------------------

def _hammer(client: TestClient, headers: dict[str, str], n: int) -> list[int]:
    return [client.get("/v1/sessions", headers=headers).status_code for _ in range(n)]


def test_rate_limit_is_per_tenant_429_with_retry_after(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, auth="required", rate_limit="5/minute")
    with TestClient(create_app(settings)) as client:
        a, b = key_headers(client, "a"), key_headers(client, "b")
        assert _hammer(client, a, 5) == [200] * 5
        r = client.get("/v1/sessions", headers=a)
        body = assert_problem(r, 429)
        assert 1 <= int(r.headers["retry-after"]) <= 60 and body["retry_after"] == int(r.headers["retry-after"])
        assert body["limit"] == "5 per 1 minute"
        assert _hammer(client, b, 5) == [200] * 5, "another tenant's budget is its own"


def test_rate_limit_in_redis_is_shared_by_workers(tmp_path: Path, redis_url: str) -> None:
    """Two app instances (two workers) on one Redis: 6 requests of a tenant spread over both
    against a limit of 6/minute, then the 7th on either is 429."""
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    settings = Settings(data_dir=tmp_path, auth="required", rate_limit="6/minute", redis_url=redis_url)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        headers = key_headers(one, "shared")
        codes = [c.get("/v1/sessions", headers=headers).status_code for c in (one, two) * 3]
        assert codes == [200] * 6
        assert_problem(two.get("/v1/sessions", headers=headers), 429)
        assert_problem(one.get("/v1/sessions", headers=headers), 429)


def test_rate_limit_admits_when_redis_is_unreachable(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, auth="required", rate_limit="1/minute",
                        redis_url="redis://127.0.0.1:1/0", redis_timeout_seconds=0.05)
    with TestClient(create_app(settings)) as client:
        headers = key_headers(client, "t")
        assert _hammer(client, headers, 3) == [200] * 3


# --- storage quota ------------------------------------------------------------------------

def _turn(n: int, payload: str) -> dict:
    return {"events": [assistant(f"a{n}", f"c{n}"), result(f"r{n}", f"c{n}", payload)]}


def test_storage_quota_counts_bytes_as_if_not_deduplicated(tmp_path: Path) -> None:
    """Quota 4,000 bytes. A posts 3,000 bytes of output (+ a small message), then the same
    3,000 bytes again: 429, although storage would not grow. B, a fresh tenant, posts the
    content A already stored: charged in full like any new content, so a 429 cannot tell
    whether the content existed. A refused batch stores nothing."""
    settings = Settings(data_dir=tmp_path, auth="required", storage_quota_bytes=4000)
    with TestClient(create_app(settings)) as client:
        a, b = key_headers(client, "a"), key_headers(client, "b")
        blob = "x" * 3000
        sid = client.post("/v1/sessions", json=SESSION, headers=a).json()["id"]
        assert client.post(f"/v1/sessions/{sid}/events", json=_turn(1, blob), headers=a).status_code == 200
        before = client.get(f"/v1/sessions/{sid}", headers=a).json()["events"]
        r = client.post(f"/v1/sessions/{sid}/events", json=_turn(2, blob), headers=a)
        body = assert_problem(r, 429)
        assert body["quota_bytes"] == 4000 and body["used_bytes"] > 6000 and "retry-after" not in r.headers
        assert client.get(f"/v1/sessions/{sid}", headers=a).json()["events"] == before
        # B: a new tenant storing the same 3,000 bytes twice (deduplicated in storage)
        sb = client.post("/v1/sessions", json=SESSION, headers=b).json()["id"]
        assert client.post(f"/v1/sessions/{sb}/events", json=_turn(1, blob), headers=b).status_code == 200
        assert_problem(client.post(f"/v1/sessions/{sb}/events", json=_turn(2, blob), headers=b), 429)
        # fresh content of the same size answers the same: existence does not show
        other = client.post("/v1/sessions", json=SESSION, headers=b).json()["id"]
        r = client.post(f"/v1/sessions/{other}/events", json=_turn(1, "y" * 3000), headers=b)
        assert_problem(r, 429)
        # deleting a session frees its bytes
        assert client.delete(f"/v1/sessions/{sb}", headers=b).status_code == 200
        assert client.post(f"/v1/sessions/{other}/events", json=_turn(1, "y" * 3000), headers=b).status_code == 200
        handle = hashlib.sha256(("y" * 3000).encode()).hexdigest()
        assert client.get(f"/v1/handles/{handle}", headers=b).content == b"y" * 3000


@pytest.mark.parametrize("storage", ["memory", "redis"])
def test_waiting_retry_after_is_enough(storage: str, request: pytest.FixtureRequest) -> None:
    """alisaifee/flask-limiter#62: a client that waited exactly Retry-After seconds was
    refused again. Here, three times in a row on a 3-per-2-seconds limit, the request
    after the wait is admitted."""
    from app.domain.errors import RateLimited
    from app.services.ratelimits import TenantRateLimiter

    url = request.getfixturevalue("redis_url") if storage == "redis" else ""
    limiter = TenantRateLimiter("3/2second", redis_url=url, namespace=f"ctxd-test-{time.time_ns()}")
    for _ in range(3):
        with pytest.raises(RateLimited) as refused:
            for _ in range(10):
                limiter.check("tenant")
        wait = refused.value.extra["retry_after"]
        assert 1 <= wait <= 2
        time.sleep(wait)
        limiter.check("tenant")  # admitted


def test_replay_sends_the_api_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ctxd replay --api-key`` against a server that requires keys (served over real HTTP
    with CTXD_HOST=0.0.0.0): without the key the first POST is a 401 (exit 1), with it the
    whole trajectory replays (exit 0)."""
    from app.cli import EXIT_FAILED, EXIT_OK, main
    from tests.traces import TRACE_FILES

    if not TRACE_FILES:
        pytest.skip("shared traces not found")
    smallest = min(TRACE_FILES, key=lambda p: p.stat().st_size)
    app = create_app(Settings(data_dir=tmp_path, host="0.0.0.0"))
    with served(app) as url:
        with unit_of_work(app.state.ctxd.session_factory) as db:
            key = tenancy.create_key(db, "replayer")[1]
        assert main(["replay", str(smallest), "--url", url, "--quiet"]) == EXIT_FAILED
        assert "401" in capsys.readouterr().err
        assert main(["replay", str(smallest), "--url", url, "--quiet", "--api-key", key]) == EXIT_OK


def test_keys_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``ctxd keys create --tenant NAME`` prints only the key on stdout, once; ``list`` shows
    ids, never secrets; ``revoke`` works once; a bad tenant name is a usage error."""
    from app.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, main

    monkeypatch.setenv("CTXD_DATA_DIR", str(tmp_path))
    assert main(["keys", "create", "--tenant", "acme"]) == EXIT_OK
    out = capsys.readouterr()
    key = out.out.strip()
    assert out.out == key + "\n" and key.startswith("ctxd_") and len(key) == 5 + 12 + 1 + 64
    assert "shown only this once" in out.err and key not in out.err
    assert main(["keys", "list"]) == EXIT_OK
    listed = capsys.readouterr().out
    assert key.split("_")[1] in listed and "tenant=acme" in listed and key.split("_")[2] not in listed
    with TestClient(create_app(Settings(data_dir=tmp_path, auth="required"))) as client:
        assert client.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert main(["keys", "revoke", key.split("_")[1]]) == EXIT_OK
        assert main(["keys", "revoke", key]) == EXIT_FAILED  # already revoked
        assert_problem(client.get("/v1/sessions", headers={"Authorization": f"Bearer {key}"}), 401)
    assert main(["keys", "create", "--tenant", "no spaces"]) == EXIT_BAD_INPUT
