"""GET /v1/sessions/{id}/record (issue 10 item 4): the progress record the next select
request's trunk holds, built from the event log up to the persisted fold point."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.api.test_api import assert_problem, new_session, post
from tests.api.test_budget_api import older_history, parallel_turn, results

FAILING = ("============================= test session starts ==============================\n"
           "tests/test_x.py F                                                        [100%]\n"
           "    def test_y():\n>       assert parse('') == []\nE       AssertionError: assert None == []\n"
           "FAILED tests/test_x.py::test_y - AssertionError: assert None == []\n"
           "============================== 1 failed in 0.12s ===============================\n")


def test_record_api_returns_what_the_trunk_holds(client: TestClient) -> None:
    sid = new_session(client)
    empty = client.get(f"/v1/sessions/{sid}/record")
    assert empty.status_code == 200
    assert empty.json()["record"]["folded"] == [] and empty.json()["record"]["fold_seq"] == 0
    test_turn = {"event_id": "t", "kind": "message", "role": "assistant", "content": "Run the test.",
                 "tool_calls": [{"call_id": "tc", "name": "bash",
                                 "arguments": json.dumps({"command": "python -m pytest tests/test_x.py::test_y"})}]}
    events = [test_turn, {"event_id": "r-t", "kind": "tool_result", "call_id": "tc", "payload": FAILING,
                          "exit_code": 1, "conditions": {"schedule": "waiter-before-return"}},
              *older_history("qwen3", groups=5), parallel_turn("newest", "n", 3), *results("qwen3", "n", [2000] * 3)]
    assert post(client, sid, *events).status_code == 200
    got = client.get(f"/v1/sessions/{sid}/request").json()
    manifest, trunk = got["manifest"], got["request"]["messages"][1]["content"]
    assert manifest["compaction"]["pass"] and manifest["compaction"]["policy"] == "select"
    r = client.get(f"/v1/sessions/{sid}/record")
    assert r.status_code == 200
    body = r.json()
    record = body["record"]
    assert body["text"] == trunk, "the record served is the one the request's trunk holds"
    assert record["fold_seq"] == manifest["compaction"]["record"]["fold_seq"] == manifest["layout"]["cut_seq"]
    assert record["contract_version"] == 1 and record["task"]["constraints"][0]["text"] in trunk
    folded = {e["seq"] for e in manifest["elided"] if e["representation"] == "folded"}
    assert folded and folded <= set(record["folded_seqs"])
    test_obs = next(o for o in record["observations"] if o["seqs"] == [1, 2])
    assert (test_obs["exit_code"], test_obs["tests"], test_obs["test_ids"]) == \
        (1, "pytest failed (1 failed)", ["tests/test_x.py::test_y"])
    assert test_obs["conditions"] == ["schedule=waiter-before-return"]
    assert "E       AssertionError: assert None == []" in test_obs["failure_lines"]
    for text in ("tests/test_x.py::test_y", "schedule=waiter-before-return", "exit 1",
                 "E       AssertionError: assert None == []"):
        assert text in trunk
    assert client.get(f"/v1/sessions/{sid}/record").json() == body, "a GET changes nothing"


def test_record_of_an_unknown_session_is_404(client: TestClient) -> None:
    assert_problem(client.get("/v1/sessions/nope/record"), 404)


def test_no_pass_before_anything_is_folded(client: TestClient) -> None:
    """A new session's first request moves the cut from 0 to its first turn group without
    folding anything: no pass (it reported passes: 1 before)."""
    sid = new_session(client)
    test_turn = {"event_id": "t", "kind": "message", "role": "assistant", "content": "Run the test.",
                 "tool_calls": [{"call_id": "tc", "name": "bash",
                                 "arguments": json.dumps({"command": "python -m pytest tests/test_x.py::test_y"})}]}
    assert post(client, sid, test_turn, {"event_id": "r-t", "kind": "tool_result", "call_id": "tc",
                                         "payload": FAILING, "exit_code": 1}).status_code == 200
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    assert manifest["layout"]["cut_seq"] == 1 and not manifest["compaction"]["pass"]
    assert manifest["compaction"]["passes"] == 0
    body = client.get(f"/v1/sessions/{sid}/record").json()
    assert body["passes"] == 0 and body["record"]["fold_seq"] == 0 and body["record"]["folded_seqs"] == []
    assert body["record"]["source"] == {"source": "deterministic"}
