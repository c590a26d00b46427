"""A GET planned with the session's memo is the GET planned from nothing (issue 9 item 1:
memos are explicit values; the speed work of a warm GET must never change what it serves).

Every GET of a real trace with file writes (tombstones, deferred tombstones, notices and
passes happen on it) runs through the service as a server runs it, and each plan is made
a second time with an empty leaf memo and no remembered previous request: the body bytes
and the whole manifest (items with their invalidation fields, elided items, ranges, the
invalidation report, the cache report) must be equal. The fault kind of incremental
caches that drift from a full rebuild (langchain's summary-buffer memory, llama_index's
chat-store caches: stale derived state served after an update)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.domain.assembly import views as assembly
from app.domain.session_memo import SessionMemo
from app.services import requests as request_service
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.segments import LocalLRUCache
from ctxd_tools.bench import harness
from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body

TRACES = Path("/work/shared/traces/miniswe")


@pytest.mark.parametrize("trace, profile", [("pylint-dev__astroid-1333__chat", "qwen3"),
                                            ("pylint-dev__astroid-1333__chat", "qwen3-128k")])
def test_every_get_plans_the_same_with_the_memo_as_from_nothing(trace: str, profile: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    real = request_service.plan_request
    compared: list[int] = []
    tombstones = notices = 0

    def twice(*args: Any, **kwargs: Any) -> Any:
        warm = real(*args, **kwargs)
        cold = real(*args, **{**kwargs, "memo": SessionMemo(), "remembered": None})
        assert warm.body_bytes == cold.body_bytes, f"GET {len(compared) + 1}: the bodies differ"
        assert warm.manifest.to_json() == cold.manifest.to_json(), f"GET {len(compared) + 1}: the manifests differ"
        assert warm.layout == cold.layout and warm.previous == cold.previous
        compared.append(warm.manifest.tokens.total)
        nonlocal tombstones, notices
        tombstones += warm.manifest.invalidation.tombstones
        notices += warm.manifest.invalidation.noticed
        return warm

    monkeypatch.setattr(request_service, "plan_request", twice)
    resumed: list[bool] = []  # assemble_window's items loop resumed from the last GET's (or not)
    real_matches = assembly._ItemsLoop.matches

    def matches(self: Any, *args: Any) -> bool:
        resumed.append(real_matches(self, *args))
        return resumed[-1]

    monkeypatch.setattr(assembly._ItemsLoop, "matches", matches)
    traj = load_trajectory(TRACES / f"{trace}.traj.json")
    with harness() as h:
        meters = MeterRegistry(LocalLRUCache(256 * 1024 * 1024))
        sid = h.create_session(session_create_body(traj, profile=profile))
        for step in replay_plan(traj):
            if isinstance(step, PostEvents):
                h.post_events(sid, step.events, meters=meters)
            elif isinstance(step, ModelCall):
                h.timed_get(meters, sid)
    assert len(compared) == sum(isinstance(s, ModelCall) for s in replay_plan(traj))
    assert tombstones > 0, "the trace exercises in-place tombstones"
    assert sum(resumed) > len(compared) // 2, "most GETs resumed the items loop from the last GET's"
    assert not all(resumed), "and some could not (an observation's state or choice changed)"
    if profile == "qwen3":  # passes every ~14 calls: tombstones due near one wait, a notice showing meanwhile
        assert notices > 0
