"""A short ``ctxd eval`` on two real traces: report.md, results.json with the required keys,
calls.jsonl and the PNG plots (issue 4's CI smoke test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from ctxd_tools.eval.report import KEYS
from tests.traces import TRACES_DIR

TRACES = TRACES_DIR
SMOKE = ["pvlib__pvlib-python-1072__reasoner.traj.json", "pvlib__pvlib-python-1707__reasoner.traj.json"]
POLICIES = ("append", "window", "select")


@pytest.fixture(scope="module")
def eval_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    paths = [TRACES / name for name in SMOKE]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"shared traces not found in {TRACES}")
    out = tmp_path_factory.mktemp("eval")
    code = main(["eval", *map(str, paths), "--policies", ",".join(POLICIES), "--profile", "qwen3",
                 "--out", str(out), "--workers", "1", "--quiet"])
    assert code == 0
    return out


def test_results_json_shape(eval_out: Path) -> None:
    results = json.loads((eval_out / "results.json").read_text())
    assert results["profile"] == "qwen3"
    assert list(results["policies"]) == list(POLICIES)
    for policy, entry in results["policies"].items():
        assert set(KEYS) <= set(entry["total"]), policy
        assert set(entry["traces"]) == set(SMOKE)
        for trace in entry["traces"].values():
            assert set(KEYS) <= set(trace)
    total = {p: e["total"] for p, e in results["policies"].items()}
    calls = total["append"]["calls"]
    assert calls == 16 + 17 and all(t["calls"] == calls for t in total.values())
    # every policy counts the same calls; append is the eq. 9 reference
    assert total["append"]["compression_ratio"] == 1.0
    assert total["window"]["compression_ratio"] > 1.0  # ctxd drops the resent reasoning, at least
    for t in total.values():
        assert t["input_tokens"] == t["cached_tokens"] + t["uncached_tokens"] > 0
        assert t["reuse_ratio"] == pytest.approx(t["cached_tokens"] / t["input_tokens"])
        assert t["cost_usd"] == pytest.approx((t["uncached_tokens"] * 3.0 + t["cached_tokens"] * 0.3) / 1e6)
        assert t["constraint_retention"] == 1.0
        assert t["pair_errors"] == 0
        assert 0.0 <= t["grounding"] <= t["grounding_via_handle"] <= 1.0
    assert total["window"]["over_limit"] == total["select"]["over_limit"] == 0
    assert total["append"]["grounding"] == 1.0
    provider = results["provider"]["total"]
    assert provider["prompt_tokens"] == provider["prompt_cache_hit_tokens"] + provider["prompt_cache_miss_tokens"] > 0
    assert provider["cost"] > 0


def test_calls_jsonl(eval_out: Path) -> None:
    rows = [json.loads(line) for line in (eval_out / "calls.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * (16 + 17)
    for row in rows:
        assert sum(row["by_role"].values()) == sum(row["by_zone"].values()) == row["input_tokens"]
        assert row["uncached_tokens"] == row["input_tokens"] - row["cached_tokens"]
        assert row["over_limit"] == (row["input_tokens"] > 28_160)


def test_report_and_plots(eval_out: Path) -> None:
    report = (eval_out / "report.md").read_text()
    assert "## Totals" in report and "provider billed" in report
    for policy in POLICIES:
        assert f"| {policy} |" in report
    for png in ("input_by_role.png", "request_length.png", "cumulative_cost.png"):
        data = (eval_out / png).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
        assert f"]({png})" in report


def test_append_counts_equal_the_chat_template(eval_out: Path) -> None:
    """append = the transcript as sent, rendered and counted exactly (reasoning included)."""
    from app.domain.layout import canonical_tools
    from app.tokenizers.hf import openai_to_template_messages
    from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir
    from ctxd_tools import miniswe

    tokenizer = load_hf_tokenizer(qwen3_tokenizer_dir())
    tools = list(canonical_tools(miniswe.tool_declarations()))
    rows = [json.loads(line) for line in (eval_out / "calls.jsonl").read_text().splitlines()]
    for name in SMOKE:
        traj = miniswe.load_trajectory(TRACES / name)
        served = {r["call"]: r["input_tokens"] for r in rows if r["policy"] == "append" and r["trace"] == name}
        for k, tokens in served.items():
            ids = tokenizer.apply_chat_template(openai_to_template_messages(miniswe.transcript_messages(traj, k)),
                                                tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
            assert len(ids) == tokens, (name, k)


# --------------------------------------------------------------------------- a hand-made trajectory

TASK = """<pr_description>
Consider the following PR description:
parse_header in src/reader.py returns None for empty headers.
</pr_description>

