"""The mini-swe-agent adapter on all 32 shared real trajectories."""

from __future__ import annotations

import copy
import itertools
import json
from functools import cache
from pathlib import Path

import pytest

from ctxd_tools.miniswe import (
    BASH_TOOL,
    ModelCall,
    PostEvents,
    Trajectory,
    TrajectoryFormatError,
    load_trajectory,
    parse_trajectory,
    provider_usage_totals,
    reconstruct_first_user_message,
    replay_plan,
    session_create_body,
    split_task,
    trajectory_events,
    transcript_messages,
)
from tests.traces import TRACES_DIR

TRACES = sorted(TRACES_DIR.glob("*.traj.json"))
IDS = [p.name.removesuffix(".traj.json") for p in TRACES]


@cache
def _load(path: Path) -> Trajectory:
    return load_trajectory(path)


@pytest.fixture(params=TRACES, ids=IDS)
def traj(request: pytest.FixtureRequest) -> Trajectory:
    return _load(request.param)


def test_all_32_traces_present() -> None:
    assert len(TRACES) == 32


# ---------------------------------------------------------------- contract and system


def test_goal_is_the_pr_description(traj: Trajectory) -> None:
    split = split_task(traj)
    user = traj.first_user_message
    # cross-check with the recorded template: message = prefix + task + suffix
    template = traj.info["config"]["agent"]["instance_template"]
    prefix, _suffix = template.split("{{task}}")
    assert user.startswith(prefix)
    task = user[len(prefix) :]
    task = task[: task.rindex("\n</pr_description>")]
    assert split.goal == task.strip()
    assert split.goal and split.goal in user
    assert "Consider the following PR description:" not in split.goal
    assert "</pr_description>" not in split.goal


def test_constraints_are_boundaries_and_submission(traj: Trajectory) -> None:
    split = split_task(traj)
    user = traj.first_user_message
    ids = [cid for cid, _ in split.constraints]
    assert ids == ["boundary-1", "boundary-2", "submission"]
    texts = dict(split.constraints)

    # the bullets under "## Important Boundaries", without the "- " marker
    section = user.split("## Important Boundaries\n", 1)[1].split("\n## ", 1)[0]
    bullets = [line[2:] for line in section.splitlines() if line.startswith("- ")]
    assert [texts["boundary-1"], texts["boundary-2"]] == bullets
    assert texts["boundary-1"].startswith("MODIFY: ")
    assert texts["boundary-2"].startswith("DO NOT MODIFY: ")

    # the whole "## Submission" body up to the end of the instructions
    body = user.split("## Submission\n", 1)[1].rsplit("</instructions>", 1)[0]
    assert texts["submission"] == body.strip()
    assert texts["submission"].startswith("When you've completed your work")
    assert "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt" in texts["submission"]
    assert texts["submission"].endswith("</CRITICAL>")


def test_constraint_texts_are_verbatim_substrings(traj: Trajectory) -> None:
    user = traj.first_user_message
    for _, text in split_task(traj).constraints:
        assert text and text in user
        assert text == text.strip()


def test_system_is_system_message_plus_remaining_instructions(traj: Trajectory) -> None:
    split = split_task(traj)
    body = session_create_body(traj)
    assert body["system"] == traj.system_message + "\n\n" + split.remaining
    # the extracted parts left the system text; the rest stayed verbatim
    assert split.goal not in body["system"]
    for _, text in split.constraints:
        assert text not in body["system"]
    for kept in ("# Task Instructions", "## Recommended Workflow", "## Command Execution Rules",
                 "## Environment Details", "## Important Boundaries", "## Submission",
                 "<instructions>", "</instructions>", "Consider the following PR description:"):
        assert kept in body["system"]


def test_nothing_of_the_first_user_message_is_lost(traj: Trajectory) -> None:
    split = split_task(traj)
    user = traj.first_user_message
    assert reconstruct_first_user_message(split) == user

    body = session_create_body(traj)
    system = body["system"]
    goal = body["contract"]["goal"]
    constraints = [c["text"] for c in body["contract"]["constraints"]]
    for line in user.splitlines():
        found = (
            line in system
            or line in goal
            or any(line in c for c in constraints)
            # bullets: the constraint keeps the text, the "- " marker is list syntax
            or (line.startswith("- ") and any(line[2:] in c for c in constraints))
        )
        assert found, f"line lost: {line!r}"


def test_session_create_body_shape(traj: Trajectory) -> None:
    body = session_create_body(traj, profile="some-profile")
    assert body["profile"] == "some-profile"
    assert session_create_body(traj)["profile"] == "qwen3"
    assert body["contract"]["contract_version"] == 1
    assert [set(c) for c in body["contract"]["constraints"]] == [{"id", "text"}] * 3
    assert body["tools"] == [dict(BASH_TOOL)]
    assert body["tools"][0]["function"]["parameters"]["required"] == ["command"]
    meta = body["metadata"]
    assert meta["source"] == "mini-swe-agent"
    assert meta["instance_id"] == traj.instance_id
    assert meta["trajectory_format"] == "mini-swe-agent-1.1"
    assert meta["model"] in ("deepseek/deepseek-chat", "deepseek/deepseek-reasoner")
    json.dumps(body)  # JSON-serialisable


