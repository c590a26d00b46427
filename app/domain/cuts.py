"""Head + tail cuts of a long text that tokenize only a window at each end, and the size of
what they leave out (issue 9, item 7; seed 001 ``bound_tool_output``).

A capped tool output keeps about ``head_tokens`` tokens from its start and ``tail_tokens``
from its end. Tokenizing the whole payload to place those cuts costs seconds for a 2 MB
output; :func:`windowed_head_tail` applies the meter's exact cut to a character window at
each end instead, sized from the token counts (``WINDOW_CHARS_PER_TOKEN`` characters a
token, doubled while the window holds too few tokens), so the work follows the cap, not
the payload.

Why the cuts are right: a window holding ``WINDOW_MARGIN`` tokens more than it gives up has
the whole text's first (last) tokens up to the margin, since where a token ends depends
only on nearby text; the head stays an exact prefix and the tail an exact suffix (the
meter's cut guarantees it on the window, and a window is itself a prefix or a suffix).
The same text and counts always give the same cuts. When the windows would meet, the
whole text (then a few times the cap at most) is cut exactly.

:func:`elided_span` describes the text between the cuts cheaply and deterministically:
its UTF-8 bytes and the lines it touches, counted on ``"\\n"`` only (as
``GET /v1/handles/{h}?lines=a:b`` counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: First guess of characters per token for a window; a window holding too few tokens is
#: doubled, so this sets the cost, not the result (code and logs average 3-4 characters).
WINDOW_CHARS_PER_TOKEN = 8
#: Tokens a window holds beyond what it gives up, so the cut is not near the window's edge.
WINDOW_MARGIN = 16

#: A meter's exact cut of a whole text: (head, tail, elided tokens); (text, "", 0) when it fits.
Cut = Callable[[str, int, int], tuple[str, str, int]]


def _end_window(text: str, keep: int, cut: Cut, *, from_end: bool) -> str:
    """The head (or, ``from_end``, the tail) of about ``keep`` tokens, cut in the shortest
    window (doubling) at that end of ``text`` that holds more than ``keep + WINDOW_MARGIN``
    tokens."""
    size = (keep + WINDOW_MARGIN) * WINDOW_CHARS_PER_TOKEN
    while True:
        if size >= len(text):
            piece = text
        else:
            piece = text[-size:] if from_end else text[:size]
        head, tail, elided = cut(piece, WINDOW_MARGIN, keep) if from_end else cut(piece, keep, WINDOW_MARGIN)
        if elided or piece is text:
            return tail if from_end else head
        size *= 2


def windowed_head_tail(text: str, head_tokens: int, tail_tokens: int, cut: Cut) -> tuple[str, str] | None:
    """``(head, tail)``: about ``head_tokens`` tokens from the start of ``text`` and
    ``tail_tokens`` from its end, or None when the text has no more than
    ``head_tokens + tail_tokens`` tokens (it then enters whole). ``cut`` is the meter's
    exact cut (it tokenizes what it is given); only windows next to the cuts are given to
    it unless the text is short (module docstring)."""
    window = (head_tokens + tail_tokens + 2 * WINDOW_MARGIN) * WINDOW_CHARS_PER_TOKEN
    if len(text) <= 2 * window:
        head, tail, elided = cut(text, head_tokens, tail_tokens)
        return (head, tail) if elided else None
    head = _end_window(text, head_tokens, cut, from_end=False) if head_tokens else ""
    tail = _end_window(text, tail_tokens, cut, from_end=True) if tail_tokens else ""
    if len(head) + len(tail) >= len(text):  # the windows met: cut the whole text exactly
        head, tail, elided = cut(text, head_tokens, tail_tokens)
        return (head, tail) if elided else None
    return head, tail


@dataclass(frozen=True)
class ElidedSpan:
    """The text between a head and a tail: UTF-8 ``bytes``, and the lines it touches,
    ``first_line`` to ``last_line`` (1-based, inclusive; split on "\\n" only)."""

    bytes: int
    first_line: int
    last_line: int

    @property
    def lines(self) -> int:
        return self.last_line - self.first_line + 1


def elided_span(text: str, head: str, tail: str) -> ElidedSpan:
    """The span of ``text`` between its prefix ``head`` and its suffix ``tail`` (which must
    not overlap and leave at least one character between them)."""
    start, end = len(head), len(text) - len(tail)
    size = len(text[start:end].encode("utf-8", "surrogatepass"))
    first = text.count("\n", 0, start) + 1
    last = first + text.count("\n", start, end - 1)  # the last elided character's line
    return ElidedSpan(size, first, last)


def payload_size(text: str) -> tuple[int, int]:
    """(UTF-8 bytes, lines) of ``text``; lines are split on "\n" only, a last line without
    one counts (as ``GET /v1/handles/{h}?lines=a:b`` counts them)."""
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    return len(text.encode("utf-8", "surrogatepass")), lines
