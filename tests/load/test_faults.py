"""Fault tests on the native stack: PostgreSQL + Redis + ctxd with 2 workers (issue 13 item 5).

Each test runs real mini-swe-agent traces as simulated agents (ctxd_tools/loadgen.py, threads and
httpx: every request, its status and time, and every event id acknowledged with a 2xx are
recorded), breaks one part of the stack mid-load, and checks what clients saw and what the
database holds. Tests that break something start their own PostgreSQL and Redis.
"""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from ctxd_tools.loadgen import Agents, Outcome, is_failure
from ctxd_tools.miniswe import PostEvents, load_trajectory, replay_plan, session_create_body
from ctxd_tools.native_stack import Ctxd
from tests.load.conftest import LOAD_TRACES, Stack, log_tail, native_stack, needs_native, report

# not marked postgres/redis: these start their own servers (CTXD_TEST_* URLs are not needed)
pytestmark = [pytest.mark.slow, needs_native, pytest.mark.timeout(600)]


def metric_total(base: str, name: str) -> float:
    """The total of counter ``name`` (all label sets) at ``/metrics`` (every worker's, summed
    in Prometheus multiprocess mode)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(httpx.get(f"{base}/metrics", timeout=30).text))


def failures(outcomes: list[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if is_failure(o)]


def describe(outcomes: list[Outcome]) -> str:
    return "; ".join(f"{n} x {route} {status}: {error[:160]}" for (route, status, error), n in
                     Counter((o.route, o.status, o.error) for o in outcomes).most_common(5))


def stored_events(stack: Stack, session_ids: list[str]) -> set[tuple[str, str, int]]:
    if not session_ids:
        return set()
    ids = ",".join(f"'{s}'" for s in session_ids)
    rows = stack.pg.psql(f"SELECT session_id, event_id, seq FROM events WHERE session_id IN ({ids})").splitlines()
    return {(s, e, int(q)) for s, e, q in (r.split("|") for r in rows if r)}


def test_redis_killed_mid_load() -> None:
    """Redis SIGKILLed mid-load: no request fails (segments are encoded locally), and the
    fallbacks are counted (ctxd_redis_fallbacks_total)."""
    with native_stack() as stack:
        assert stack.redis is not None
        agents = Agents([stack.ctxd.base], LOAD_TRACES, agents=3, max_calls=12).start()
        time.sleep(6)
        before = len(agents.outcomes)
        stack.redis.kill()
        killed_at = time.monotonic()
        time.sleep(10)
        agents.stop()
        after = [o for o in agents.outcomes if o.start >= killed_at]
        fallbacks = metric_total(stack.ctxd.base, "ctxd_redis_fallbacks_total")
        bad = failures(agents.outcomes)
        report("Redis killed mid-load (3 agents, 2 workers)", [
            f"requests {len(agents.outcomes)} ({before} before the kill, {len(after)} after), failures {len(bad)}",
            f"ctxd_redis_fallbacks_total at /metrics (all workers) {fallbacks:.0f}"])
        assert not bad, describe(bad) + log_tail(stack.ctxd.log)
        assert len(after) > 10, "too few requests after the kill to test anything"
        assert {o.route for o in after} == {"session", "events", "request"}
        assert fallbacks > 0, "the fallbacks to local encoding were not counted"


def test_postgres_restarted_mid_load() -> None:
    """PostgreSQL stopped (fast: every connection cut) and started again mid-load: during the
    outage requests answer 503 with Retry-After (and clients retry them), never a 500 or a
    reset; afterwards every event acknowledged with a 2xx is in the database with its seq."""
    with native_stack() as stack:
        agents = Agents([stack.ctxd.base], LOAD_TRACES, agents=3, max_calls=12, max_retry_wait=0.5).start()
        time.sleep(6)
        stack.pg.stop("fast")
        down = time.monotonic()
        time.sleep(4)
        stack.pg.start()
        up = time.monotonic()
        time.sleep(8)
        agents.stop()
        outage = [o for o in agents.outcomes if down <= o.start <= up]
        unavailable = [o for o in agents.outcomes if o.status == 503]
        after = [o for o in agents.outcomes if o.start > up + 2 and 200 <= o.status < 300]
        stored = stored_events(stack, agents.session_ids)
        lost = agents.acknowledged - stored
        bad = failures(agents.outcomes)
        report("PostgreSQL restarted mid-load (3 agents, 2 workers, 4 s down)", [
            (f"requests {len(agents.outcomes)}, during the outage {len(outage)}, 503s {len(unavailable)} "
            f"(with Retry-After {sum(1 for o in unavailable if o.retry_after)}), failures {len(bad)}"),
            (f"events acknowledged {len(agents.acknowledged)}, stored {len(stored)} (of which "
             f"{sum(e.startswith('infer:') for _, e, _ in stored)} artifact writes the server inferred from shell "
             f"commands: never in a batch's results), acknowledged but lost {len(lost)}"),
            f"successful requests from 2 s after the restart {len(after)}"])
        assert not bad, describe(bad) + log_tail(stack.ctxd.log)
        assert unavailable, "no 503 during the outage: " + describe(outage)
        assert all(o.retry_after for o in unavailable)
        assert all(o.status in (200, 201, 503) for o in outage), describe(outage)
        assert not lost, sorted(lost)[:10]
        assert agents.acknowledged and after, "the load did not resume after the restart"


def _first_batch() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    traj = load_trajectory(LOAD_TRACES[0])
    batch = next(s for s in replay_plan(traj) if isinstance(s, PostEvents) and len(s.events) >= 2)
    return session_create_body(traj), list(batch.events)


def _post_until_answered(base: str, path: str, body: dict[str, Any], start: threading.Barrier | None = None
                         ) -> tuple[int, dict[str, Any]]:
    """POST on a new connection, retrying 503s after Retry-After; (status, JSON)."""
    with httpx.Client(base_url=base, timeout=120, headers={"Connection": "close"}) as client:
        if start is not None:
            start.wait()
        while True:
            resp = client.post(path, json=body)
            if resp.status_code != 503:
                return resp.status_code, resp.json()
            time.sleep(float(resp.headers.get("retry-after", "1")))


def test_hundred_concurrent_retries_of_one_batch(shared_stack: Stack) -> None:
    """100 clients POST the same batch (same event ids) at once, on new connections spread over
    both workers: every answer is a 2xx with the same seqs, each event was created by exactly
    one request, and the database holds each once."""
    base = shared_stack.ctxd.base
    create, events = _first_batch()
    sid = httpx.post(f"{base}/v1/sessions", json=create, timeout=60).json()["id"]
    start = threading.Barrier(100)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def client() -> None:
        try:
            answer = _post_until_answered(base, f"/v1/sessions/{sid}/events", {"events": events}, start)
        except (httpx.HTTPError, ValueError, threading.BrokenBarrierError) as exc:  # a reset or a timeout is a failure of the test, not of the thread
            answer = (0, {"error": repr(exc)})
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=client) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    statuses = Counter(status for status, _ in answers)
    seqs = {tuple((r["event_id"], r["seq"]) for r in body["results"]) for status, body in answers if status == 200}
    created = Counter(r["event_id"] for status, body in answers if status == 200 for r in body["results"]
                      if r["status"] == "created")
    rows = shared_stack.pg.psql(f"SELECT event_id, seq FROM events WHERE session_id = '{sid}' ORDER BY seq").split()
    report("100 concurrent retries of one batch (2 workers)", [
        (f"requests 100, answers {dict(statuses)}, events in the batch {len(events)}, stored {len(rows)}, "
        f"created by exactly one request each: {sorted(created.values()) == [1] * len(events)}")])
    assert statuses == {200: 100}, [b for s, b in answers if s != 200][:3]
    assert len(seqs) == 1, seqs
    assert dict(created) == {e["event_id"]: 1 for e in events}
    assert rows == [f"{e['event_id']}|{i}" for i, e in enumerate(events, start=1)]


def test_concurrent_writers_to_one_session(shared_stack: Stack) -> None:
    """8 writers post 10 batches each (distinct event ids) to one session at once: every batch
    is acknowledged, each writer's seqs strictly increase, and the session's seqs are exactly
    1..80 with every acknowledged event at its acknowledged seq (none lost)."""
    base = shared_stack.ctxd.base
    create, _ = _first_batch()
    sid = httpx.post(f"{base}/v1/sessions", json=create, timeout=60).json()["id"]
    writers, batches = 8, 10
    start = threading.Barrier(writers)
    acked: dict[int, list[tuple[str, int]]] = {}
    errors: list[str] = []

    def writer(w: int) -> None:
        mine: list[tuple[str, int]] = []
        try:
            for b in range(batches):
                body = {"events": [{"event_id": f"w{w}-b{b}", "kind": "message", "role": "user",
                                    "content": f"writer {w}, batch {b}"}]}
                status, out = _post_until_answered(base, f"/v1/sessions/{sid}/events", body,
                                                   start if b == 0 else None)
                if status != 200:
                    errors.append(f"{status}: {out}")
                    return
                mine += [(r["event_id"], r["seq"]) for r in out["results"]]
        except (httpx.HTTPError, ValueError, KeyError, threading.BrokenBarrierError) as exc:
            errors.append(repr(exc))
        acked[w] = mine

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    rows = [r.split("|") for r in shared_stack.pg.psql(
        f"SELECT event_id, seq FROM events WHERE session_id = '{sid}' ORDER BY seq").split()]
    stored = {(e, int(s)) for e, s in rows}
    all_acked = {x for mine in acked.values() for x in mine}
    increasing = all(all(a[1] < b[1] for a, b in itertools.pairwise(mine)) for mine in acked.values())
    report("concurrent writers to one session (8 writers x 10 batches, 2 workers)", [
        (f"requests {writers * batches}, failures {len(errors)}, events acknowledged {len(all_acked)}, "
        f"stored {len(stored)}, seqs 1..{len(rows)} dense: {[int(s) for _, s in rows] == list(range(1, len(rows) + 1))}, "
        f"each writer's seqs strictly increasing: {increasing}")])
    assert not errors, errors[:3]
    assert [int(s) for _, s in rows] == list(range(1, writers * batches + 1))
    assert all_acked == stored
    assert increasing


def test_sigterm_during_load() -> None:
    """SIGTERM to ctxd (2 workers) while requests are in flight: every request sent before the
    signal is answered in full (no reset, no 5xx), and the server exits 0."""
    with native_stack() as stack:
        # whole traces: sessions grow, so GETs take longer and some are in flight at the signal
        agents = Agents([stack.ctxd.base], LOAD_TRACES, agents=4, stop_on_transport_error=True).start()
        time.sleep(8)
        deadline = time.monotonic() + 10
        while agents.in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        signalled = time.monotonic()
        stack.ctxd.send_signal(signal.SIGTERM)
        proc = stack.ctxd.proc
        assert proc is not None
        code = proc.wait(timeout=90)
        agents.stop()
        before = [o for o in agents.outcomes if o.start < signalled]
        in_flight = [o for o in before if o.end > signalled]
        bad = [o for o in before if o.status == 0 or o.status >= 500]
        report("SIGTERM during load (4 agents, 2 workers)", [
            (f"requests sent before the signal {len(before)}, in flight at the signal {len(in_flight)} "
            f"(longest {max((o.seconds for o in in_flight), default=0) * 1e3:.0f} ms), failed {len(bad)}; "
            f"sent after the signal {len(agents.outcomes) - len(before)} (refused: expected); exit status {code}")])
        assert not bad, describe(bad) + log_tail(stack.ctxd.log)
        assert in_flight, "no request was in flight at the signal: nothing was tested"
        assert code == 0, log_tail(stack.ctxd.log)


def _replayed_bodies(bases: list[str], routing: str, trace: Any) -> list[dict[str, Any]]:
    agents = Agents(bases, [trace], agents=1, routing=routing, keep_alive=False, keep_bodies=True, max_calls=25,
                    seed=7)
    agents.replay_once()
    assert not failures(agents.outcomes), describe(failures(agents.outcomes))
    served = Counter(o.base for o in agents.outcomes if o.route == "request")
    assert len(served) == len(bases), f"every server must serve GETs of the session: {served}"
    return agents.bodies


#: Fields that differ between two sessions of one trace: ids, times, the session's
#: prompt_cache_key and so the body's digest.
_VOLATILE = {"id", "session_id", "created_at", "manifest_id", "request_id", "prompt_cache_key", "request_sha256"}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{32}", value):
        return "<id>"
    return value


def test_two_workers_serve_one_session_as_one_does() -> None:
    """One trace replayed against one worker, then against two (two servers on the same
    PostgreSQL and Redis, each request of the session sent to a random one, and a 2-worker
    server on new connections): the served bodies, token counts and cache fields are equal."""
    trace = LOAD_TRACES[0]
    with native_stack(workers=1) as one:
        single = _replayed_bodies([one.ctxd.base], "pinned", trace)
    with native_stack(workers=2) as two:
        spread = _replayed_bodies([two.ctxd.base], "pinned", trace)
        with Ctxd(workers=1, env={"CTXD_DATABASE_URL": two.pg.url,
                                  "CTXD_REDIS_URL": two.redis.url if two.redis else ""}) as other:
            routed = _replayed_bodies([two.ctxd.base, other.base], "random", trace)
    rows = []
    for name, bodies in (("2 workers, new connection per request", spread), ("2 servers, random routing", routed)):
        diffs = [i for i, (a, b) in enumerate(zip(single, bodies)) if _stable(a) != _stable(b)]
        rows.append(f"{name}: {len(bodies)} GETs, differing from 1 worker: {len(diffs)}")
        assert len(bodies) == len(single)
        assert not diffs, (name, diffs[:3])
    cached = [b["manifest"]["cache"] for b in single]
    report("two workers serving one session vs one worker", [
        (f"1 worker: {len(single)} GETs, tokens {[b['manifest']['tokens']['total'] for b in single][:6]}..., "
        f"predicted cached tokens {sum(int(c.get('predicted_cached_tokens', 0)) for c in cached)}"), *rows])
