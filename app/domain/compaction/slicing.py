"""Head, tail and failure-marker slicing that keeps the causal lines (seed 000 section
4.5.1, table 6 and listing 1; seed 004 part B section 3.3.3, failure mode 1: dropping the
decisive fact).

Listing 1's point: a filter that keeps only the ``FAILED`` line drops the event ordering
that explains it (``waiter_registered_before_return=true``,
``connection_available_after_return=true``...). So, within a line budget, this slicer keeps
lines in this order of priority:

1. protected lines (:mod:`app.domain.compaction.patterns`: assertions, exceptions,
   ``Traceback``, ``FAILED`` / ``ERROR``, pytest ``E`` lines, test result counts), taken
   alternately from the first and the last so both the first error and the final summary
   survive when they do not all fit;
2. the last ``frames`` frames of every Python traceback (``File ...`` line, source line,
   caret lines) up to its exception line;
3. the ``before`` lines just before each protected line, nearest first (the causal lines);
4. the last ``tail`` lines, then the first ``head`` lines (setup and final lines);
5. while the budget allows, more lines from the head and the tail, alternately.

Every omitted range becomes one marker naming its raw lines (``[ctxd: N lines omitted
(lines a-b of H)]``) and the marker lines count against the budget, so the output never has
more than ``budget_lines`` lines; lines longer than ``max_line_chars`` are cut with an
inline marker. Table 6: it can silently drop "an intermediate warning or event ordering
that matches no pattern".

Peer faults turned into tests: head-only truncation cut the pytest summary and tracebacks
(The-AI-Alliance/cube-harness#368, headroomlabs-ai/headroom#2596); a cut that does not say
how much it dropped (Digital-Process-Tools/claude-supertool#622).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Final

from app.domain.compaction.lineage import (
    Compacted,
    Span,
    body_of,
    coerce,
    cut_line,
    finish,
    marker,
    span_of,
    where,
)
from app.domain.compaction.patterns import TRACEBACK_RE, alternate, is_protected

__all__ = ["KIND", "slice_failures", "traceback_frames"]

KIND: Final = "slice"


def traceback_frames(bodies: list[str], frames: int) -> list[int]:
    """Indexes of the lines of the last ``frames`` frames of each Python traceback in
    ``bodies`` (from the last frames' ``File`` lines to the line before the exception)."""
    keep: list[int] = []
    i = 0
    while i < len(bodies):
        if not TRACEBACK_RE.match(bodies[i]):
            i += 1
            continue
        indent = len(bodies[i]) - len(bodies[i].lstrip())
        starts: list[int] = []
        j = i + 1
        while j < len(bodies):
            line = bodies[j]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break  # the exception line (or anything at the traceback's own indent)
            if line.lstrip().startswith('File "'):
                starts.append(j)
            j += 1
        if starts and frames > 0:
            keep.extend(range(starts[-min(frames, len(starts))], j))
        i = j
    return keep


def slice_failures(value: str | Compacted, *, budget_lines: int = 60, head: int = 8, tail: int = 20,
                   before: int = 3, frames: int = 2, max_line_chars: int = 400) -> Compacted:
    """Keep the causal lines of a long output within ``budget_lines`` output lines.

    Applies when the input has more than ``budget_lines`` lines or a line longer than
    ``max_line_chars`` characters; returns the input unchanged otherwise. Priorities, in
    the module docstring. Guarantees: output lines <= ``max(budget_lines, 3)``; every
    output line is a marker, an input line, or an input line cut at ``max_line_chars``
    characters; when the input has ``k`` protected lines and ``2k + 1 <= budget_lines``,
    all of them are kept (each kept line adds at most one marker). Deterministic and
    idempotent.

    Stats: ``protected`` (protected lines in the input), ``protected_kept``,
    ``omitted_lines``, ``lines_cut``.
    """
    inp = coerce(value)
    budget_lines = max(3, budget_lines)
    lines = inp.lines
    n = len(lines)
    bodies = [body_of(line) for line in lines]
    protected = [k for k in range(n) if is_protected(bodies[k])]
    too_long = any(cut_line(b, max_line_chars) != b for b in bodies)
    if n <= budget_lines and not too_long:
        return inp
    if n <= budget_lines:
        chosen = list(range(n))
    else:
        order: list[int] = list(alternate(protected))
        order += traceback_frames(bodies, frames)
        order += [k - d for d in range(1, before + 1) for k in protected if k - d >= 0]
        order += list(range(n - 1, max(n - tail, 0) - 1, -1)) + list(range(min(head, n)))
        order += list(alternate(list(range(n))))
        chosen = _fill(order, n, budget_lines)
    out: list[str] = []
    origins: list[Span | None] = []
    cut = 0
    previous = -1
    for k in [*chosen, n]:
        if k > previous + 1:
            gap = inp.origins[previous + 1:k]
            out.append(marker(f"{k - previous - 1} lines omitted ({where(span_of(gap), inp.source)})"))
            origins.append(None)
        if k < n:
            shown = cut_line(bodies[k], max_line_chars)
            cut += shown != bodies[k]
            out.append(shown + lines[k][len(bodies[k]):])
            origins.append(inp.origins[k])
        previous = k
    kept = set(chosen)
    return finish(inp, out, origins, kind=KIND,
                  params={"budget_lines": budget_lines, "head": head, "tail": tail, "before": before,
                          "frames": frames, "max_line_chars": max_line_chars},
                  stats={"protected": len(protected), "protected_kept": sum(1 for k in protected if k in kept),
                         "omitted_lines": n - len(kept), "lines_cut": cut})


def _fill(order: Iterable[int], n: int, budget: int) -> list[int]:
    """Take indexes in priority ``order`` while kept lines plus one marker per gap fit."""
    kept: list[int] = []
    seen: set[int] = set()
    size = 1 if n else 0  # kept lines + gaps (one marker per gap); nothing kept yet: one gap
    for k in order:
        if k in seen or not 0 <= k < n:
            continue
        pos = bisect.bisect_left(kept, k)
        left = kept[pos - 1] if pos > 0 else -1
        right = kept[pos] if pos < len(kept) else n
        gaps_before = 1 if right - left > 1 else 0
        gaps_after = (1 if k - left > 1 else 0) + (1 if right - k > 1 else 0)
        grown = size + 1 + gaps_after - gaps_before
        if grown > budget:
            continue
        kept.insert(pos, k)
        seen.add(k)
        size = grown
    return kept
