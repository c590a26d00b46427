"""Text rules shared by ingestion, assembly and handle reads (pure, standard library).

* Strings in JSON-like values: :func:`iter_strings` walks keys and values with their
  location (``loc``, as pydantic reports it), :func:`first_surrogate` finds text that cannot
  be encoded as UTF-8 (a lone surrogate, e.g. the JSON escape ``\\ud83d`` of an emoji cut
  in half).
* Chat control tokens written as text (DESIGN.md section 6: "text from a payload or
  message never becomes a chat control token"): :func:`neutralise_control_text` breaks
  every control string of the profile (``TokenMeter.control_strings``) by inserting
  U+200B ZERO WIDTH SPACE after its first character, so the tokenizer encodes it as plain
  text; :func:`first_control_string` finds one in protected text that must stay verbatim.
* Lines: :func:`split_lines` splits on ``"\\n"`` only, as ``sed -n`` and ``grep -n`` count.
* Head + tail cuts (seed 001 ``bound_tool_output``): :func:`cut_head_tail` turns token spans
  into an exact prefix and an exact suffix of the text, cut between characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, AnyStr, Self

from app.domain.manifest import Transform

Loc = tuple[str | int, ...]

NEUTRALISER = "\u200b"  # ZERO WIDTH SPACE: no tokenizer of a shipped profile merges it back (tested)
NEUTRALISE = "neutralise_control_tokens"  # name of the manifest item's transform entry

_SURROGATE = re.compile("[\ud800-\udfff]")


def iter_strings(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Every string of a JSON-like ``value`` (dict keys included) with its location: a
    dict value at ``loc + (key,)``, a list item at ``loc + (index,)``, a key at the
    dict's own ``loc + (key,)``. Depth-first, in document order."""
    stack: list[tuple[Loc, Any]] = [(loc, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            yield where, item
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                if isinstance(key, str):
                    yield where + (key,), key
                children.append((where + (key,), child))
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(where + (i,), child) for i, child in enumerate(item)]))