# ---------------------------------------------------------------- events


def test_events_cover_every_message_but_system_task_and_exit(traj: Trajectory) -> None:
    events = trajectory_events(traj)
    roles = [m["role"] for m in traj.messages]
    assert len(events) == roles.count("assistant") + roles.count("tool") + roles[2:].count("user")
    assert roles[-1] == "exit"
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    assert all(e["kind"] in ("message", "tool_result") for e in events)
    json.dumps(events)


def test_tool_results_name_an_earlier_call(traj: Trajectory) -> None:
    calls: set[str] = set()
    answered: set[str] = set()
    for ev in trajectory_events(traj):
        if ev["kind"] == "message":
            calls.update(tc["call_id"] for tc in ev["tool_calls"])
        else:
            assert ev["call_id"] in calls
            assert ev["call_id"] not in answered
            answered.add(ev["call_id"])
    # only the submit call of a Submitted trajectory stays without result
    assert len(calls - answered) == (1 if traj.exit_status == "Submitted" else 0)


def test_event_fields_match_the_recording(traj: Trajectory) -> None:
    by_id = {e["event_id"]: e for e in trajectory_events(traj)}
    for i, m in enumerate(traj.messages):
        if m["role"] == "assistant":
            ev = by_id[f"m{i:04d}-assistant"]
            assert ev["role"] == "assistant"
            assert ev["content"] == (m["content"] or "")
            assert ev["tool_calls"] == [
                {"call_id": tc["id"], "name": tc["function"]["name"],
                 "arguments": tc["function"]["arguments"]}
                for tc in m["tool_calls"]
            ]
        elif m["role"] == "tool":
            ev = by_id[f"m{i:04d}-tool"]
            assert ev["payload"] == m["extra"]["raw_output"]
            assert ev["exit_code"] == m["extra"]["returncode"]
            assert ev["call_id"] == m["tool_call_id"]
            exc = m["extra"].get("exception_info")
            assert ev["conditions"] == ({"exception_info": exc} if exc else {})


def test_reasoning_is_kept_for_reasoner_traces(traj: Trajectory) -> None:
    events = [e for e in trajectory_events(traj) if e.get("role") == "assistant"]
    reasoning = [e["reasoning"] for e in events]
    if "__reasoner" in traj.path:
        recorded = [m.get("reasoning_content") for m in traj.messages if m["role"] == "assistant"]
        assert reasoning == [r or None for r in recorded]
        assert sum(r is not None for r in reasoning) >= len(events) - 2
    else:
        assert all(r is None for r in reasoning)


def test_some_payloads_were_cut_for_the_agent_but_kept_whole() -> None:
    longest = 0
    for path in TRACES:
        t = _load(path)
        for m in t.messages:
            if m["role"] == "tool" and len(m["extra"]["raw_output"]) >= 10000:
                assert "<elided_chars>" in m["content"]
                longest = max(longest, len(m["extra"]["raw_output"]))
    assert longest > 10000


# ---------------------------------------------------------------- replay plan


def test_one_model_call_per_assistant_message_plus_failed_final(traj: Trajectory) -> None:
    plan = replay_plan(traj)
    calls = [s for s in plan if isinstance(s, ModelCall)]
    n_assistant = sum(m["role"] == "assistant" for m in traj.messages)
    failed = traj.exit_status != "Submitted" and traj.messages[-2]["role"] == "tool"
    assert traj.has_failed_final_call == failed
    assert len(calls) == n_assistant + (1 if failed else 0)
    # the rule agrees with the agent's own count of API calls
    assert len(calls) == traj.info["model_stats"]["api_calls"]
    assert [c.index for c in calls] == list(range(len(calls)))
    if failed:
        assert calls[-1].usage is None and calls[-1].failed and plan[-1] is calls[-1]
        calls = calls[:-1]
    for c in calls:
        assert c.usage is not None and not c.failed
        usage = traj.messages[c.message_index]["extra"]["response"]["usage"]  # type: ignore[index]
        assert c.usage.as_dict() == {k: usage[k] for k in
                                    ("prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens")}


def test_plan_batches_events_between_calls(traj: Trajectory) -> None:
    plan = replay_plan(traj)
    assert isinstance(plan[0], ModelCall)  # the first call sees only system + task
    for a, b in itertools.pairwise(plan):
        assert not (isinstance(a, PostEvents) and isinstance(b, PostEvents))
    posted = [e for s in plan if isinstance(s, PostEvents) for e in s.events]
    assert posted == trajectory_events(traj)
    for s in plan:
        if isinstance(s, PostEvents):
            assert s.events[0]["role"] == "assistant"
            assert all(e["kind"] == "tool_result" for e in s.events[1:])
    # each call after the first follows the batch holding the previous answer
    for i, s in enumerate(plan):
        if isinstance(s, ModelCall) and s.index > 0:
            assert isinstance(plan[i - 1], PostEvents)


