"""Terminal-control stripping (seed 000 section 4.5.1, table 6, second row).

Keeps, per terminal line, the plain text a terminal would finally show: ANSI escape
sequences are removed (CSI including private-mode ``ESC[?25l``, OSC ended by BEL or ST,
DCS/SOS/PM/APC strings, two-byte escapes, 8-bit CSI), other C0/C1 control characters are
dropped (tab kept), and the line-local cursor controls are applied: carriage return goes to
column 0 and what follows overwrites, backspace steps back one column, ``ESC[K`` erases
(to the end, to the start, the whole line), ``ESC[nG`` / ``ESC[nC`` / ``ESC[nD`` move the
cursor. Cursor movement across lines (``ESC[A``, ``ESC[E``, ``ESC[H``, ``ESC[J``...) is
removed, not emulated. A ``\\r\\n`` line ending is a line ending, not an overwrite.

One deliberate departure from a terminal: a line whose text is erased and never redrawn
(``Retrieving image: 43%ESC[2K``, peer report nex-agi/NexAU#8) keeps the text it showed
just before the erase, since the alternative is a blank line that silently drops the last
progress state. Table 6: this technique can silently drop "timing or ordering signals
carried only by the redraws".

Peer faults turned into tests: vorn-run/vorn#470 (private-mode CSI left as ``[?25l``;
``\\r`` deleted instead of applied, turning ``Working`` redraws into ``WoWorkWorking``;
``\\r\\n`` read as an erase), lucascaro/hive#296 (OSC with BEL and ST, control-only lines,
UTF-8, tabs), Kilo-Org/kilocode#6811 (every progress frame kept as its own line).
"""

from __future__ import annotations

import re
from typing import Final

from app.domain.compaction.lineage import Compacted, Span, body_of, coerce, finish, span_of

__all__ = ["KIND", "render_line", "strip_terminal"]

KIND: Final = "terminal"
_TOKEN: Final = re.compile(
    r"(?P<csi>(?:\x1b\[|\x9b)(?P<params>[\x30-\x3f]*)[\x20-\x2f]*(?P<final>[\x40-\x7e])?)"
    r"|(?P<osc>\x1b\](?:[^\x07\x1b]|\x1b(?!\\))*(?:\x07|\x1b\\)?)"
    r"|(?P<string>\x1b[PX^_](?:[^\x1b]|\x1b(?!\\))*(?:\x1b\\)?)"
    r"|(?P<esc>\x1b[\x20-\x2f]*[\x30-\x7e]?)"
    r"|(?P<cr>\r)|(?P<bs>\x08)"
    r"|(?P<ctl>[\x00-\x08\x0a-\x1f\x7f-\x9f])"
    r"|(?P<text>[^\x00-\x08\x0a-\x1f\x7f-\x9f]+)"
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _number(params: str, default: int) -> int:
    first = params.split(";", 1)[0]
    return int(first) if first.isdigit() else default


def render_line(raw: str) -> tuple[str, int]:
    """What a terminal finally shows for one line ``raw`` (no line ending; may contain
    carriage returns), trailing spaces removed, and the number of control sequences and
    characters consumed. Pure; see the module docstring for the rules."""
    buf: list[str] = []
    col = 0
    erased = ""
    controls = 0
    for m in _TOKEN.finditer(raw):
        kind = m.lastgroup
        if kind == "text":
            for ch in m.group():
                if col < len(buf):
                    buf[col] = ch
                else:
                    buf.extend(" " * (col - len(buf)))
                    buf.append(ch)
                col += 1
            continue
        controls += 1
        if kind == "cr":
            col = 0
        elif kind == "bs":
            col = max(0, col - 1)
        elif kind == "csi":
            final, params = m.group("final"), m.group("params")
            if final == "K":
                before = "".join(buf)
                mode = _number(params, 0)
                if mode == 0:
                    del buf[col:]
                elif mode == 1:
                    buf[:col + 1] = [" "] * min(col + 1, len(buf))
                elif mode == 2:
                    buf = []
                if before.strip() and not "".join(buf).strip():
                    erased = before
            elif final == "G":
                col = max(_number(params, 1), 1) - 1
            elif final == "C":
                col += max(_number(params, 1), 1)
            elif final == "D":
                col = max(0, col - max(_number(params, 1), 1))
    shown = "".join(buf).rstrip(" ")
    if not shown.strip() and erased:
        shown = erased.rstrip(" ")
    return shown, controls


def strip_terminal(value: str | Compacted) -> Compacted:
    """Terminal-control stripping of a raw payload or an earlier technique's output.

    A terminal line is a run of input lines joined by lone carriage returns (the handle API
    counts a lone ``\\r`` as a line end, so one terminal line may span several raw lines;
    its origin is that span). Lines without control characters pass through unchanged; the
    others become :func:`render_line` of their text, with their line ending kept.

    Deterministic; idempotent (the output has no control character but tabs and line
    endings); an input without control characters is returned unchanged (no record).
    """
    inp = coerce(value)
    lines = inp.lines
    out: list[str] = []
    origins: list[Span | None] = []
    rendered = controls = 0
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) - 1 and lines[j].endswith("\r") and not lines[j].endswith("\r\n"):
            j += 1
        if j == i and not _CONTROL.search(body_of(lines[i])) and not (lines[i].endswith("\r") and not lines[i].endswith("\r\n")):
            out.append(lines[i])
            origins.append(inp.origins[i])
            i += 1
            continue
        last = lines[j]
        ending = last[len(body_of(last)):]
        if ending == "\r":  # a lone CR at the very end: a cursor move, not a line ending
            ending = ""
        raw = "".join(lines[i:j]) + body_of(last) + ("\r" if last.endswith("\r") and not last.endswith("\r\n") else "")
        shown, used = render_line(raw)
        out.append(shown + ending)
        origins.append(span_of(inp.origins[i:j + 1]))
        rendered += 1
        controls += used
        i = j + 1
    return finish(inp, out, origins, kind=KIND, params={}, stats={"lines_rendered": rendered, "controls_removed": controls})
