"""Diff hunk folding (seed 000 section 4.5.1, table 6, third row).

For unified diffs (``git diff``, ``git show``, ``diff -u``, a ``.patch`` file): keeps
every file header (``diff --git``, ``index``, ``---``, ``+++``, mode and rename lines) and
every hunk header (``@@ -a,b +c,d @@``, the location), every changed line (``+`` / ``-``)
and ``\\ No newline at end of file`` note, and ``context`` unchanged lines on each side of
a change; longer runs of unchanged lines fold into one marker naming their raw lines. When
the kept hunk bodies exceed ``budget_lines``, later hunk bodies fold whole into one marker
that counts their added, removed and unchanged lines. Text around the diff passes through.

Table 6: it keeps "changed lines, their location, and a marker for unchanged context" and
can silently drop the "surrounding code needed to judge whether the change is correct",
which the markers let a later step read back by handle.

Hunk bodies are delimited by the header's line counts (a diff cut short by ``| head``
ends where its lines end); a line that is no body line ends the hunk early.
"""

from __future__ import annotations

import re
from typing import Final

from app.domain.compaction.lineage import Compacted, Span, body_of, coerce, finish, marker, span_of, where

__all__ = ["HUNK_RE", "KIND", "fold_diff"]

KIND: Final = "diff_fold"
HUNK_RE: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FILE_HEADER: Final = re.compile(
    r"^(?:diff |index |--- |\+\+\+ |new file mode |deleted file mode |old mode |new mode |similarity index "
    r"|dissimilarity index |rename from |rename to |copy from |copy to |Binary files )")


def _hunk_body(bodies: list[str], start: int, old: int, new: int) -> int:
    """Index just past the body of a hunk whose header is at ``start - 1``."""
    j = start
    while j < len(bodies) and (old > 0 or new > 0):
        line = bodies[j]
        if line.startswith("\\"):
            pass
        elif line == "" or line[0] == " ":
            if old <= 0 or new <= 0:
                break
            old, new = old - 1, new - 1
        elif line[0] == "-" and old > 0:
            old -= 1
        elif line[0] == "+" and new > 0:
            new -= 1
        else:
            break
        j += 1
    while j < len(bodies) and bodies[j].startswith("\\ "):
        j += 1
    return j


def fold_diff(value: str | Compacted, *, context: int = 1, budget_lines: int = 120) -> Compacted:
    """Fold unchanged context and, beyond ``budget_lines`` kept body lines, whole hunk bodies.

    ``context``: unchanged lines kept on each side of a change (>= 0). ``budget_lines``:
    body lines (kept lines and fold markers) kept over all hunks, in order; a hunk whose
    kept body would pass it is folded whole (``[ctxd: hunk body folded: +A -R lines, U
    unchanged (lines a-b of H)]``), a later smaller hunk may still fit. A run of unchanged
    lines folds (``[ctxd: U unchanged lines folded (lines a-b of H)]``) only when the marker
    is shorter than the run (UTF-8 bytes).

    Stats: ``files``, ``hunks``, ``context_folded`` (unchanged lines folded),
    ``hunks_folded``, ``changed_folded`` (changed lines inside folded hunks). Deterministic;
    every output line is an input line or a marker; returns the input unchanged when it
    holds no hunk or nothing folds.
    """
    inp = coerce(value)
    context = max(0, context)
    lines = inp.lines
    bodies = [body_of(line) for line in lines]
    out: list[str] = []
    origins: list[Span | None] = []
    stats = {"files": 0, "hunks": 0, "context_folded": 0, "hunks_folded": 0, "changed_folded": 0}
    used = 0
    in_diff = False
    i = 0

    def keep(k: int) -> None:
        out.append(lines[k])
        origins.append(inp.origins[k])

    while i < len(lines):
        line = bodies[i]
        hunk = HUNK_RE.match(line) if in_diff else None
        if hunk is None:
            if line.startswith("+++ ") and i > 0 and bodies[i - 1].startswith("--- "):
                in_diff = True
                stats["files"] += 1
            elif not _FILE_HEADER.match(line):
                in_diff = False
            keep(i)
            i += 1
            continue
        stats["hunks"] += 1
        old = int(hunk.group(2)) if hunk.group(2) is not None else 1
        new = int(hunk.group(4)) if hunk.group(4) is not None else 1
        end = _hunk_body(bodies, i + 1, old, new)
        keep(i)
        body = range(i + 1, end)
        changed = [k for k in body if bodies[k][:1] in ("+", "-")]
        near = {m for k in changed for m in range(k - context, k + context + 1)}
        plan: list[int | tuple[int, int]] = []  # a kept line, or a folded run [a, b)
        run_start = None
        for k in [*body, end]:
            folded = k < end and not (bodies[k][:1] in ("+", "-", "\\") or k in near)
            if folded and run_start is None:
                run_start = k
            elif not folded and run_start is not None:
                note_bytes = len(marker(f"{k - run_start} unchanged lines folded ({where(span_of(inp.origins[run_start:k]), inp.source)})").encode())
                if note_bytes < sum(len(x.encode("utf-8", "surrogatepass")) for x in lines[run_start:k]):
                    plan.append((run_start, k))
                else:
                    plan.extend(range(run_start, k))
                run_start = None
            if k < end and not folded:
                plan.append(k)
        if used + len(plan) > budget_lines and len(body) > 0:
            added = sum(1 for k in body if bodies[k].startswith("+"))
            removed = sum(1 for k in body if bodies[k].startswith("-"))
            out.append(marker(f"hunk body folded: +{added} -{removed} lines, {len(body) - added - removed} unchanged "
                              f"({where(span_of(inp.origins[i + 1:end]), inp.source)})"))
            origins.append(None)
            stats["hunks_folded"] += 1
            stats["changed_folded"] += added + removed
            used += 1
        else:
            for step in plan:
                if isinstance(step, int):
                    keep(step)
                else:
                    a, b = step
                    out.append(marker(f"{b - a} unchanged lines folded ({where(span_of(inp.origins[a:b]), inp.source)})"))
                    origins.append(None)
                    stats["context_folded"] += b - a
            used += len(plan)
        i = end
    return finish(inp, out, origins, kind=KIND, params={"context": context, "budget_lines": budget_lines}, stats=stats)
