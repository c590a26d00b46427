"""``ctxd bench --http`` times the naive count of a served body once the server's work
after the GET is done (ctxd_tools/bench_http.py ``NAIVE_AFTER``): the server counts a POST's new
tool outputs once it has had no request in flight for a few ms, which, right after the
GET, ran during the naive timing in the bench process and slowed it (shared cores)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from ctxd_tools import bench_http
from ctxd_tools.bench import BenchError, default_trace
from ctxd_tools.miniswe import load_trajectory


def test_the_naive_count_is_timed_after_the_servers_work_following_the_get() -> None:
    answered: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/sessions":
            return httpx.Response(201, json={"id": "s" * 32})
        if request.method == "POST":
            return httpx.Response(200, json={"last_seq": 1, "results": []})
        answered.append(time.monotonic())
        return httpx.Response(200, json={"request": {"messages": []}, "manifest": {"tokens": {"total": 7}}})

    gaps: list[float] = []

    def naive(_body: dict[str, Any]) -> tuple[float, int]:
        gaps.append(time.monotonic() - answered[-1])
        return 0.001, 7

    try:
        traj = load_trajectory(default_trace())
    except BenchError:
        pytest.skip("shared traces not found")
    with httpx.Client(base_url="http://ctxd.test", transport=httpx.MockTransport(handler)) as client:
        gets, _ = bench_http._replay_http(client, traj, "qwen3", limit=3, naive=naive)
    assert len(gets) == len(gaps) == 3
    assert min(gaps) >= bench_http.NAIVE_AFTER >= 0.01
