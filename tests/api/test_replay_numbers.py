"""``ctxd replay`` numbers its calls as the inspector (/ui) does: from 1 (the JSON report's
``call`` and the printed table's first column). Real HTTP (TestClient), real tokenizers."""

from __future__ import annotations

import io
import re

from fastapi.testclient import TestClient

from ctxd_tools.miniswe import ModelCall, load_trajectory, replay_plan
from ctxd_tools.replay_http import print_report, run_replay
from tests.traces import TRACE_FILES


def test_replay_numbers_calls_from_one_as_the_inspector(client: TestClient) -> None:
    """Before: calls 0..n-1 in the report and the table, while /ui says "call #1" for the
    first. After: 1..n in both; the inspector's last call number equals the replay's."""
    trace = min(TRACE_FILES, key=lambda p: p.stat().st_size)
    calls = sum(isinstance(s, ModelCall) for s in replay_plan(load_trajectory(trace)))
    report = run_replay(trace, "", client=client, progress=False)
    assert [r.call for r in report.rows] == list(range(1, calls + 1))
    out = io.StringIO()
    print_report(report, file=out)
    printed = [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\*?\s+\d+ ", out.getvalue(), re.MULTILINE)]
    assert printed == list(range(1, calls + 1))
    page = client.get(f"/ui/sessions/{report.session_id}").text
    assert f"call #{calls}:" in page and "call #0" not in page
