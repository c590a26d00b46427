"""Extended grapheme cluster boundaries (Unicode UAX #29) for head + tail cuts: what a
reader sees as one character (a family emoji joined with U+200D, a flag, a letter with its
combining marks, CRLF) is never split. The ``regex`` module's ``\\X`` matches one cluster.

:func:`snap` moves a cut position to the cluster boundary at or before it (a head's end) or
at or after it (a tail's start), looking at a window of the text around the position that
starts where a cluster surely starts (after a space or a line break that no combining mark
follows), so a cut costs the same on a 2 MB output as on a short one.
"""

from __future__ import annotations

from typing import Final

import regex

__all__ = ["snap"]

_CLUSTER: Final = regex.compile(r"\X", regex.DOTALL)
#: characters looked at before a position to find a sure cluster start
_WINDOW: Final = 256


def _safe_start(text: str, pos: int) -> int:
    """A position at or before ``pos`` where a cluster starts: just after the last space or
    line break (neither joins with what follows it, except CR before LF) before ``pos``
    within the window, else the window's start (a longer run without a blank: at worst the
    boundary found there is off by part of one pathological cluster)."""
    low = max(0, pos - _WINDOW)
    for i in range(pos - 1, low - 1, -1):
        if text[i] in " \n\t" and not (text[i] == "\n" and i > 0 and text[i - 1] == "\r" and i == pos - 1):
            return i + 1 if i + 1 <= pos else i
    return low


def snap(text: str, pos: int, *, forward: bool) -> int:
    """The grapheme cluster boundary nearest ``pos`` on one side: at or before it (``forward``
    False: where a head may end) or at or after it (True: where a tail may start)."""
    if pos <= 0 or pos >= len(text):
        return max(0, min(pos, len(text)))
    at = _safe_start(text, pos)
    end = min(len(text), pos + _WINDOW)
    for m in _CLUSTER.finditer(text, at, end):
        if m.start() <= pos < m.end():
            if m.start() == pos:
                return pos
            return int(m.end() if forward else m.start())
        if m.start() > pos:
            break
    return pos
