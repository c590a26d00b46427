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
    assert [t["requests"] for t in bench["targets"]] == [">=20k", ">=40k"]
    printed = capsys.readouterr().out
    assert "naive/warm" in printed and "targets (reported, not asserted)" in printed


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
