"""The work after a POST that appended events, scheduled once its unit of work committed:
the warm-up of the session's next plan, the optional model-written record of its next
compaction pass, and the token counts of its new tool outputs, in that order, each run
after the response (the route hands its ``BackgroundTasks.add_task`` as ``schedule``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from app.services import requests as request_service
from app.services import summarizer as summarizer_service
from app.services.app_state import AppState
from app.services.requests import PlanWarmer

#: ``BackgroundTasks.add_task``: run ``func(*args, **kwargs)`` after the response
Schedule = Callable[..., None]


def schedule_after_ingest(state: AppState, schedule: Schedule, session_id: str, *, created: bool,
                          last_seq: int | None, new_tool_outputs: Sequence[str]) -> None:
    """Schedule the work after a committed POST of ``session_id``: ``created`` (the batch
    appended something), ``last_seq`` (the session's last seq after it; None when the
    answer has none), ``new_tool_outputs`` (handles of the tool outputs it stored).

    The outputs' count is queued now, counted once this worker is idle
    (app/services/payload_counts.py). The next GET's first steps (its new messages'
    tokenizing above all) are taken once the response is sent, beside the agent's next
    request (app/services/requests.py ``warm_after_post``): first of the work after the
    response, so that the response itself does not wait for them. Then the optional
    model-written record of the pass the next GET would run: after the response, never
    inside a GET. Last, the wait for the count (so the summarizer's task
    does not wait for it)."""
    handles = sorted(set(new_tool_outputs))
    counted = state.payload_counter.submit(session_id, handles) if handles else None
    profiles, meters, memo = state.profiles, state.meters, state.memo
    warmer = state.warmer
    if created and warmer is not None and last_seq is not None:
        schedule(_warm, warmer, partial(request_service.warm_after_post, profiles, meters, session_id, last_seq,
                                        memo=memo))
    http = state.summarizer_http  # set with the summarizer (the lifespan)
    if state.summarizer is not None and http is not None and created and state.summary_jobs.start(session_id):
        schedule(summarizer_service.summarize_pass_after_post,
                 partial(request_service.planned_pass, state.session_factory, profiles, meters, session_id,
                         memo=memo, read_factory=state.read_factory),
                 http, state.summarizer, state.summaries, session_id, state.summary_jobs, registered=True)
    if counted is not None:
        schedule(_counted, counted)


async def _warm(warmer: PlanWarmer, job: Callable[[], Any]) -> None:
    """Hand a warm-up to its thread (on the event loop: no thread hop to hand it over)."""
    warmer.submit(job)


async def _counted(done: Future[None]) -> None:
    """The POST's last work after its response: await its outputs' count on the event loop
    (no thread held), so an in-process client (TestClient, which returns once background
    tasks are done) finds it stored."""
    await asyncio.wrap_future(done)
