"""Recall on a real trace (issue 14 item 3, "Done when: recall finds evicted content on a
real trace"), on SQLite and PostgreSQL, through HTTP (TestClient).

The trace is replayed into a session of a profile with a small budget (qwen3 with lower
watermarks) and ``recall = true``. At every model call the served request is taken; when
the real agent's NEXT action names an identifier (a name with ``_``, e.g.
``_ensure_dataset``) that the served request no longer holds but an earlier tool output
did (it was folded into the progress record or cut to head + tail by select), the search
for it must find that tool output: the hit names its seq, and the line range it gives,
read back through ``GET .../handles/{h}?lines=a:b``, contains the identifier. Every
request carries the ``recall`` tool last among the tools, is counted exactly
(apply_chat_template on the served body) and keeps its root byte-stable across calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.domain.recall import RECALL_TOOL
from ctxd_tools import miniswe
from tests.e2e.replay_checks import replay_and_check
from tests.recall_profiles import qwen3_variant, recall_app
from tests.traces import TRACE_FILES

TRACE_NAME = "pydicom__pydicom-901__chat.traj.json"
IDENTIFIER = re.compile(r"\b[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]{3,}\b")

PROFILES = (qwen3_variant("qwen3-with-recall", recall=True)
            + qwen3_variant("qwen3-recall", recall=True, t_hi=4096, t_lo=1600, record_tokens=800,
                            item_cap_tokens=1024))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def recall_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    yield from recall_app(request, tmp_path_factory, PROFILES)


def _action_text(event: dict) -> str:
    return " ".join([event.get("content") or ""] + [str(c["arguments"]) for c in event.get("tool_calls") or []])


def test_recall_finds_what_the_next_action_needs_after_eviction(recall_client: TestClient, qwen3_ids) -> None:
    client = recall_client
    trace = next(f for f in TRACE_FILES if f.name == TRACE_NAME)
    traj = miniswe.load_trajectory(trace)
    r = client.post("/v1/sessions", json=miniswe.session_create_body(traj, profile="qwen3-recall"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    outputs: dict[int, str] = {}  # seq -> payload of every tool result posted so far
    served: str | None = None
    root: tuple | None = None
    checked: list[tuple[str, int, str, str]] = []  # (identifier, seq found, lines, its representation)
    shown: dict[int, str] = {}  # seq -> representation in the last served request
    folded_or_cut = 0
    for step in miniswe.replay_plan(traj):
        if isinstance(step, miniswe.ModelCall):
            got = client.get(f"/v1/sessions/{sid}/request")
            assert got.status_code == 200, got.text
            body, manifest = got.json()["request"], got.json()["manifest"]
            assert body["tools"][-1] == RECALL_TOOL and len(body["tools"]) == 2
            assert manifest["tokens"]["total"] == len(qwen3_ids(body)) <= manifest["budget"]["input_limit"]
            if root is not None:
                assert (body["messages"][0], body["tools"]) == root, "the root (system + tools) stays byte-stable"
            root = (body["messages"][0], body["tools"])
            folded_or_cut = max(folded_or_cut, sum(i["representation"] in ("folded", "head_tail", "elided")
                                                   for i in [*manifest["items"], *manifest["elided"]]
                                                   if i["kind"] == "tool_result"))
            served = json.dumps(body["messages"], ensure_ascii=False)
            shown = {i["seq"]: i["representation"] for i in [*manifest["items"], *manifest["elided"]]}
            shown |= {s: "folded" for r in manifest.get("ranges", ()) for s in range(r["seq_from"], r["seq_to"] + 1)}
            continue
        events = list(step.events)
        action = events[0] if events[0]["kind"] == "message" and events[0]["role"] == "assistant" else None
        if served is not None and action is not None:
            for ident in dict.fromkeys(IDENTIFIER.findall(_action_text(action))):
                held = {seq for seq, text in outputs.items() if ident in text}
                if ident in served or not held:
                    continue
                # the next action needs it, the request lost it: recall must find where it was
                found = client.get(f"/v1/sessions/{sid}/search", params={"q": ident, "limit": 100, "context": 1})
                assert found.status_code == 200, found.text
                hits = {h["seq"]: h for h in found.json()["hits"]}
                assert held <= set(hits), (ident, held, sorted(hits))
                seq = max(held)
                assert hits[seq]["kind"] == "tool_result" and hits[seq]["rank"] in ("word", "exact")
                match = next(m for m in hits[seq]["matches"] if m["field"] == "payload")
                sliced = client.get(f"/v1/sessions/{sid}/handles/{match['handle']}", params={"lines": match["lines"]})
                assert sliced.status_code == 200 and ident in sliced.text, (ident, match)
                assert sliced.text == "".join(outputs[seq].splitlines(keepends=True)[
                    match["start_line"] - 1:match["end_line"]])
                assert shown.get(seq) != "verbatim", (ident, seq)
                checked.append((ident, seq, match["lines"], shown.get(seq, "?")))
        r = client.post(f"/v1/sessions/{sid}/events", json={"events": events})
        assert r.status_code == 200, r.text
        for event, result in zip(events, r.json()["results"]):
            if event["kind"] == "tool_result":
                outputs[result["seq"]] = event["payload"]
    assert folded_or_cut > 0, "the small budget must fold or cut tool outputs"
    assert checked, "the trace must have an action needing an identifier the request lost"
    kinds = {r: sum(c[3] == r for c in checked) for r in sorted({c[3] for c in checked})}
    print(f"recall checks: {len(checked)} {kinds}; first: {checked[:3]}")


QUICK = [p for p in TRACE_FILES if p.name == "pvlib__pvlib-python-1072__reasoner.traj.json"]


@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.name)
def test_quick_replay_with_the_recall_tool_exact(recall_client: TestClient, qwen3_ids, path: Path) -> None:
    """DESIGN.md section 6 on a trace with the recall tool declared (qwen3's settings)."""
    stats = replay_and_check(recall_client, path, profile="qwen3-with-recall", template_ids=qwen3_ids)
    assert stats.requests == 16


@pytest.mark.slow
def test_replay_all_traces_with_the_recall_tool_exact(recall_client: TestClient, qwen3_ids) -> None:
    """The all-traces exactness invariant with the recall tool in every request (SQLite;
    PostgreSQL adds nothing to counting: its run of this module's fixture is skipped)."""
    if recall_client.app.state.ctxd.engine.dialect.name != "sqlite":  # type: ignore[attr-defined]
        pytest.skip("counting does not depend on the database: the SQLite run covers it")
    requests = sum(replay_and_check(recall_client, p, profile="qwen3-with-recall", template_ids=qwen3_ids).requests
                   for p in TRACE_FILES)
    assert requests == 2498
