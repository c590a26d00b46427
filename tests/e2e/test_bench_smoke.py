"""``ctxd bench`` end to end on the smallest shared trace: the three modes (warm, cold,
naive) serve identical requests with identical counts, every band and target is reported,
and the JSON figures are written; ``--ingest`` posts a synthetic session and reports POST
latency along it. Latencies are printed, never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from tests.traces import TRACE_FILES


@pytest.mark.slow
def test_bench_runs_and_modes_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not TRACE_FILES:
        pytest.skip("shared traces not found")
    smallest = min(TRACE_FILES, key=lambda p: p.stat().st_size)
    out = tmp_path / "bench.json"
    # a bare file name is looked up in the shared traces directory
    assert main(["bench", "--trace", smallest.name, "--profile", "qwen3", "--quiet", "--out", str(out)]) == 0
    bench = json.loads(out.read_text(encoding="utf-8"))["bench"]
    assert bench["checks"]["requests_differing_from_warm"] == {"warm": 0, "cold": 0, "naive": 0}
    assert bench["checks"]["template_count_mismatches"] == 0
    assert bench["calls_per_replay"] > 0 and bench["checks"]["naive_template_calls"] >= bench["calls_per_replay"]
    assert [b["band"] for b in bench["bands"]] == ["<10k", "10k-20k", "20k-40k", ">=40k"]
    assert sum(b["n"] for b in bench["bands"]) == bench["calls_per_replay"]
    assert [(t["requests"], t["metric"]) for t in bench["targets"]] == [(">=40k", "naive_over_warm_p50"),
                                                                       ("20k-28k", "warm_p50_ms")]
    io = bench["io"]
    n = bench["calls_per_replay"]
    assert io["all"]["statements"]["n"] == n == io["extending"]["statements"]["n"] + io["other"]["statements"]["n"]
    assert io["other"]["statements"]["n"] >= 1, "the first GET extends nothing"
    assert io["all"]["statements"]["p50"] >= 3, "a GET reads the session and events, writes a manifest"
    assert io["all"]["wal_bytes"]["p50"] > 0 and io["all"]["db_growth_bytes"]["total"] >= 0
    assert io["stored"]["manifests"] == n and io["stored"]["manifests_bytes"] > 0
    posts = bench["posts"]
    assert sum(q["posts"] for q in posts["quarters"]) == posts["posts_per_replay"] > 0
    assert posts["quarters"][-1]["to_event"] > posts["quarters"][0]["to_event"]
    phases = {row["requests"]: row for row in bench["phases"]}
    assert phases["all"]["n"] == n
    assert all(phases["all"][f"{p}_p50_ms"] > 0 for p in ("load", "plan", "save"))
    assert phases["all"]["plan_p50_ms"] < phases["all"]["get_p50_ms"], "a step takes part of the GET"
    printed = capsys.readouterr().out
    assert "naive/warm" in printed and "targets (reported, not asserted)" in printed
    assert "writes per GET (warm)" in printed and "POST latency along the replayed session" in printed
    assert "where a warm GET's time goes (in process)" in printed


def test_bench_http_against_ctxd_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--http`` starts ``ctxd serve`` on loopback (embedded default), replays over HTTP,
    checks every served request's count against apply_chat_template of the body."""
    if not TRACE_FILES:
        pytest.skip("shared traces not found")
    smallest = min(TRACE_FILES, key=lambda p: p.stat().st_size)
    out = tmp_path / "http.json"
    assert main(["bench", "--http", "--trace", smallest.name, "--quiet", "--out", str(out)]) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert set(figures) == {"http"}, "--http alone runs only the HTTP benchmark"
    http = figures["http"]
    assert http["profile"] == "qwen3" and http["url"].startswith("ctxd serve")
    assert http["watermarks"]["raised"] is False and 0 < http["watermarks"]["t_lo"] < http["watermarks"]["t_hi"]
    assert http["checks"]["naive_count_mismatches"] == 0
    n = http["calls_per_replay"]
    assert n > 0 and sum(b["n"] for b in http["bands"]) == n == http["all"]["n"]
    assert all(c["http_ms"][0] > 0 and c["naive_ms"][0] > 0 and c["response_bytes"] > 0 for c in http["calls"])
    assert [t["requests"] for t in http["targets"]] == ["20k-28k"] and http["targets"][0]["required"] == 10.0
    assert http["posts"]["posts_per_replay"] > 0
    steps = {row["requests"]: row for row in http["steps"]}  # from each GET's Server-Timing header
    assert steps["all"]["n"] == n and all(steps["all"][f"{s}_p50_ms"] > 0 for s in ("load", "plan", "save"))
    assert steps["all"]["plan_p50_ms"] < steps["all"]["http_p50_ms"]
    printed = capsys.readouterr().out
    assert "where a warm GET's time goes over HTTP" in printed
    assert "GET over HTTP" in printed and "POST /events over HTTP along the session" in printed


def test_bench_unknown_trace_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--trace", "no-such.traj.json", "--quiet"]) == 2
    assert "no trajectory 'no-such.traj.json'" in capsys.readouterr().err


def test_bench_ingest_reports_post_latency_along_the_session(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ingest.json"
    assert main(["bench", "--ingest", "--ingest-events", "300", "--quiet", "--out", str(out)]) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert set(figures) == {"ingest"}, "--ingest alone runs only the ingest benchmark"
    ingest = figures["ingest"]
    series = ingest["series"]
    assert ingest["posts"] == len(series) and ingest["events"] == series[-1][0] >= 300
    assert [seq for seq, _ in series] == sorted({seq for seq, _ in series}), "every POST appended events"
    assert ingest["start"]["from_event"] >= 10 and ingest["start"]["n"] == ingest["end"]["n"] == ingest["window"]
    assert ingest["end"]["to_event"] == ingest["events"]
    assert [c["event"] for c in ingest["checkpoints"]] == [10, 100]
    assert ingest["target"]["required_ratio_at_most"] == 1.5 and isinstance(ingest["target"]["met"], bool)
    printed = capsys.readouterr().out
    assert "POST latency along a synthetic session" in printed and "p50 at the end" in printed


def test_raised_watermarks_change_only_the_watermarks(tmp_path: Path) -> None:
    """``--raise-watermarks`` serves ``qwen3`` with t_hi = its input_limit (28,160) and t_lo =
    0.6 of it (16,896): the override file, loaded as ``CTXD_PROFILES_PATH`` is, gives a
    profile equal to the shipped one in every other field."""
    import dataclasses

    from app.tokenizers.profiles import load_profiles
    from ctxd_tools.bench_http import raised_watermarks

    text, marks = raised_watermarks("qwen3")
    assert marks == {"t_hi": 28_160, "t_lo": 16_896}
    override = tmp_path / "profiles.toml"
    override.write_text(text, encoding="utf-8")
    shipped, raised = load_profiles()["qwen3"], load_profiles(override)["qwen3"]
    assert (raised.t_hi, raised.t_lo) == (28_160, 16_896) and raised.budget.input_limit == 28_160
    assert dataclasses.replace(raised, t_hi=shipped.t_hi, t_lo=shipped.t_lo) == shipped
    assert load_profiles(override)["qwen3-128k"] == load_profiles()["qwen3-128k"], "other profiles as shipped"


def test_raise_watermarks_with_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--http", "--raise-watermarks", "--url", "http://127.0.0.1:9", "--quiet"]) == 2
    assert "--raise-watermarks configures the server --http starts" in capsys.readouterr().err
