"""Real tool outputs from the shared mini-swe-agent trajectories (tests/traces.py finds them).

Each :class:`ToolOutput` is one ``tool`` message of a trajectory with the bash command that
produced it (from the assistant's tool call with the same id, see ctxd_tools/miniswe.py):
``extra.raw_output`` is the payload ctxd stores whole (its handle is the sha256 of its UTF-8
bytes), ``extra.returncode`` the exit code. ``find`` picks a real example by command and
output patterns, so a technique's tests run on what the agent really saw.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from app.adapters.bash_effects import command_of
from ctxd_tools.miniswe import load_trajectory
from tests.traces import TRACE_FILES


@dataclass(frozen=True)
class ToolOutput:
    trace: str  # file name without ``.traj.json``
    index: int  # index of the tool message in the trajectory's messages
    command: str
    exit_code: int | None
    output: str

    @property
    def handle(self) -> str:
        return hashlib.sha256(self.output.encode("utf-8")).hexdigest()

    @property
    def where(self) -> str:
        return f"{self.trace} messages[{self.index}]"


@cache
def _outputs(path: Path) -> tuple[ToolOutput, ...]:
    traj = load_trajectory(path)
    commands: dict[str, str] = {}
    out = []
    for i, m in enumerate(traj.messages):
        if m["role"] == "assistant":
            for call in m.get("tool_calls") or []:
                commands[call["id"]] = command_of(call["function"]["arguments"]) or ""
        elif m["role"] == "tool":
            extra = m["extra"]
            out.append(ToolOutput(trace=path.name.removesuffix(".traj.json"), index=i,
                                  command=commands.get(m["tool_call_id"], ""),
                                  exit_code=extra.get("returncode"), output=extra["raw_output"]))
    return tuple(out)


def all_outputs() -> Iterator[ToolOutput]:
    """Every tool output of the shared traces, in trace then message order."""
    for path in TRACE_FILES:
        yield from _outputs(path)


def find(*, command: str | None = None, output: str | None = None, min_lines: int = 0,
         exit_code: int | None = None, trace: str | None = None, nth: int = 0) -> ToolOutput:
    """The ``nth`` real tool output whose command and output match the regexes (``output``
    with re.MULTILINE), with at least ``min_lines`` lines; raises LookupError if none."""
    found = [o for o in all_outputs()
             if (command is None or re.search(command, o.command))
             and (output is None or re.search(output, o.output, re.MULTILINE))
             and o.output.count("\n") >= min_lines
             and (exit_code is None or o.exit_code == exit_code)
             and (trace is None or o.trace == trace)]
    if len(found) <= nth:
        raise LookupError(f"no real tool output #{nth} with command~{command!r} output~{output!r}")
    return found[nth]
