"""The default request limits admit every shared trace (issue 12 item 4: "defaults admit
every real trace"): every session create body and event batch the replay posts nests within
CTXD_MAX_JSON_DEPTH and holds no non-payload string over CTXD_MAX_STRING_CHARS, with the
figures printed (``-s``)."""

from __future__ import annotations

import json

import pytest

from app.api.limits import json_shape_problem
from app.settings import Settings
from ctxd_tools.miniswe import PostEvents, load_trajectory, replay_plan, session_create_body
from tests.traces import TRACE_FILES


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def test_default_limits_admit_every_trace() -> None:
    if not TRACE_FILES:
        pytest.skip("shared traces not found")
    settings = Settings()
    deepest = bodies = 0
    for path in TRACE_FILES:
        traj = load_trajectory(path)
        sent = [session_create_body(traj)] + [{"events": list(step.events)} for step in replay_plan(traj)
                                              if isinstance(step, PostEvents)]
        for body in sent:
            body = json.loads(json.dumps(body))  # as the server parses it
            bodies += 1
            deepest = max(deepest, _depth(body))
            assert json_shape_problem(body, max_depth=settings.max_json_depth,
                                      max_string_chars=settings.max_string_chars) is None, path.name
    print(f"\n{bodies} bodies of {len(TRACE_FILES)} traces: deepest nesting {deepest} "
          f"(limit {settings.max_json_depth})")
    assert deepest < settings.max_json_depth
