"""What the user said survives every pass, and no pass runs without progress (README
"Progress record", "What the user said"; docs: the select policy), through the HTTP API:

* standing instructions injected into real shared traces (the eval's corpus, at a quarter,
  half and three quarters of the calls) are verbatim in every later request;
* the eight shared interactive sessions, posted as an SDK loop re-posts its history
  (``POST /messages`` from position 0 every turn), keep every marked instruction and every
  typed user message of at most 400 characters in every later request;
* a pinned spec of ~9.9k tokens plus 12 small tool turns: at most 2 passes in the 12 calls
  (before: a pass on 12 of 12 calls), and every call without a pass reuses the pinned part.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ctxd_tools import miniswe
from ctxd_tools.eval import measures
from ctxd_tools.eval.instructions import inject_instructions, injected_texts
from ctxd_tools.eval.interactive import GOAL, load_session
from tests.api.test_api import new_session, post
from tests.api.test_budget_api import COUNTERS, payload
from tests.traces import TRACE_FILES, TRACES_DIR

INTERACTIVE = TRACES_DIR.parent / "interactive"
SESSIONS = sorted(INTERACTIVE.glob("*.json"))


def _text(body: dict) -> str:
    return measures.request_text(body["messages"], body.get("tools"))


def _replay_injected(client: TestClient, path: Path) -> tuple[int, int, int]:
    """Post ``path`` with injected instructions; returns (pairs, kept, passes)."""
    traj = inject_instructions(miniswe.load_trajectory(path))
    injected = injected_texts(traj)
    assert len(injected) >= 2, "the injection lands at least two instructions"
    r = client.post("/v1/sessions", json=miniswe.session_create_body(traj))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    said: list[str] = []
    pairs = kept = passes = 0
    for step in miniswe.replay_plan(traj, infer_bindings=True):
        if isinstance(step, miniswe.PostEvents):
            said += [e["content"] for e in step.events if e["kind"] == "message" and e["content"] in injected]
            assert client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)}).status_code == 200
            continue
        r = client.get(f"/v1/sessions/{sid}/request")
        assert r.status_code == 200, r.text
        out = r.json()
        text = _text(out["request"])
        pairs += len(said)
        kept += sum(1 for s in said if s in text)
        missing = [s for s in said if s not in text]
        assert not missing, f"{path.name} call {step.index}: {missing} lost"
        passes += bool(out["manifest"]["compaction"]["pass"])
    return pairs, kept, passes


LONGEST = sorted(TRACE_FILES, key=lambda f: -f.stat().st_size)[:3]


@pytest.mark.parametrize("path", LONGEST, ids=lambda p: p.name.removesuffix(".traj.json"))
def test_injected_instructions_stay_verbatim_through_every_pass(client: TestClient, path: Path) -> None:
    """Three instructions injected into each of the three largest shared traces: every later
    request holds each verbatim (before: retention 0.50, a folded turn kept only its handle),
    across the passes these traces run."""
    pairs, kept, passes = _replay_injected(client, path)
    assert passes >= 2 and pairs > 0 and kept == pairs


@pytest.mark.slow
@pytest.mark.parametrize("client", ["sqlite"], indirect=True)
def test_injected_instructions_on_every_shared_trace(client: TestClient) -> None:
    """All 32 shared traces with injected instructions: retention 1.000 through the API."""
    assert TRACE_FILES, f"no shared traces in {TRACES_DIR}"
    pairs = kept = 0
    for path in TRACE_FILES:
        p, k, _ = _replay_injected(client, path)
        pairs, kept = pairs + p, kept + k
    assert pairs > 1000 and kept == pairs


def _replay_interactive(client: TestClient, path: Path) -> dict[str, int]:
    session = load_session(path)
    r = client.post("/v1/sessions", json={"contract": {"goal": GOAL, "constraints": []}, "tools": list(session.tools),
                                           "system": ""})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    counts = {"instruction_pairs": 0, "short_pairs": 0, "short_kept": 0, "calls": 0, "passes": 0}
    for index in session.calls:
        history = [dict(m) for m in session.messages[:index]]  # the SDK loop re-posts it all
        r = client.post(f"/v1/sessions/{sid}/messages", json={"messages": history, "start": 0})
        assert r.status_code == 200, r.text
        r = client.get(f"/v1/sessions/{sid}/request")
        assert r.status_code == 200, r.text
        out = r.json()
        text = _text(out["request"])
        wanted = [t for i, t in session.instructions if i < index]
        missing = [t for t in wanted if t not in text]
        assert not missing, f"{path.name} before message {index}: {missing} lost"
        shorts = [m["content"] for m in session.messages[:index] if m["role"] == "user" and not m.get("name")
                  and 0 < len(m["content"]) <= measures.SHORT_USER_CHARS]
        counts["instruction_pairs"] += len(wanted)
        counts["short_pairs"] += len(shorts)
        counts["short_kept"] += sum(1 for s in shorts if s in text)
        counts["calls"] += 1
        counts["passes"] += bool(out["manifest"]["compaction"]["pass"])
    return counts


@pytest.mark.skipif(not SESSIONS, reason=f"no interactive sessions in {INTERACTIVE}")
@pytest.mark.parametrize("client", ["sqlite"], indirect=True)
def test_interactive_sessions_keep_what_the_user_said(client: TestClient) -> None:
    """The eight shared interactive sessions through POST /messages (the whole history each
    turn) and GET /request: every marked instruction in every later request (before: 0.48),
    and every typed user message of at most 400 characters (before: 0.35)."""
    totals = {"instruction_pairs": 0, "short_pairs": 0, "short_kept": 0, "calls": 0, "passes": 0}
    for path in SESSIONS:
        for key, value in _replay_interactive(client, path).items():
            totals[key] += value
    assert totals["instruction_pairs"] > 500 and totals["passes"] > 20, totals
    assert totals["short_kept"] == totals["short_pairs"], totals


def _spec(tokens: int) -> str:
    count = COUNTERS["qwen3"]()
    parts: list[str] = ["# Product spec: the export service", ""]
    i = 0
    while count("\n".join(parts)) < tokens:
        parts += [(f"{i}. The exporter shall write batch {i} as a CSV file with {i % 17 + 3} columns, quoting every "
                  f"field that holds a comma, and report rows {i * 13 % 101} to {i * 13 % 101 + 40} in its log.")]
        i += 1
    return "\n".join(parts)


def test_a_pinned_spec_does_not_make_every_call_a_pass(client: TestClient) -> None:
    """A user message of ~9.9k tokens (a spec, kept whole: the newest user message is pinned)
    and 12 tool turns of ~300 tokens on qwen3 (T_hi 8,448, T_lo 5,632). Before: a pass ran on
    12 of 12 calls, each folding ~300 tokens, and the cached prefix fell to the root every
    call. Now at most 2 passes, each call over T_hi without one says why
    (``compaction.held``), and every call without a pass reuses the pinned part (the spec)."""
    sid = new_session(client, profile="qwen3")
    spec = _spec(9_900)
    assert post(client, sid, {"event_id": "spec", "kind": "message", "role": "user", "content": spec}).status_code == 200
    spec_tokens = COUNTERS["qwen3"]()(spec)
    assert 9_800 <= spec_tokens <= 10_100
    passes = 0
    for t in range(12):
        turn = {"event_id": f"a{t}", "kind": "message", "role": "assistant", "content": f"Step {t}.",
                "tool_calls": [{"call_id": f"c{t}", "name": "bash", "arguments": json.dumps({"command": f"cat f{t}.py"})}]}
        assert post(client, sid, turn, {"event_id": f"r{t}", "kind": "tool_result", "call_id": f"c{t}",
                                        "payload": payload("qwen3", 300, f"f{t}"), "exit_code": 0}).status_code == 200
        manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
        compaction = manifest["compaction"]
        total = manifest["tokens"]["total"]
        if compaction["pass"]:
            passes += 1
            continue
        if total > compaction["watermarks"]["t_hi"]:
            held = compaction["held"]
            assert held["tokens"] == total and held["frees"] < held["needs"] == 8_448 - 5_632
        if t > 0:
            zones = manifest["tokens"]["by_zone"]
            assert manifest["cache"]["predicted_cached_tokens"] >= zones["root"] + zones["trunk"] + spec_tokens - 16, \
                f"call {t}: the pinned spec is not reused"
    assert 1 <= passes <= 2, passes


def _anthropic_turns(n: int) -> list[dict]:
    """The task, then ``n`` tool turns of ~2,000 tokens; the user speaks inside the tool-result
    message of turn 2 (a text block after the tool_result block, as Claude Code sends an
    interjection) and in a message of its own at turn 5."""
    messages: list[dict] = [{"role": "user", "content": "Fix the failing export in exporter.py."}]
    for t in range(n):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Reading part {t}."},
            {"type": "tool_use", "id": f"toolu_{t}", "name": "bash", "input": {"command": f"cat part{t}.py"}}]})
        blocks: list[dict] = [{"type": "tool_result", "tool_use_id": f"toolu_{t}",
                               "content": payload("qwen3", 2000, f"part{t}")}]
        if t == 2:
            blocks.append({"type": "text", "text": "From now on, never touch the vendored copy under third_party/."})
        messages.append({"role": "user", "content": blocks})
        if t == 5:
            messages.append({"role": "user", "content": [{"type": "text", "text": "the CI box has no network"}]})
            messages.append({"role": "assistant", "content": [{"type": "text", "text": "Noted."}]})
    return messages


def test_anthropic_user_text_blocks_survive_passes_and_the_task_stays_the_task(client: TestClient) -> None:
    """Anthropic user text blocks (an interjection beside a tool_result, and a message of its
    own) keep their words through the passes, in the record's section with their seq; and
    the contract's goal stays the original task: a follow-up is never taken for the task
    (the peer fault of charmbracelet/crush#3867, where the summary's continuation prompt
    named the latest follow-up as the original request)."""
    sid = new_session(client, profile="qwen3")
    goal = client.get(f"/v1/sessions/{sid}").json()["contract"]["goal"]
    messages = _anthropic_turns(12)
    said = ["From now on, never touch the vendored copy under third_party/.", "the CI box has no network"]
    passes = 0
    for end in range(2, len(messages) + 1):
        if messages[end - 1]["role"] != "user":
            continue
        r = client.post(f"/v1/sessions/{sid}/messages?format=anthropic", json={"messages": messages[:end], "start": 0})
        assert r.status_code == 200, r.text
        out = client.get(f"/v1/sessions/{sid}/request?format=anthropic").json()
        text = json.dumps(out["request"], ensure_ascii=False)
        for s in said:
            if any(s in json.dumps(m, ensure_ascii=False) for m in messages[:end]):
                assert json.dumps(s, ensure_ascii=False)[1:-1] in text, f"{s!r} lost at message {end}"
        passes += bool(out["manifest"]["compaction"]["pass"])
    assert passes >= 2
    record = client.get(f"/v1/sessions/{sid}/record").json()
    assert record["record"]["task"]["goal"] == goal, "the task is still the task"
    entries = record["record"]["user_text"]["entries"]
    assert [e["text"] for e in entries if e["text"] in said] == said[:1], "verbatim (the newest is in the leaf)"
    assert "## What the user said" in record["text"] and goal in record["text"]


def _prose(tag: str, tokens: int) -> str:
    count = COUNTERS["qwen3"]()
    parts: list[str] = []
    i = 0
    while count(" ".join(parts)) < tokens:
        parts.append(f"Note {tag}{i}: the {tag} report lists {i * 7 % 31} rows for region {i % 9}.")
        i += 1
    return " ".join(parts)


def _turn(t: int, size: int) -> list[dict]:
    call = {"event_id": f"a{t}", "kind": "message", "role": "assistant", "content": f"Step {t}.",
            "tool_calls": [{"call_id": f"c{t}", "name": "bash", "arguments": json.dumps({"command": f"cat f{t}.py"})}]}
    return [call, {"event_id": f"r{t}", "kind": "tool_result", "call_id": f"c{t}",
                   "payload": payload("qwen3", size, f"f{t}"), "exit_code": 0}]


def _passes(client: TestClient, sid: str, turns: range, size: int) -> list[dict]:
    out = []
    for t in turns:
        assert post(client, sid, *_turn(t, size)).status_code == 200
        compaction = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]["compaction"]
        if compaction["pass"]:
            out.append(compaction["after_pass"])
    return out


def test_a_pass_held_above_t_lo_by_the_pinned_message_says_pinned_message(client: TestClient) -> None:
    """A pinned user message of ~5,200 tokens: root + trunk are within T_lo (5,632), the
    message takes the request over it: ``over`` is ``pinned_message`` (before: ``newest_group``,
    which blamed the newest turn)."""
    sid = new_session(client, profile="qwen3")
    assert post(client, sid, {"event_id": "u1", "kind": "message", "role": "user",
                              "content": _prose("spec", 5_200)}).status_code == 200
    after = _passes(client, sid, range(10), 500)
    assert after and {a["over"] for a in after} == {"pinned_message"}, after


def test_a_pass_held_above_t_lo_by_what_the_user_said_says_user_text(client: TestClient) -> None:
    """A long contract and four folded user messages of ~500 tokens: root + contract + record
    are within T_lo, the section "What the user said" takes them over it: ``over`` is
    ``user_text`` (``pinned`` keeps its meaning: over without the section)."""
    sid = new_session(client, profile="qwen3", contract={"goal": _prose("goal", 2_600), "constraints": []})
    for u in range(4):
        assert post(client, sid, {"event_id": f"u{u}", "kind": "message", "role": "user",
                                  "content": _prose(f"ask{u}", 500)}, *_turn(100 + u, 200)).status_code == 200
    assert post(client, sid, {"event_id": "u9", "kind": "message", "role": "user", "content": "go on"}).status_code == 200
    after = _passes(client, sid, range(12), 600)
    assert after and "user_text" in {a["over"] for a in after}, after
    assert "pinned" not in {a["over"] for a in after}
