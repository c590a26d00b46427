"""Issue 16 on real traces: a replayed mini-swe-agent trajectory with a plan updated along
the way and a child session (a sub-agent exploring, then concluding) keeps every
DESIGN.md section 6 invariant (tests/e2e/replay_checks.py: budget, pairing, constraints,
every event accounted, handles, exact token ids == apply_chat_template on the served
body); the child's own events never enter the parent's requests; and the token and cache
effect of a plan update appended to the leaf, against the same plan rewritten in the
trunk, measured on the served requests (printed as a table; README "Plans, sub-agents and
retrieved documents")."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.e2e.replay_checks import replay_and_check
from tests.traces import TRACE_FILES

QUICK = next(p for p in TRACE_FILES if p.name == "pvlib__pvlib-python-1072__reasoner.traj.json")
PASSES = next(p for p in TRACE_FILES if p.name == "pydicom__pydicom-901__chat.traj.json")
CHILD_MARK = "CHILD-ONLY-7f3a"
BLOCK = 16  # vLLM's cache block (the qwen3 profile's)


def plan_text(version: int) -> str:
    steps = ["Reproduce the failure with a minimal script", "Locate the function that computes it",
             "Patch it without changing the public API", "Run the module's tests", "Check edge cases (empty input)"]
    return "\n".join(f"{i + 1}. [{'x' if i < version - 1 else ' '}] {s}" for i, s in enumerate(steps))


@dataclass
class Scenario:
    """Posts a plan version every ``every`` calls, creates a child at call ``child_at``
    (which explores: a call and a result carrying CHILD_MARK) and posts its conclusion at
    ``conclude_at``; checks the parent never shows the child's own events."""

    every: int = 3
    child_at: int = 2
    conclude_at: int = 5
    versions: int = 0
    child: str | None = None
    plan_calls: list[int] = field(default_factory=list)
    responses: dict[int, dict[str, Any]] = field(default_factory=dict)

    def before_get(self, client: TestClient, sid: str, index: int) -> None:
        events: list[dict[str, Any]] = []
        if index % self.every == 0:
            self.versions += 1
            self.plan_calls.append(index)
            events.append({"event_id": f"plan-{self.versions}", "kind": "plan", "text": plan_text(self.versions)})
        if events:
            assert client.post(f"/v1/sessions/{sid}/events", json={"events": events}).status_code == 200
        if index == self.child_at:
            r = client.post(f"/v1/sessions/{sid}/children", json={"goal": "Find every caller of the patched function."})
            assert r.status_code == 201, r.text
            self.child = r.json()["id"]
            explore = [{"event_id": "c-a", "kind": "message", "role": "assistant", "content": f"{CHILD_MARK} grep",
                        "tool_calls": [{"call_id": "c1", "name": "bash",
                                        "arguments": json.dumps({"command": "grep -rn solar ."})}]},
                       {"event_id": "c-r", "kind": "tool_result", "call_id": "c1", "payload": f"{CHILD_MARK}\n" * 400,
                        "exit_code": 0}]
            assert client.post(f"/v1/sessions/{self.child}/events", json={"events": explore}).status_code == 200
            child_body = client.get(f"/v1/sessions/{self.child}/request").json()["request"]
            parent = client.get(f"/v1/sessions/{sid}").json()
            for c in parent["contract"]["constraints"]:
                assert c["text"] in child_body["messages"][1]["content"], "the child keeps the constraints verbatim"
        if index == self.conclude_at:
            assert self.child is not None
            assert client.post(f"/v1/sessions/{self.child}/events", json={"events": [
                {"event_id": "c-done", "kind": "conclusion", "text": "Two callers: irradiance.py and modelchain.py."}]}
            ).status_code == 200

    def after_get(self, sid: str, index: int, response: dict[str, Any]) -> None:
        text = json.dumps(response)
        assert CHILD_MARK not in text, f"call {index}: the child's own events entered the parent's request"
        self.responses[index] = response


def test_replay_with_a_plan_and_a_child_keeps_every_invariant(sqlite_client: TestClient, qwen3_ids) -> None:
    scenario = Scenario()
    stats = replay_and_check(sqlite_client, QUICK, template_ids=qwen3_ids, before_get=scenario.before_get,
                             after_get=scenario.after_get)
    assert stats.requests == 16 and scenario.versions >= 5
    last = scenario.responses[max(scenario.responses)]
    contents = [m["content"] or "" for m in last["request"]["messages"]]
    assert any(c.startswith(f"## Plan (version {scenario.versions})") for c in contents)
    assert sum(c.startswith("## Conclusion of sub-agent session") for c in contents) == 1, "one observation"
    kinds = [i["kind"] for i in last["manifest"]["items"]]
    assert kinds.count("child_conclusion") == 1 and kinds.count("plan") == scenario.versions
    # a plan update never broke the prefix: at most the generation prompt was replaced
    assert stats.divergences == stats.appended_divergences


@pytest.mark.slow
def test_replay_with_passes_folds_the_plan_and_keeps_every_invariant(sqlite_client: TestClient, qwen3_ids) -> None:
    """A longer trace whose select passes fold plan versions into the record."""
    scenario = Scenario(every=4, child_at=3, conclude_at=9)
    stats = replay_and_check(sqlite_client, PASSES, template_ids=qwen3_ids, before_get=scenario.before_get,
                             after_get=scenario.after_get)
    folded = [r for r in scenario.responses.values() if "## Plan (version" in r["request"]["messages"][1]["content"]]
    assert folded, "a pass folded a plan version into the record"
    assert stats.requests > 0


