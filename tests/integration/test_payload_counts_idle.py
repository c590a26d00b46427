"""A POST's payload count runs when the worker is idle, not during the agent's next GET
(issue 9's warm GET over HTTP; app/services/payload_counts.py), served by a REAL uvicorn
on loopback (TestClient runs background tasks before it returns, which hides the race).

Before: the count of the POST's new outputs started as soon as the POST had answered, so
it ran during the GET the agent sends at once (on this 2-core machine the GET's planning
waited for the GIL and the CPU: warm GET ~9.5 ms instead of ~7.0). After: it waits until
no request has been in flight for the settle time, so it runs after that GET, and the
manifest of a later GET reports the count.

Fault kinds from peers' threads: CPU work of a background task in the serving process
slowing the requests beside it (grpc/grpc#8800; django-background-tasks#290); a lower OS
priority for such work (uhh-lt/dats#472) was tried here and dropped: a preempted niced
thread that holds the GIL stalls the request threads too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.services import after_ingest, payload_counts
from app.services import sessions as session_service
from app.settings import Settings
from tests.api.test_api import SESSION, assistant, result
from tests.in_thread import served

SLOW_COUNT = 0.3  # seconds a count takes here (a large output's), so an overlap cannot be missed


def test_the_count_runs_after_the_get_that_follows_its_post(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a settle time no loaded CI machine outruns between a POST's answer and the next GET
    monkeypatch.setattr(payload_counts, "SETTLE_SECONDS", 1.0)
    spans: list[tuple[float, float]] = []
    count = session_service.count_payload_tokens

    def slow_count(*args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        time.sleep(SLOW_COUNT)
        try:
            return count(*args, **kwargs)
        finally:
            spans.append((began, time.monotonic()))

    monkeypatch.setattr(session_service, "count_payload_tokens", slow_count)
    app = create_app(Settings(data_dir=tmp_path / "data", rate_limit=""))
    payload = "".join(f"line {i}: some output of the tool, {i * 7919 % 1000} items\n" for i in range(3000))
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        posted = client.post(f"/v1/sessions/{sid}/events",
                             json={"events": [assistant("a1", "c1"), result("r1", "c1", payload)]})
        assert posted.status_code == 200, posted.text
        get_began = time.monotonic()
        first = client.get(f"/v1/sessions/{sid}/request")
        get_ended = time.monotonic()
        assert first.status_code == 200, first.text
        assert get_ended - get_began < SLOW_COUNT, "the GET did not wait for the count"
        item = next(i for i in first.json()["manifest"]["items"] if i["kind"] == "tool_result")
        assert item["representation"] == "head_tail" and item["tokens_known"] is False
        deadline = time.monotonic() + 30
        while not spans and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(spans) == 1
        assert spans[0][0] >= get_ended, "the count started after the GET had been answered, not during it"
        later = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
        item = next(i for i in later["items"] if i["kind"] == "tool_result")
        meter = app.state.ctxd.meters.get(app.state.ctxd.profiles.get("qwen3"))
        assert item["tokens_known"] is True and item["tokens"] == meter.count_text(payload)
        assert later["elided_tokens_exact"] is True


def test_activity_counts_a_request_in_flight_until_its_last_byte(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """RequestContext holds a request in flight from its first ASGI call to its response's
    last byte: the POST is in flight when its count is queued, not in its background task."""
    app = create_app(Settings(data_dir=tmp_path / "data", rate_limit=""))
    in_route: list[int] = []
    after: list[int] = []
    counted = after_ingest._counted

    async def spy(done: Any) -> None:
        after.append(app.state.ctxd.activity.in_flight)
        await counted(done)

    monkeypatch.setattr(after_ingest, "_counted", spy)
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        activity = app.state.ctxd.activity
        counter = app.state.ctxd.payload_counter
        submit = counter.submit

        def queued(session_id: str, handles: Sequence[str]) -> Any:
            in_route.append(activity.in_flight)
            return submit(session_id, handles)

        counter.submit = queued
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        assert client.post(f"/v1/sessions/{sid}/events",
                           json={"events": [assistant("a1", "c1"), result("r1", "c1", "out\n")]}).status_code == 200
        assert client.get("/healthz").status_code == 200
        assert activity.in_flight == 0
    assert in_route == [1] and after == [0]
