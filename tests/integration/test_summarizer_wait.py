"""The GET that runs a compaction pass waits for the summarizer's job of that pass (issue 10
item 6, ``CTXD_SUMMARIZER_WAIT_SECONDS``), served by a REAL uvicorn server on loopback, so
the POST's background job really runs concurrently with the agent's next GET (TestClient
runs background tasks before it returns, which hid the race), against the scripted
loopback summarizer made slow (it answers after 1.5 s, as a model call would).

Before: the pass GET came 0.1 s after the POST and always used the deterministic record
(``test_without_a_wait_the_pass_uses_the_deterministic_record`` shows it, wait 0). After:
it waits for the job of exactly its fold, up to the bound, then serves the admitted
candidate; a summarizer slower than the bound ends in the deterministic record and the
manifest says the wait ran out; a GET that runs no pass never waits.

Fault kinds from peers' threads: a background summary that the next turn outruns, so the
turn goes out with the unsummarized (or stale) context (juspay/clairvoyance#571,
Aider-AI/aider#5689, plastic-labs/honcho#312); here the pass waits a bounded time, and a
job of another fold is never waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from app.main import create_app
from app.settings import Settings
from tests.api.test_api import SESSION
from tests.in_thread import served
from tests.integration.test_summarizer import Script, server  # noqa: F401  (the loopback summarizer fixture)
from tests.integration.test_summarizer_pass import MODEL_STEP, SMALL, correct, turn

SLOW = 1.5  # seconds the scripted summarizer takes to answer, like a model call


def slow(seconds: float) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(seconds)
        return correct(body)
    return answer


@contextmanager
def serve(tmp_path: Path, summarizer: tuple[str, list[Script]], wait: float,
          answer_after: float = SLOW) -> Iterator[tuple[httpx.Client, Any]]:
    """ctxd served by uvicorn on a free loopback port (tests/in_thread.py), ready, with the
    loopback ``summarizer`` answering after ``answer_after`` seconds; yields a keep-alive
    client (an agent's) and the app."""
    summarizer_url, holder = summarizer
    holder[0] = Script(slow(answer_after))
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(SMALL)
    app = create_app(Settings(data_dir=tmp_path / f"data-{wait}", profiles_path=profiles, rate_limit="",
                              summarizer_url=summarizer_url, summarizer_timeout_seconds=30,
                              summarizer_wait_seconds=wait))
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, app
        # let the last summarizer job end before the server stops
        deadline = time.monotonic() + 120
        while len(app.state.ctxd.summary_jobs) and time.monotonic() < deadline:
            time.sleep(0.05)


def agent_until_pass(client: httpx.Client, sid: str) -> tuple[dict[str, Any], float, list[float]]:
    """An agent: POST a turn, GET the next request at once, until a GET runs a pass.
    Returns that GET's answer, its latency (s) and the latencies of the GETs before."""
    before: list[float] = []
    for i in range(40):
        assert client.post(f"/v1/sessions/{sid}/events", json={"events": turn(i)}).status_code == 200
        began = time.perf_counter()
        got = client.get(f"/v1/sessions/{sid}/request")
        took = time.perf_counter() - began
        assert got.status_code == 200, got.text
        if got.json()["manifest"]["compaction"]["pass"]:
            return got.json(), took, before
        before.append(took)
    raise AssertionError("no pass in 40 turns")


def new_session(client: httpx.Client) -> str:
    r = client.post("/v1/sessions", json=SESSION | {"profile": "small"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_the_pass_get_waits_for_the_candidate_of_its_fold(tmp_path: Path,
                                                         server: tuple[str, list[Script]]) -> None:  # noqa: F811
    with serve(tmp_path, server, wait=5) as (client, _):
        sid = new_session(client)
        got, took, before = agent_until_pass(client, sid)
        source = got["manifest"]["compaction"]["record"]["source"]
        trunk = got["request"]["messages"][1]["content"]
        assert source["source"] == "model" and source["error"] is None, source
        assert "# Progress record (model-written)" in trunk and MODEL_STEP in trunk
        wait = source["wait"]
        assert wait["ran_out"] is False and 0.5 < wait["seconds"] < 5, wait
        assert took >= wait["seconds"], "the GET's latency includes the wait"
        assert max(before) < 1.0, "GETs that run no pass never waited"
        assert len(server[1][0].requests) == 1
        # GET /record and a second GET agree; the second one waits for nothing
        record = client.get(f"/v1/sessions/{sid}/record").json()
        assert record["record"]["source"]["source"] == "model" and record["text"] == trunk
        began = time.perf_counter()
        again = client.get(f"/v1/sessions/{sid}/request").json()
        assert time.perf_counter() - began < 1.0
        assert again["request"] == got["request"] and "wait" not in again["manifest"]["compaction"]["record"]["source"]
        print(f"pass GET with the wait: {took:.3f} s (waited {wait['seconds']} s); other GETs max {max(before):.3f} s")


def test_without_a_wait_the_pass_uses_the_deterministic_record(tmp_path: Path,
                                                               server: tuple[str, list[Script]]) -> None:  # noqa: F811
    """CTXD_SUMMARIZER_WAIT_SECONDS=0 is the behaviour before: the agent's GET outruns the
    summarizer (the job is still asking when the pass runs)."""
    with serve(tmp_path, server, wait=0) as (client, app):
        sid = new_session(client)
        got, took, _ = agent_until_pass(client, sid)
        source = got["manifest"]["compaction"]["record"]["source"]
        assert source == {"source": "deterministic"}
        trunk = got["request"]["messages"][1]["content"]
        assert "# Progress record\n" in trunk and MODEL_STEP not in trunk
        assert took < SLOW, "no wait"
        while len(app.state.ctxd.summary_jobs):  # the job ends afterwards with an admitted candidate, unused
            time.sleep(0.05)
        assert app.state.ctxd.summaries.get(sid).source == "model"
        print(f"pass GET without the wait: {took:.3f} s")


def test_a_summarizer_slower_than_the_wait_ends_in_the_deterministic_record(
        tmp_path: Path, server: tuple[str, list[Script]]) -> None:  # noqa: F811
    with serve(tmp_path, server, wait=1.0, answer_after=4.0) as (client, _):
        sid = new_session(client)
        got, took, _ = agent_until_pass(client, sid)
        source = got["manifest"]["compaction"]["record"]["source"]
        assert source["source"] == "deterministic" and source["wait"]["ran_out"] is True
        assert 1.0 <= source["wait"]["seconds"] < 2.0 and took >= 1.0
        assert "still running after the wait of" in source["error"] and "CTXD_SUMMARIZER_WAIT_SECONDS" in source["error"]
        trunk = got["request"]["messages"][1]["content"]
        assert "# Progress record\n" in trunk and MODEL_STEP not in trunk
        # the candidate that comes later is not used by the pass already served
        time.sleep(3.5)
        again = client.get(f"/v1/sessions/{sid}/request").json()
        assert again["request"]["messages"][1]["content"] == trunk


def test_a_get_that_runs_no_pass_never_waits(tmp_path: Path, server: tuple[str, list[Script]]) -> None:  # noqa: F811
    """With a job in flight for the session the whole time (registered, fold not planned
    yet: no GET can tell it is not its own; the POSTs' own hooks are skipped), every GET
    that runs no pass answers at once and only the pass GET waits (here until its bound);
    with a job of another fold in flight, the pass GET does not wait either."""
    with serve(tmp_path, server, wait=2) as (client, app):
        jobs = app.state.ctxd.summary_jobs
        for fold in (None, (1, (999_999,))):
            sid = new_session(client)
            assert jobs.start(sid)
            jobs.running(sid)
            if fold is not None:
                jobs.planned(sid, fold)
            try:
                got, took, before = agent_until_pass(client, sid)
            finally:
                jobs.finish(sid)
            assert len(before) >= 2 and max(before) < 1.0, before
            source = got["manifest"]["compaction"]["record"]["source"]
            assert source["source"] == "deterministic"
            if fold is None:  # a job that may be its own: the pass GET waits, until the bound
                assert source["wait"]["ran_out"] is True and 2.0 <= source["wait"]["seconds"] < 3.0 and took >= 2.0
            else:  # a job of another fold: no wait
                assert "wait" not in source and took < 1.0, (source, took)
        assert server[1][0].requests == [], "every POST's hook was skipped: a job was in flight"
