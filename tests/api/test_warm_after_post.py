"""The warm-up after a POST (app/services/requests.py ``warm_after_post``, ``PlanWarmer``):
the next GET's first steps taken ahead of it, its new messages' tokenizing started, and no
result of any GET changed by it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services import requests as request_service
from app.services.requests import PlanWarmer, warm_after_post
from app.settings import Settings
from app.tokenizers.hf import HFChatMeter
from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body
from tests.api.test_api import assistant, new_session, post, result
from tests.api.test_request_path import TINY, TRACE


def _settings(tmp: Path) -> Settings:
    tmp.mkdir(parents=True, exist_ok=True)
    profiles = tmp / "profiles.toml"
    profiles.write_text(TINY)
    return Settings(data_dir=tmp / "data", database_url="", profiles_path=profiles)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(_settings(tmp_path)), raise_server_exceptions=False) as c:
        yield c


def _normalized(value: Any, sid: str) -> Any:
    """``value`` without what names the session (its id, the openai body's prompt_cache_key
    derived from it, and so that body's digest)."""
    if isinstance(value, dict):
        if value.get("format") == "openai":
            value = {k: v for k, v in value.items() if k != "request_sha256"}
        return {k: _normalized(v, sid) for k, v in value.items() if k not in ("session_id", "prompt_cache_key")}
    if isinstance(value, list):
        return [_normalized(v, sid) for v in value]
    if isinstance(value, str):
        return value.replace(sid, "<sid>")
    return value


def _replay(client: TestClient, *, settle: bool) -> list[Any]:
    """Every GET's answer (both formats) over the trace, normalized; ``settle``: wait for
    the warm-up after each POST before the next request (else they race, as in service)."""
    traj = load_trajectory(TRACE)
    sid = client.post("/v1/sessions", json=session_create_body(traj, profile="tiny")).json()["id"]
    warmer = client.app.state.ctxd.warmer  # type: ignore[attr-defined]
    answers = []
    for step in replay_plan(traj):
        if isinstance(step, PostEvents):
            assert post(client, sid, *step.events).status_code == 200
            if settle and warmer is not None:
                assert warmer.wait(30)
        elif isinstance(step, ModelCall):
            for fmt in ("openai", "anthropic"):
                r = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
                assert r.status_code == 200, r.text
                answers.append(_normalized(r.json(), sid))
    return answers


@pytest.mark.skipif(not TRACE.is_file(), reason=f"trace {TRACE.name} not found")
def test_gets_after_warm_ups_equal_gets_without_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real trace under a small window (evictions, folds, elided outputs): every body and
    manifest, in both formats, is the same with warm-ups (settled before each GET, and
    racing it) as without any; and the warm-ups did run."""
    ran: list[bool] = []
    real = request_service.warm_after_post

    def counted(*args: Any, **kwargs: Any) -> bool:
        ran.append(real(*args, **kwargs))
        return ran[-1]

    monkeypatch.setattr(request_service, "warm_after_post", counted)
    runs = {}
    for name, settle, warm in (("without", False, False), ("settled", True, True), ("racing", False, True)):
        with TestClient(create_app(_settings(tmp_path / name)), raise_server_exceptions=False) as c:
            if not warm:
                c.app.state.ctxd.warmer = None  # type: ignore[attr-defined]
            runs[name] = _replay(c, settle=settle)
    assert len(runs["without"]) > 40
    assert runs["settled"] == runs["without"]
    assert runs["racing"] == runs["without"]
    assert sum(ran) > 20, "the warm-ups ran (after every POST that follows a GET of the worker)"


def test_the_get_after_a_warm_up_finds_its_new_messages_tokenizing(client: TestClient,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up builds the new turn group's messages and hands them to the meter's
    prefetch (without the GIL hand-off a GET makes); the GET then has nothing new to
    prefetch, and its count is the same as without (the exactness suite checks counts)."""
    calls: list[tuple[int, bool]] = []
    real = HFChatMeter.prefetch

    def recorded(self: HFChatMeter, messages: Any, *, handoff: bool = True) -> None:
        calls.append((len(messages), handoff))
        real(self, messages, handoff=handoff)

    monkeypatch.setattr(HFChatMeter, "prefetch", recorded)
    sid = new_session(client, profile="tiny")
    assert post(client, sid, {"event_id": "u", "kind": "message", "role": "user", "content": "Fix it."}).status_code == 200
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
    warmer = client.app.state.ctxd.warmer  # type: ignore[attr-defined]
    assert warmer.wait(30)
    calls.clear()
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", "def parse(text):\n    return text.split()\n" * 20)
                ).status_code == 200
    assert warmer.wait(30)
    assert calls == [(2, False)], "the warm-up prefetched the assistant message and its tool output"
    calls.clear()
    r = client.get(f"/v1/sessions/{sid}/request")
    assert r.status_code == 200
    assert calls == [], "the GET found the group's messages built"
    assert r.json()["request"]["messages"][-1]["role"] == "tool"


def test_warm_up_needs_what_the_worker_holds(client: TestClient) -> None:
    """No warm-up before the worker's first GET of the session (its profile unknown here),
    for events the memo does not hold, or while a plan of the session holds its lock."""
    state = client.app.state.ctxd  # type: ignore[attr-defined]
    profiles, meters, memo = state.profiles, state.meters, state.memo
    sid = new_session(client, profile="tiny")
    assert post(client, sid, {"event_id": "u", "kind": "message", "role": "user", "content": "Fix it."}).status_code == 200
    assert not warm_after_post(profiles, meters, sid, 1, memo=memo), "no GET yet: the profile is not known here"
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200
    assert warm_after_post(profiles, meters, sid, 1, memo=memo)
    assert not warm_after_post(profiles, meters, sid, 2, memo=memo), "the memo does not hold seq 2"
    with memo.plan_lock(sid):
        assert not warm_after_post(profiles, meters, sid, 1, memo=memo), "a plan of the session is running"
    held = len(memo)
    assert warm_after_post(profiles, meters, "no-such-session", 1, memo=memo) is False
    assert len(memo) == held, "a session the memo does not hold is not added to it"


def test_plan_warmer_drops_a_job_while_one_runs_and_survives_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    warmer = PlanWarmer()
    gate = threading.Event()
    done: list[str] = []
    try:
        assert warmer.submit(gate.wait)
        assert not warmer.submit(lambda: done.append("dropped")), "a second job while one runs is dropped"
        gate.set()
        assert warmer.wait(10)

        def fail() -> None:
            raise RuntimeError("boom")

        with caplog.at_level(logging.WARNING, logger="ctxd"):
            assert warmer.submit(fail)
            assert warmer.wait(10)
        assert any("warm-up after a POST failed" in r.getMessage() for r in caplog.records)
        assert warmer.submit(lambda: done.append("ran"))
        assert warmer.wait(10)
        assert done == ["ran"]
    finally:
        warmer.close()
