"""How much of the recorded commands :mod:`app.adapters.bash_effects` interprets, over
mini-swe-agent trajectory files (the bash-effects coverage report)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.adapters.bash_effects import SessionEffects, command_of
from ctxd_tools.miniswe import load_trajectory

__all__ = ["coverage_report"]


def coverage_report(paths: Iterable[str | Path]) -> dict[str, Any]:
    """How much of the recorded commands :mod:`app.adapters.bash_effects` interprets.

    Over the mini-swe-agent trajectories at ``paths``: ``trajectories``,
    ``commands``, ``parsed`` and ``parsed_share``, ``with_read`` and
    ``with_write`` (commands with at least one), ``reads_by_tool`` and
    ``writes_by_tool`` (counts of its ``Read`` / ``Write``, tree writes as
    ``"<tool> (tree)"``), ``write_events`` (after tree expansion), and
    ``unparsed_reasons``.
    """
    n_traj = commands = parsed = with_read = with_write = write_events = 0
    reads_by_tool: Counter[str] = Counter()
    writes_by_tool: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for path in paths:
        traj = load_trajectory(path)
        n_traj += 1
        session = SessionEffects()
        for m in traj.messages:
            if m["role"] != "assistant":
                continue
            for tc in m.get("tool_calls") or []:
                commands += 1
                call = session.run(command_of(tc["function"]["arguments"]))
                eff = call.effects
                if not eff.parsed:
                    reasons[(eff.reason or "").split(":")[0]] += 1
                    continue
                parsed += 1
                with_read += bool(eff.reads)
                with_write += bool(eff.writes)
                write_events += len(call.written)
                reads_by_tool.update(r.tool for r in eff.reads)
                writes_by_tool.update(w.tool + (" (tree)" if w.tree else "") for w in eff.writes)
    return {
        "trajectories": n_traj,
        "commands": commands,
        "parsed": parsed,
        "parsed_share": parsed / commands if commands else 0.0,
        "with_read": with_read,
        "with_write": with_write,
        "write_events": write_events,
        "reads_by_tool": dict(reads_by_tool.most_common()),
        "writes_by_tool": dict(writes_by_tool.most_common()),
        "unparsed_reasons": dict(reasons.most_common()),
    }