# --------------------------------------------------------------------------- cache effect


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _in_trunk(body: dict[str, Any]) -> dict[str, Any]:
    """The same request with the plan rewritten in the trunk: the current plan version
    appended to the trunk's text (the user message after the system one), every plan
    version taken out of the leaf."""
    out = copy.deepcopy(body)
    messages = out["messages"]
    plans = [m for m in messages[2:] if m["role"] == "user" and (m["content"] or "").startswith("## Plan (version")]
    kept = [m for m in messages[2:] if not any(m is p for p in plans)]
    if plans:
        messages[1]["content"] += "\n\n" + plans[-1]["content"]
    out["messages"] = messages[:2] + kept
    return out


def test_plan_update_cache_effect_leaf_vs_trunk(sqlite_client: TestClient, qwen3_ids) -> None:
    """Measure, on every request right after a plan update: tokens, the tokens the next
    request shares with the previous one (common prefix), the cached tokens vLLM would serve
    (full 16-token blocks of it) and where the prefix breaks; the served layout (plan
    appended to the leaf) against the same requests with the plan rewritten in the trunk."""
    scenario = Scenario(every=2, child_at=99, conclude_at=99)
    replay_and_check(sqlite_client, QUICK, before_get=scenario.before_get, after_get=scenario.after_get)
    calls = sorted(scenario.responses)
    rows = []
    totals = {"leaf": [0, 0], "trunk": [0, 0]}
    for prev, cur in itertools.pairwise(calls):
        if cur not in scenario.plan_calls or scenario.plan_calls.index(cur) == 0:
            continue
        row: dict[str, Any] = {"call": cur}
        for name, view in (("leaf", lambda b: b), ("trunk", _in_trunk)):
            a, b = qwen3_ids(view(scenario.responses[prev]["request"])), qwen3_ids(view(scenario.responses[cur]["request"]))
            common = _common(a, b)
            cached = common // BLOCK * BLOCK
            row[name] = (len(b), common, cached, common)
            totals[name][0] += len(b)
            totals[name][1] += cached
            if name == "leaf":
                served = scenario.responses[cur]["manifest"]
                assert served["tokens"]["total"] == len(b)
                assert served["cache"]["predicted_cached_tokens"] == cached, "the manifest predicts what we measure"
        rows.append(row)
    print("\nplan update: appended to the leaf (served) vs rewritten in the trunk, pvlib-1072, qwen3, vLLM blocks of 16")
    print(f"{'call':>4} | {'leaf tokens':>11} {'cached':>7} {'break at':>8} | {'trunk tokens':>12} {'cached':>7} "
          f"{'break at':>8}")
    for row in rows:
        lt, _, lc, lb = row["leaf"]
        tt, _, tc, tb = row["trunk"]
        print(f"{row['call']:>4} | {lt:>11} {lc:>7} {lb:>8} | {tt:>12} {tc:>7} {tb:>8}")
    (lt, lc), (tt, tc) = totals["leaf"], totals["trunk"]
    print(f" sum | {lt:>11} {lc:>7} {'':>8} | {tt:>12} {tc:>7}")
    print(f"uncached tokens: leaf {lt - lc}, trunk {tt - tc} ({(tt - tc) / max(1, lt - lc):.1f}x)")
    assert rows
    assert lc > tc and lt - lc < tt - tc, "appending the plan keeps more of the prefix cached"
    for row in rows:  # the leaf layout keeps everything before the plan; the trunk one breaks inside the trunk
        assert row["leaf"][3] > row["trunk"][3]


def test_eval_select_scratchpad_reports_plans_children_and_documents(tmp_path) -> None:
    """``ctxd eval --policies select-scratchpad``: per call, the plan versions, documents and
    conclusions the request holds (and their tokens); the report's table sums them."""
    from ctxd_tools.eval import measures
    from ctxd_tools.eval.policies import CHILD_AT, CONCLUDE_AT, DOCUMENT_EVERY, PLAN_EVERY
    from ctxd_tools.eval.replay import make_context, replay_trace
    from ctxd_tools.eval.report import summarize

    ctx = make_context("qwen3", tmp_path)
    result = replay_trace(QUICK, "select-scratchpad", ctx)
    calls = result.calls
    assert len(calls) == 16 and not any(c.error for c in calls)
    by_call = {c.call: c for c in calls}
    assert by_call[PLAN_EVERY].plans == 1 and by_call[2 * PLAN_EVERY].plans == 2, "one version each PLAN_EVERY calls"
    assert all(c.plan_tokens > 0 for c in calls if c.plans)
    assert by_call[1].documents == 1 and all(c.documents <= 1 for c in calls), "one key: each replaces the last"
    assert by_call[CHILD_AT].children == 1 and by_call[CONCLUDE_AT - 1].conclusions == 0
    assert all(c.conclusions == 1 and c.conclusion_tokens > 0 for c in calls if c.call >= CONCLUDE_AT)
    assert DOCUMENT_EVERY > 1
    total = summarize(calls, measures.Prices(uncached=3.0, cached=0.3), None)["scratchpad"]
    assert total["plans"] == sum(c.plans for c in calls) and total["children"] == 1
