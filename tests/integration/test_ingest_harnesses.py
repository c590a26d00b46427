"""The in-process harnesses (``ctxd bench``, ``ctxd bench --ingest``, ``ctxd eval``) ingest
as a server does: shell inference states kept between POSTs (``app.state.ctxd.shell_states`` on a
server). Before: they passed none, so every POST of a session with a shell tool re-read and
re-parsed all its earlier commands, and `ctxd bench` showed POST p50 growing 9.6 -> 41.8 ms
from the first to the last quarter of astroid-1333 (after: 5.6 -> 7.4 ms)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.services.shell_inference import ShellStates
from app.store import repository as repo
from ctxd_tools.bench import Harness
from ctxd_tools.bench_ingest import SESSION_BODY, synthetic_batches
from ctxd_tools.eval.policies import EvalContext


def test_the_bench_harness_reads_earlier_commands_once_per_session(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = repo.message_tool_calls

    def spy(db: Any, session_id: str, **kw: Any) -> Any:
        calls.append(kw.get("upto_seq", -1))
        return real(db, session_id, **kw)

    monkeypatch.setattr(repo, "message_tool_calls", spy)
    h = Harness(tmp_path)
    sid = h.create_session(SESSION_BODY)
    batches = list(synthetic_batches(120, seed=3))
    for batch in batches:
        h.post_events(sid, batch)
    assert len(batches) >= 10
    assert len(calls) <= 1, f"earlier commands re-read at seqs {calls}"


def test_the_eval_context_keeps_shell_states_like_a_server() -> None:
    ctx = EvalContext(profiles=None, meters=None, session_factory=None, profile="qwen3")
    assert isinstance(ctx.shell_states, ShellStates)
    assert ctx.shell_states is not EvalContext(profiles=None, meters=None, session_factory=None,
                                               profile="qwen3").shell_states
