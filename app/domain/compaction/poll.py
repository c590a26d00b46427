"""Repeated-poll deduplication (seed 000 section 4.5.1, table 6, first row; seed 004 part B
section 3.4.3: a designed, checkable loss rather than a summary).

Consecutive repetitions of a line, or of a block of up to ``max_period`` lines, collapse to
the **first** repetition, a marker with the **count** and the raw line range, and the
**last** repetition (the final state of a poll or progress bar). Table 6: it keeps "one
copy of an unchanged status output and a repetition count" and can silently drop "a brief
change between polls, or the timing of repetitions"; the marker names the raw lines so the
dropped polls stay readable through the handle.

Near-identical lines: two lines repeat when they are equal after masking only the values a
poll or progress display changes (:data:`VOLATILE_RE`: percentages, clock times and
timestamps, durations, sizes and rates, ``n/m`` counters, runs of progress-bar glyphs) and
collapsing runs of blanks. Other digits are evidence and are never masked: file lists
(``L005.py``, ``L006.py``), grep line numbers and ids stay distinct (peer fault:
Supercompress/Supercompress#149, a digit-blind fingerprint folded twenty distinct order ids
into three). Protected lines (failure markers, :mod:`app.domain.compaction.patterns`)
repeat only when byte-identical.
"""

from __future__ import annotations

import re
from typing import Final

from app.domain.compaction.lineage import (
    MARKER_RE,
    Compacted,
    Span,
    body_of,
    coerce,
    finish,
    marker,
    span_of,
    where,
)
from app.domain.compaction.patterns import is_protected

__all__ = ["KIND", "VOLATILE_RE", "dedup_repeats", "poll_key"]

KIND: Final = "dedup"
VOLATILE_RE: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"  # ISO timestamp
    r"|\b\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?\b"  # clock time, eta 0:00:01
    r"|\d+(?:\.\d+)?\s?%"  # percentage
    r"|\d+(?:\.\d+)?\s?(?:[kKMGT]i?B|B|bytes)(?:/s)?\b"  # size, transfer rate
    r"|\d+(?:\.\d+)?\s?(?:it/s|s/it|ms|s|secs?|seconds|min)\b"  # duration, iteration rate
    r"|\b\d+/\d+\b"  # counter 3/24
    r"|[#=█▉▊▋▌▍▎▏░▒▓━─╸╺>.*-]{3,}"  # progress-bar glyphs
)
_BLANKS = re.compile(r"\s+")


def poll_key(body: str) -> str:
    """What two lines must share to count as repetitions of one poll (module docstring):
    the line with its volatile values masked and blank runs collapsed. Protected lines
    repeat only when byte-identical; :func:`dedup_repeats` checks that separately."""
    return _BLANKS.sub(" ", VOLATILE_RE.sub("\x00", body)).strip()


def dedup_repeats(value: str | Compacted, *, min_repeats: int = 3, max_period: int = 4) -> Compacted:
    """Collapse runs of at least ``min_repeats`` consecutive repetitions of a block of
    1..``max_period`` lines to first block + marker + last block.

    Scanning left to right, at each line the period covering the most lines wins (the
    shortest on a tie). A run collapses only when the marker is shorter (UTF-8 bytes) than
    the repetitions it replaces, so short runs of blank or tiny lines stay as they are.
    The marker reads ``[ctxd: N more identical|similar lines omitted (lines a-b of H); the
    last one follows]`` (for a block: ``N more repetitions of the K lines above``); lines
    ``a-b`` are raw lines of the payload with handle ``H``.

    Deterministic; idempotent (marker lines never repeat); every output line is an input
    line or a marker. Input: a raw payload or an earlier technique's output. Returns the
    input unchanged when nothing collapses. Raises nothing (``min_repeats`` below 3 or
    ``max_period`` below 1 are clamped).
    """
    inp = coerce(value)
    min_repeats = max(3, min_repeats)
    max_period = max(1, max_period)
    lines = inp.lines
    bodies = [body_of(line) for line in lines]
    keys: list[str | None] = [None if MARKER_RE.match(b) else poll_key(b) for b in bodies]
    protected: dict[int, bool] = {}

    def same(a: int, b: int) -> bool:
        if keys[a] is None or keys[a] != keys[b]:
            return False
        if bodies[a] == bodies[b]:
            return True
        for k in (a, b):
            if k not in protected:
                protected[k] = is_protected(bodies[k])
        return not (protected[a] or protected[b])

    n = len(lines)
    out: list[str] = []
    origins: list[Span | None] = []
    runs = omitted_lines = 0
    i = 0
    while i < n:
        best: tuple[int, int] | None = None  # (period, repetitions)
        for period in range(1, max_period + 1):
            if i + period * min_repeats > n:
                break
            if None in keys[i:i + period]:
                continue
            reps = 1
            while i + (reps + 1) * period <= n and all(same(i + k, i + reps * period + k) for k in range(period)):
                reps += 1
            if reps >= min_repeats and (best is None or reps * period > best[0] * best[1]):
                best = (period, reps)
        if best is not None:
            period, reps = best
            mid_start, mid_end = i + period, i + (reps - 1) * period  # omitted: [mid_start, mid_end)
            identical = all(bodies[i + r * period + k] == bodies[i + k] for r in range(1, reps) for k in range(period))
            what = "identical" if identical else "similar"
            noun = f"{what} lines" if period == 1 else f"{what} repetitions of the {period} lines above"
            note = marker(f"{reps - 2} more {noun} omitted ({where(span_of(inp.origins[mid_start:mid_end]), inp.source)});"
                          f" the last {'one' if period == 1 else 'repetition'} follows")
            if len(note.encode("utf-8")) < sum(len(line.encode("utf-8", "surrogatepass")) for line in lines[mid_start:mid_end]):
                out.extend(lines[i:mid_start])
                origins.extend(inp.origins[i:mid_start])
                out.append(note)
                origins.append(None)
                out.extend(lines[mid_end:i + reps * period])
                origins.extend(inp.origins[mid_end:i + reps * period])
                runs += 1
                omitted_lines += mid_end - mid_start
                i += reps * period
                continue
        out.append(lines[i])
        origins.append(inp.origins[i])
        i += 1
    return finish(inp, out, origins, kind=KIND, params={"min_repeats": min_repeats, "max_period": max_period},
                  stats={"runs": runs, "omitted_lines": omitted_lines})
