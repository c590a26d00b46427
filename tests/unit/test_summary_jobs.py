"""The registry of summarizer jobs in flight (app/services/summarizer.py ``SummaryJobs``,
issue 10 item 6): a pass's GET waits for the job of exactly its fold, at most its bound; a
job that ends, fails or plans another fold always releases it.

Fault kinds from peers' threads: microsoft/vscode#320273 (a render waited on an in-flight
background summary that had nothing to anchor, and stalled): a job that plans no pass or
another fold releases its waiter at once; The-AI-Republic/workx#206 (a bounded wait on a
background summary must say whether it finished in time): ``Waited.ran_out``;
NorthlandPositronics/Cogtrix#1129 (a hung summarizer call blocks its waiters): the wait is
bounded whatever the job does."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from app.services.summarizer import CandidateStore, SummarizerConfig, SummaryJobs, Waited, summarize_pass_after_post

FOLD = (1, (1, 2, 3))


def waiter(jobs: SummaryJobs, fold: Any = FOLD, bound: float = 5.0) -> tuple[threading.Thread, list[Waited | None]]:
    out: list[Waited | None] = []
    thread = threading.Thread(target=lambda: out.append(jobs.wait("s", fold, bound)))
    thread.start()
    return thread, out


def test_nothing_in_flight_or_a_zero_bound_never_waits() -> None:
    jobs = SummaryJobs()
    assert jobs.wait("s", FOLD, 5) is None
    assert jobs.start("s") and not jobs.start("s"), "one job per session"
    began = time.monotonic()
    assert jobs.wait("s", FOLD, 0) is None and time.monotonic() - began < 0.05
    jobs.planned("s", (1, (1, 2)))
    assert not jobs.in_flight("s", FOLD) and jobs.wait("s", FOLD, 5) is None, "a job of another fold"
    assert jobs.wait("t", FOLD, 5) is None, "another session"


def test_the_job_of_the_fold_ending_releases_the_waiter() -> None:
    jobs = SummaryJobs()
    jobs.start("s")
    thread, out = waiter(jobs)
    time.sleep(0.1)
    jobs.planned("s", FOLD)  # the job planned the waiter's fold: it keeps waiting
    time.sleep(0.2)
    assert thread.is_alive()
    jobs.finish("s")
    thread.join(2)
    assert not thread.is_alive() and out[0] is not None and not out[0].ran_out and 0.25 <= out[0].seconds < 2


def test_a_job_planning_another_fold_releases_the_waiter() -> None:
    jobs = SummaryJobs()
    jobs.start("s")
    thread, out = waiter(jobs)
    time.sleep(0.1)
    jobs.planned("s", (2, (1, 2, 3)))  # another contract version
    thread.join(2)
    assert out[0] is not None and not out[0].ran_out and out[0].seconds < 1
    jobs.finish("s")


def test_the_bound_passes() -> None:
    jobs = SummaryJobs()
    jobs.start("s")
    jobs.planned("s", FOLD)
    began = time.monotonic()
    got = jobs.wait("s", FOLD, 0.3)
    assert got is not None and got.ran_out and 0.3 <= got.seconds < 1 and time.monotonic() - began < 1
    assert jobs.in_flight("s", FOLD), "the job itself goes on"


def test_the_hook_releases_its_job_however_it_ends() -> None:
    """A plan that raises, or no pass due: the hook never raises, and its waiter returns
    when it ends (the session's job is gone afterwards)."""
    jobs, store = SummaryJobs(), CandidateStore()
    config = SummarizerConfig(url="http://127.0.0.1:9/v1/chat/completions", timeout_seconds=0.5)

    def boom() -> None:
        time.sleep(0.3)
        raise RuntimeError("planning failed")

    def nothing() -> None:
        time.sleep(0.3)

    with httpx.Client() as client:
        for plan in (boom, nothing):
            jobs.start("other")  # another session's job is untouched
            results: list[Any] = []

            def run(plan: Any, results: list[Any]) -> None:
                results.append(summarize_pass_after_post(plan, client, config, store, "s", jobs))

            hook = threading.Thread(target=run, args=(plan, results))
            hook.start()
            while not jobs.in_flight("s", FOLD):
                time.sleep(0.01)
            got = jobs.wait("s", FOLD, 5)
            hook.join(2)
            assert got is not None and not got.ran_out and 0.1 < got.seconds < 2
            assert results == [None] and not jobs.in_flight("s", FOLD) and jobs.in_flight("other", FOLD)
            jobs.finish("other")
        # a job in flight for the session: the next POST's hook is skipped, the job stays
        jobs.start("s")
        assert summarize_pass_after_post(lambda: None, client, config, store, "s", jobs) is None
        assert jobs.in_flight("s", FOLD)


def test_candidate_store_is_bounded_in_bytes_by_its_records() -> None:
    """Before: an OrderedDict of 1024 sessions whatever their records' size. After: a ByteLRU
    of ``CTXD_SUMMARY_OUTCOME_BYTES`` sized by each outcome's record JSON and findings: a
    second large outcome drops the least recently used session, and an outcome larger than
    the bound is not kept (its pass uses the deterministic record)."""
    from app.domain.compaction.evidence import Finding
    from app.services.summarizer import SummaryOutcome, outcome_size

    def outcome(chars: int, findings: int = 0) -> SummaryOutcome:
        rejections = ((Finding("lost", "constraint:c1", "d" * 10),) * findings,) if findings else ()
        return SummaryOutcome({"goal": "g" * chars}, "model", 1, rejections, basis=(1, (1, 2), 3), planner_version=1)

    one = outcome(600)
    assert outcome_size("s1", one) > 600 and outcome_size("s1", outcome(600, findings=3)) > outcome_size("s1", one)
    store = CandidateStore(max_bytes=2000)
    store.put("s1", one)
    store.put("s2", outcome(600))
    assert store.get("s1") is one  # s2 is now the least recently used
    store.put("s3", outcome(600))
    assert store.get("s2") is None and store.get("s1") is one and store.get("s3") is not None
    store.put("s4", outcome(5000))
    assert store.get("s4") is None and store.source("s4") is None
    store.put("s1", outcome(5000))  # a new outcome too large for the bound drops the older one
    assert store.get("s1") is None
