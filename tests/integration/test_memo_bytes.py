"""The assembly memo's byte estimate against what it really holds (issue 9 item 7: every
cache bounded in bytes). A real trace is replayed in process (the bench harness: POSTs,
then the GET of each model call) under tracemalloc; what the session's memo entry holds is
what is freed when it is dropped. ``CTXD_MEMO_BYTES`` bounds the estimate, so the estimate
must not be below the real size (else the memo would hold more than configured), nor far
above it (else it would hold far fewer sessions than it could).

The two runs are the extremes of the measurement over all 32 traces behind the constants
in app/services/memo.py: the trace whose memo is largest for its estimate and the one
whose memo is smallest."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from app.tokenizers.loading import MeterRegistry
from app.tokenizers.segments import LocalLRUCache
from ctxd_tools.bench import harness
from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body
from tests.traces import TRACES_DIR


@pytest.mark.parametrize("trace, profile", [("sqlfluff__sqlfluff-1763__chat", "qwen3"),
                                            ("pylint-dev__astroid-1978__chat", "qwen3-128k")])
def test_the_memo_estimate_covers_what_it_holds(trace: str, profile: str) -> None:
    path = TRACES_DIR / f"{trace}.traj.json"
    if not path.exists():
        pytest.skip(f"trace {path} not found")
    traj = load_trajectory(path)
    with harness() as h:
        meters = MeterRegistry(LocalLRUCache(64 * 1024 * 1024))
        sid = h.create_session(session_create_body(traj, profile=profile))
        memo = h.memo_for(meters)
        tracemalloc.start()
        try:
            gets = 0
            for step in replay_plan(traj):
                if isinstance(step, PostEvents):
                    h.post_events(sid, step.events, meters=meters)
                elif isinstance(step, ModelCall):
                    h.timed_get(meters, sid)
                    gets += 1
            estimate = memo.bytes
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            memo.forget(sid)
            gc.collect()
            held = before - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert gets > 50 and len(memo) == 0
    ratio = estimate / held
    assert 1.0 <= ratio <= 2.5, (f"{trace} ({profile}): the memo estimates {estimate / 1e6:.2f} MB for "
                                 f"{held / 1e6:.2f} MB held ({ratio:.2f}x); re-measure EVENT_DERIVED_BYTES "
                                 "and MANIFEST_HELD_FACTOR (app/services/memo.py)")