def test_provider_usage_totals(traj: Trajectory) -> None:
    totals = provider_usage_totals(traj)
    usages = [m["extra"]["response"]["usage"] for m in traj.messages if m["role"] == "assistant"]
    assert totals.calls_with_usage == len(usages)
    assert totals.prompt_tokens == sum(u["prompt_tokens"] for u in usages)
    assert totals.prompt_cache_hit_tokens == sum(u["prompt_cache_hit_tokens"] for u in usages)
    assert totals.prompt_cache_miss_tokens == sum(u["prompt_cache_miss_tokens"] for u in usages)
    assert totals.prompt_tokens == totals.prompt_cache_hit_tokens + totals.prompt_cache_miss_tokens
    assert totals.completion_tokens == sum(u["completion_tokens"] for u in usages)
    assert totals.cost == pytest.approx(traj.info["model_stats"]["instance_cost"])
    assert totals.api_calls == traj.info["model_stats"]["api_calls"]


def test_transcript_is_append_only_as_sent(traj: Trajectory) -> None:
    calls = [s for s in replay_plan(traj) if isinstance(s, ModelCall)]
    previous: list[dict] = []
    for c in calls:
        msgs = transcript_messages(traj, c.index)
        assert msgs[: len(previous)] == previous
        assert msgs[0] == {"role": "system", "content": traj.system_message}
        assert msgs[1] == {"role": "user", "content": traj.first_user_message}
        if c.message_index is not None:
            assert len(msgs) == c.message_index
        previous = msgs
    # tool contents are what the agent saw (wrapper and cuts), not the raw output
    recorded = [m for m in traj.messages if m["role"] in ("tool", "assistant")]
    sent = [m for m in previous if m["role"] in ("tool", "assistant")]
    for got, rec in zip(sent, recorded):
        assert got["content"] == rec["content"]
        if rec["role"] == "tool":
            assert got["content"].startswith(("<returncode>", "<exception>"))
        elif "reasoning_content" in rec:
            assert got["reasoning_content"] == rec["reasoning_content"]
    with pytest.raises(IndexError):
        transcript_messages(traj, len(calls))


# ---------------------------------------------------------------- other shapes


def _raw(name: str = "sqlfluff__sqlfluff-2419__chat.traj.json") -> dict:
    return copy.deepcopy(json.loads((TRACES_DIR / name).read_text()))


def test_later_user_message_becomes_a_user_event() -> None:
    data = _raw()
    # a format-error message after the first tool result, as mini-swe-agent would add
    data["messages"].insert(4, {"role": "user", "content": "Tool call error: ...", "extra": {}})
    t = parse_trajectory(data)
    events = trajectory_events(t)
    user = [e for e in events if e.get("role") == "user"]
    assert user == [{"event_id": "m0004-user", "kind": "message", "role": "user",
                     "content": "Tool call error: ..."}]
    plan = replay_plan(t)
    assert plan[1] == PostEvents(events=tuple(events[:3]))  # assistant, tool, user
    assert isinstance(plan[2], ModelCall) and plan[2].index == 1
    assert transcript_messages(t, 1)[-1] == {"role": "user", "content": "Tool call error: ..."}


def test_none_content_and_missing_usage() -> None:
    data = _raw()
    data["messages"][2]["content"] = None
    del data["messages"][2]["extra"]["response"]
    t = parse_trajectory(data)
    assert trajectory_events(t)[0]["content"] == ""
    first = replay_plan(t)[0]
    assert isinstance(first, ModelCall) and first.usage is None and not first.failed


# ---------------------------------------------------------------- format errors


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "broken.traj.json"
    p.write_text("{not json")
    with pytest.raises(TrajectoryFormatError) as err:
        load_trajectory(p)
    assert str(p) in str(err.value) and "invalid JSON" in str(err.value)
    assert err.value.path == str(p)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("messages"), "'messages'"),
        (lambda d: d.update(trajectory_format="swe-agent-0.9"), "unsupported trajectory_format"),
        (lambda d: d["info"].pop("exit_status"), "exit_status"),
        (lambda d: d["messages"].pop(0), "first message must be 'system'"),
        (lambda d: d["messages"][3].update(tool_call_id="call_nope"), "names no earlier tool call"),
        (lambda d: d["messages"][3]["extra"].pop("raw_output"), "raw_output"),
        (lambda d: d["messages"][2]["tool_calls"][0]["function"].update(arguments={"command": "ls"}),
         "'arguments'"),
        (lambda d: d["messages"].insert(3, {"role": "exit", "content": ""}), "'exit' message may only come last"),
        (lambda d: d["messages"][1].update(content="no PR here"), "pr_description"),
    ],
)
def test_format_errors_are_clear(tmp_path: Path, mutate, expected: str) -> None:  # type: ignore[no-untyped-def]
    data = _raw()
    mutate(data)
    p = tmp_path / "bad.traj.json"
    p.write_text(json.dumps(data))
    with pytest.raises(TrajectoryFormatError) as err:
        t = load_trajectory(p)
        session_create_body(t)  # the goal is only looked for when splitting the task
    assert expected in str(err.value)
    assert str(p) in str(err.value)


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(TrajectoryFormatError, match="top level must be a JSON object"):
        parse_trajectory([1, 2, 3], source="x.json")
