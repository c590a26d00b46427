"""Standing instructions for the evaluation (``ctxd eval --inject-instructions``): the corpus
shipped in ``ctxd_tools/eval/corpus/instructions.json`` and their injection into recorded
trajectories.

A user of an interactive agent speaks during the work ("from now on, don't ...", "the CI box
has no network"). Batch trajectories hold no such message, so the evaluation inserts them:
:func:`inject_instructions` puts one user message holding a standing instruction before the
model calls at a quarter, half and three quarters of a trajectory's calls (after the tool
result the previous call produced), the instructions picked from the corpus by the
trajectory's name (deterministic, different traces get different ones). Every later request
must hold each instruction verbatim (instruction retention, :mod:`ctxd_tools.eval.measures`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import Any

from ctxd_tools import miniswe

__all__ = ["INJECTION_POINTS", "corpus", "inject_instructions", "injected_texts"]

#: where the injected messages go: before the model call at these fractions of the calls
INJECTION_POINTS = (0.25, 0.5, 0.75)


@cache
def corpus() -> tuple[str, ...]:
    """The standing instructions of the shipped corpus, in file order."""
    raw = resources.files("ctxd_tools.eval").joinpath("corpus/instructions.json").read_text(encoding="utf-8")
    return tuple(str(t) for t in json.loads(raw)["instructions"])


def _picked(name: str, n: int) -> list[str]:
    items = corpus()
    start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(items)
    return [items[(start + 7 * i) % len(items)] for i in range(n)]


def inject_instructions(traj: miniswe.Trajectory) -> miniswe.Trajectory:
    """``traj`` with a user message holding a standing instruction before the model calls at
    :data:`INJECTION_POINTS` of its calls (each after the previous call's tool results; a
    call whose preceding message is not a tool result, or the first call, gets none)."""
    calls = traj.assistant_indexes
    points = sorted({int(len(calls) * f) for f in INJECTION_POINTS if 0 < int(len(calls) * f) < len(calls)})
    texts = iter(_picked(traj.instance_id, len(points)))
    at = {calls[p] for p in points if traj.messages[calls[p] - 1]["role"] == "tool"}
    messages: list[Any] = []
    for i, m in enumerate(traj.messages):
        if i in at:
            messages.append({"role": "user", "content": next(texts)})
        messages.append(m)
    return replace(traj, messages=tuple(messages))


def injected_texts(traj: miniswe.Trajectory) -> frozenset[str]:
    """The corpus instructions ``traj``'s user messages hold (after the task message)."""
    known = set(corpus())
    return frozenset(str(m["content"]) for m in traj.messages[2:] if m["role"] == "user" and m["content"] in known)
