"""The payload count worker (app/services/payload_counts.py): a count waits for the worker
to be idle (no HTTP request in flight for the settle time), or its maximum delay; jobs of
one session queued meanwhile are counted together; none is lost (a failure is logged, a
job queued at shutdown is counted)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from app.services.payload_counts import Activity, PayloadCounter


class Recorder:
    def __init__(self, fail: str | None = None) -> None:
        self.calls: list[tuple[str, list[str], float]] = []
        self.fail = fail
        self.thread_ids: list[int] = []

    def __call__(self, session_id: str, handles: Sequence[str]) -> None:
        self.thread_ids.append(threading.get_native_id())
        self.calls.append((session_id, list(handles), time.monotonic()))
        if session_id == self.fail:
            raise RuntimeError("boom")


@contextmanager
def running(*, settle: float, max_delay: float, count: Recorder | None = None
            ) -> Iterator[tuple[Activity, Recorder, PayloadCounter]]:
    """A payload counter over a fresh Activity and ``count`` (a Recorder), closed after."""
    activity, recorder = Activity(), count if count is not None else Recorder()
    counter = PayloadCounter(recorder, activity, settle=settle, max_delay=max_delay)
    try:
        yield activity, recorder, counter
    finally:
        counter.close()


def test_a_count_waits_while_a_request_is_in_flight_and_runs_once_idle() -> None:
    with running(settle=0.05, max_delay=10) as (activity, count, counter):
        activity.begin()  # the agent's GET arrived
        done = counter.submit("s1", ["h1"])
        time.sleep(0.3)
        assert count.calls == [] and not done.done(), "no count while a request is in flight"
        ended = time.monotonic()
        activity.end()
        done.result(timeout=5)
        assert [c[:2] for c in count.calls] == [("s1", ["h1"])]
        assert count.calls[0][2] - ended >= 0.05, "it waited the settle time after the request ended"


def test_a_request_arriving_within_the_settle_time_defers_the_count() -> None:
    with running(settle=0.2, max_delay=10) as (activity, _, counter):
        activity.begin()
        activity.end()  # the POST answered
        done = counter.submit("s1", ["h1"])
        time.sleep(0.05)
        activity.begin()  # its GET follows at once
        time.sleep(0.3)
        assert not done.done()
        activity.end()
        done.result(timeout=5)


def test_a_busy_worker_still_counts_after_the_maximum_delay() -> None:
    with running(settle=0.05, max_delay=0.2) as (activity, count, counter):
        activity.begin()  # never idle
        try:
            queued = time.monotonic()
            counter.submit("s1", ["h1"]).result(timeout=5)
            assert 0.15 <= count.calls[0][2] - queued < 3
        finally:
            activity.end()


def test_jobs_of_one_session_queued_together_are_one_count_and_failures_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    with running(settle=0.05, max_delay=10, count=Recorder(fail="bad")) as (activity, count, counter):
        activity.begin()
        futures = [counter.submit("s1", ["h1", "h2"]), counter.submit("bad", ["x"]), counter.submit("s1", ["h2", "h3"])]
        assert counter.pending == 3
        with caplog.at_level(logging.ERROR, logger="ctxd"):
            activity.end()
            for f in futures:
                assert f.result(timeout=5) is None  # done whatever the outcome
        assert sorted(c[:2] for c in count.calls) == [("bad", ["x"]), ("s1", ["h1", "h2", "h3"])]
        assert "counting the tokens of 1 payload(s) of session bad failed" in caplog.text
        assert counter.pending == 0


def test_close_counts_what_is_queued_and_later_jobs_run_in_the_caller() -> None:
    activity = Activity()
    count = Recorder()
    counter = PayloadCounter(count, activity, settle=0.05, max_delay=60)
    activity.begin()  # busy: the job would wait a minute
    queued = counter.submit("s1", ["h1"])
    began = time.monotonic()
    counter.close()
    assert queued.done() and time.monotonic() - began < 10, "counted at shutdown without waiting for idle"
    late = counter.submit("s2", ["h2"])
    assert late.done() and [c[0] for c in count.calls] == ["s1", "s2"]
    assert count.thread_ids[1] == threading.get_native_id()
    activity.end()