def surrogate_at(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (not encodable as UTF-8), or None."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)
    return found.start() if found else None


def first_surrogate(value: Any, loc: Loc = ()) -> tuple[Loc, int] | None:
    """``(loc, index)`` of the first string in ``value`` holding a lone surrogate, or None."""
    for where, text in iter_strings(value, loc):
        at = surrogate_at(text)
        if at is not None:
            return where, at
    return None


def printable_loc(loc: Loc) -> list[str | int]:
    """``loc`` with every part encodable as UTF-8 (a key holding a lone surrogate is shown
    with backslash escapes), so it can go into a JSON error body."""
    return [p if isinstance(p, int) else p.encode("utf-8", "backslashreplace").decode("utf-8") for p in loc]


# -- chat control tokens -----------------------------------------------------------------

class ControlStrings(tuple[str, ...]):
    """A profile's control strings (``TokenMeter.control_strings``) together with the one
    regular expression that finds them: an explicit value built once (by the meter, when it
    loads its tokenizer) and passed in, instead of a process-global cache of compiled
    patterns. It is the tuple of strings itself (sorted as given), so it compares and
    hashes as that tuple; ``pattern`` matches the strings of at least 2 characters, longest
    first (so ``"<|im_start|>"`` wins over any shorter string it contains), or is None when
    there is none."""

    pattern: re.Pattern[str] | None

    def __new__(cls, strings: Iterable[str] = ()) -> Self:
        self = super().__new__(cls, strings)
        usable = sorted({s for s in self if len(s) >= 2}, key=lambda s: (-len(s), s))
        self.pattern = re.compile("|".join(re.escape(s) for s in usable)) if usable else None
        return self

    @classmethod
    def of(cls, strings: Sequence[str]) -> ControlStrings:
        """``strings`` as a ControlStrings (itself when it is one already; else compiled now)."""
        return strings if isinstance(strings, ControlStrings) else cls(strings)


def _break(match: re.Match[str]) -> str:
    found = match.group(0)
    return found[0] + NEUTRALISER + found[1:]


def neutralise_control_text(text: str, control_strings: Sequence[str]) -> tuple[str, int]:
    """``text`` with every control string broken by U+200B after its first character, and
    how many were broken (``control_strings``: a :class:`ControlStrings`, whose pattern is
    used as is, or any sequence of strings, compiled on this call). Deterministic (same text, same bytes: the prefix cache depends
    on it) and legible (every character stays; the one added character shows as
    ``\\u200b`` in an escaped view and is read by the model as plain text). Repeated until no control string is left, so overlapping occurrences cannot
    survive. Strings shorter than 2 characters cannot be broken this way and are ignored
    (no shipped profile has one)."""
    pattern = ControlStrings.of(control_strings).pattern
    if pattern is None or not text:
        return text, 0
    count = 0
    while True:
        text, n = pattern.subn(_break, text)
        if not n:
            return text, count
        count += n


def neutralise_transform(count: int) -> Transform:
    """The manifest item's transform for ``count`` neutralised control strings."""
    return Transform(NEUTRALISE, count=count,
                     note=f"{count} control-token string(s) broken with U+200B after the first character; "
                          "the handle keeps the text as posted")


def first_control_string(value: Any, control_strings: Sequence[str], loc: Loc = ()) -> tuple[Loc, str] | None:
    """``(loc, control string)`` of the first string in ``value`` (keys included) that
    spells a control string, or None."""
    pattern = ControlStrings.of(control_strings).pattern
    if pattern is None:
        return None
    for where, text in iter_strings(value, loc):
        found = pattern.search(text)
        if found:
            return where, found.group(0)
    return None


# -- lines -------------------------------------------------------------------------------

def split_lines(data: AnyStr) -> list[AnyStr]:
    """``data`` (bytes or str) as lines, each ending in its ``"\\n"`` (kept), as ``sed -n``
    and ``grep -n`` count them: ``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, U+2028 and the
    other separators that ``splitlines`` also breaks on are ordinary characters here; a
    last line without a newline still counts; no data, no line."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    parts = data.split(newline)
    lines = [part + newline for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


# -- head + tail cuts --------------------------------------------------------------------

#: a head (tail) cut moves back (forward) to a line boundary this many characters away at
#: most, and never by more than a quarter of what it keeps
LINE_MARGIN = 160

#: ``snap(text, pos, forward=...)``: the grapheme cluster boundary at or before ``pos``
#: (``forward`` False) or at or after it (True); the tokenizers layer gives one (UAX #29)
Snap = Callable[..., int]


def reader_cuts(text: str, head_end: int, tail_start: int, snap: Snap | None) -> tuple[int, int]:
    """Character cut positions moved onto what a reader sees: the head's end back to a
    grapheme cluster boundary (``snap``) and the tail's start forward to one, then each onto a
    line boundary when one lies within :data:`LINE_MARGIN` characters (and a quarter of the
    part it keeps) on the kept side. Both only shrink the parts, so the head stays an exact
    prefix within its tokens and the tail an exact suffix."""
    if snap is not None:
        head_end = snap(text, head_end, forward=False) if 0 < head_end < len(text) else head_end
        tail_start = snap(text, tail_start, forward=True) if 0 < tail_start < len(text) else tail_start
    margin = min(LINE_MARGIN, head_end // 4)
    if 0 < head_end < len(text) and text[head_end - 1] != "\n":
        nl = text.rfind("\n", head_end - margin, head_end)
        if nl >= 0:
            head_end = nl + 1
    margin = min(LINE_MARGIN, (len(text) - tail_start) // 4)
    if 0 < tail_start < len(text) and text[tail_start - 1] != "\n":
        nl = text.find("\n", tail_start, tail_start + margin)
        if nl >= 0 and nl + 1 < len(text):
            tail_start = nl + 1
    return head_end, tail_start


def cut_head_tail(text: str, spans: Sequence[tuple[int, int]], head_tokens: int, tail_tokens: int, *,
                  in_bytes: bool = False, snap: Snap | None = None) -> tuple[str, str, int]:
    """``(head, tail, elided tokens)`` of ``text`` kept to about ``head_tokens`` tokens at the
    start and ``tail_tokens`` at the end (seed 001 ``bound_tool_output``).

    ``spans`` are the tokens' ``(start, end)`` offsets in ``text`` (both non-decreasing):
    characters, or with ``in_bytes`` bytes of its UTF-8 encoding (a byte-level token may
    end inside a character). Only the spans within a few tokens of the two cuts are read
    (``CUT_MARGIN``), so a caller may compute just those. ``head`` is always an exact prefix
    and ``tail`` an exact suffix of ``text``, cut between characters: a cut inside a
    character moves outward so that the head keeps the character its last token ends in
    and the tail the one its first token starts in (never a U+FFFD); they never overlap.
    The elided count is the number of tokens lying wholly in neither (at least one). When
    nothing would be left out (``len(spans) <= head_tokens + tail_tokens``, or the rounded
    cuts meet) the text is returned whole: ``(text, "", 0)``.

    The cuts then move onto what a reader sees (:func:`reader_cuts`): grapheme cluster
    boundaries (``snap``, given by the tokenizers layer) and a nearby line boundary; the
    parts only shrink, and the elided count follows."""
    n = len(spans)
    if n <= head_tokens + tail_tokens:
        return text, "", 0
    data: bytes | str = text.encode("utf-8") if in_bytes else text
    size = len(data)
    head_end = min(spans[head_tokens - 1][1], size) if head_tokens else 0
    tail_start = max(spans[n - tail_tokens][0], 0) if tail_tokens else size
    if isinstance(data, bytes):
        while head_end < size and data[head_end] & 0xC0 == 0x80:  # inside a character: keep it whole
            head_end += 1
        while 0 < tail_start < size and data[tail_start] & 0xC0 == 0x80:
            tail_start -= 1
    if tail_start <= head_end:  # the rounded cuts meet: nothing is left out
        return text, "", 0
    if isinstance(data, bytes):  # to characters, onto what a reader sees, and back
        chars_head = len(data[:head_end].decode("utf-8"))
        chars_tail = len(text) - len(data[tail_start:].decode("utf-8"))
        chars_head, chars_tail = reader_cuts(text, chars_head, chars_tail, snap)
        head_end = len(text[:chars_head].encode("utf-8"))
        tail_start = size - len(text[chars_tail:].encode("utf-8"))
    else:
        head_end, tail_start = reader_cuts(text, head_end, tail_start, snap)
    # tokens wholly inside the head / the tail: the cuts moved a little from the token
    # boundaries (inward, or outward by less than one character), so only tokens next to a
    # cut change sides (the spans of the kept parts are there to read)
    in_head = head_tokens
    while in_head > 0 and spans[in_head - 1][1] > head_end:
        in_head -= 1
    while in_head < n and spans[in_head][1] <= head_end:
        in_head += 1
    first_tail = n - tail_tokens
    while first_tail < n and spans[first_tail][0] < tail_start:
        first_tail += 1
    while first_tail > in_head and spans[first_tail - 1][0] >= tail_start:
        first_tail -= 1
    head, tail = data[:head_end], data[tail_start:]
    # at least one: a character lies between the cuts even when every token touching it
    # straddles a cut (a byte-level token ending inside a combining mark, e.g. "e\u0301")
    elided = max(1, first_tail - in_head)
    if isinstance(head, bytes) and isinstance(tail, bytes):
        return head.decode("utf-8"), tail.decode("utf-8"), elided
    return str(head), str(tail), elided


CUT_MARGIN = 8  # tokens past each cut that cut_head_tail may read (a character is at most 4 bytes)