<instructions>
# Task Instructions

## Important Boundaries

- MODIFY: Regular source code files in /testbed
- DO NOT MODIFY: Tests

## Submission

Submit with echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT.
</instructions>"""


def _assistant(i: int, content: str, command: str) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}],
        "extra": {"response": {"usage": {"prompt_tokens": 100 * i, "prompt_cache_hit_tokens": 50 * i,
                                         "prompt_cache_miss_tokens": 50 * i}}, "cost": 0.001}}


def _tool(i: int, output: str) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": f"<returncode>0</returncode>\n<output>\n{output}</output>",
            "extra": {"raw_output": output, "returncode": 0}}


def test_hand_made_trajectory_stale_support_and_grounding(tmp_path: Path) -> None:
    """cat src/reader.py (revision 0), then sed -i src/reader.py (revision 1): from the
    third call on, the first observation is superseded. append and window (which ingest no
    bindings) still show it as it was, so each of calls 2 and 3 has one stale pair; select
    replaces it by a tombstone naming src/reader.py@r1 (issue 11): no stale pair, and its
    manifest item says historical (checked per item)."""
    source = "def parse_header(data):\n    if not data:\n        return None\n    return data.split(':')\n"
    trajectory = {
        "trajectory_format": "mini-swe-agent-1.1", "instance_id": "hand__made-1",
        "info": {"exit_status": "Submitted", "model_stats": {"api_calls": 4, "instance_cost": 0.004}},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": TASK},
            _assistant(1, "Let me read the reader.", "cat src/reader.py"),
            _tool(1, source),
            _assistant(2, "parse_header returns None; fix it.", "sed -i 's/return None/return []/' src/reader.py"),
            _tool(2, ""),
            _assistant(3, "Check parse_header in src/reader.py again.", "python -c 'import src.reader'"),
            _tool(3, "ok\n"),
            _assistant(4, "Done with src/reader.py.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
            {"role": "exit", "content": "", "extra": {}},
        ],
    }
    path = tmp_path / "hand__made-1__chat.traj.json"
    path.write_text(json.dumps(trajectory))
    out = tmp_path / "out"
    assert main(["eval", str(path), "--out", str(out), "--workers", "1", "--quiet", "--no-plots"]) == 0
    results = json.loads((out / "results.json").read_text())
    rows = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    for policy in POLICIES:
        total = results["policies"][policy]["total"]
        assert total["calls"] == 4
        assert total["stale_support"] == (0 if policy == "select" else 2), policy
        assert total["superseded_pairs"] == 2, policy
        assert total["constraint_retention"] == 1.0 and total["pair_errors"] == 0
        calls = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["call"])
        assert [r["superseded"] for r in calls] == [0, 0, 1, 1]
        # call 2's next message names parse_header and src/reader.py, both seen before (task, call 0)
        assert calls[2]["grounding_candidates"] == 2 and calls[2]["grounding_hits"] == 2
    assert results["provider"]["total"]["prompt_tokens"] == 1000
    assert results["provider"]["total"]["cost"] == pytest.approx(0.004)


def test_process_pool_gives_the_same_results(eval_out: Path, tmp_path: Path) -> None:
    """--workers 2 (spawned processes, one database each) equals the in-process run."""
    out = tmp_path / "pool"
    assert main(["eval", *(str(TRACES / n) for n in SMOKE), "--out", str(out), "--workers", "2", "--quiet",
                 "--no-plots"]) == 0
    one = json.loads((eval_out / "results.json").read_text())["policies"]
    two = json.loads((out / "results.json").read_text())["policies"]
    assert two == one
