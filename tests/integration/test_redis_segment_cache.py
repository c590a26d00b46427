"""The service with its segment cache in a real Redis, and with Redis unreachable."""

from __future__ import annotations

import redis
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from ctxd_tools.native_stack import free_port
from tests.e2e.replay_checks import replay_and_check
from tests.traces import TRACE_FILES

TRACE = next(p for p in TRACE_FILES if p.name == "pvlib__pvlib-python-1072__reasoner.traj.json")


def test_replay_with_redis_segment_cache(clean_redis: str, tmp_path, qwen3_ids) -> None:
    settings = Settings(data_dir=tmp_path, redis_url=clean_redis)
    with TestClient(create_app(settings)) as client:
        stats = replay_and_check(client, TRACE, template_ids=qwen3_ids)
        metrics = client.get("/metrics").text
    assert stats.requests == 16
    keys = redis.Redis.from_url(clean_redis).keys("ctxd:seg:*")
    assert len(keys) >= 16, "segments were stored in Redis"
    assert 'ctxd_segment_cache_total{profile="qwen3",result="hits",zone="leaf"}' in metrics
    assert "ctxd_redis_fallbacks_total{" not in metrics or 'reason="get_error"' not in metrics


def test_redis_down_falls_back_and_never_fails(tmp_path, qwen3_ids) -> None:
    port = free_port()  # closed once chosen: nothing listens there
    settings = Settings(data_dir=tmp_path, redis_url=f"redis://127.0.0.1:{port}/0")
    with TestClient(create_app(settings)) as client:
        stats = replay_and_check(client, TRACE, template_ids=qwen3_ids)
        metrics = client.get("/metrics").text
    assert stats.requests == 16
    assert "ctxd_redis_fallbacks_total{" in metrics
