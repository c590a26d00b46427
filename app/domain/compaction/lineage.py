"""Lines, lineage records and markers shared by the deterministic compaction techniques.

Every technique (seed 000 section 4.5.1, table 6) maps a :class:`Compacted` value to a new
one. A :class:`Compacted` keeps, for each of its lines, the span of lines of the **raw
payload** it comes from (``origins``), so techniques compose and every record and marker
names lines of the raw payload, whatever ran before. The raw payload is addressed by its
handle (sha256 hex of its UTF-8 bytes, the handle ctxd stores tool results under, DESIGN.md
section 2), and its lines are numbered exactly as ``GET /v1/handles/{handle}?lines=a:b``
numbers them (1-based, split at ``\\n`` only, as ``sed -n`` and ``grep -n`` count:
:func:`app.domain.text.split_lines`; a lone ``\\r`` is an ordinary character). So a reader of a :class:`Transform` finds the raw bytes behind every
kept or omitted range with one checked read (seed 000 section 4.5.2: "before evicting any
raw payload, the runtime records what happened to the omitted material").

Output lines are of two kinds only:

* a line of the input, unchanged, or cut (a prefix of it followed by :func:`cut_line`'s
  inline marker), or rendered by terminal-control stripping;
* a marker line made by ctxd: it starts with ``[ctxd: `` and ends with ``]``
  (:data:`MARKER_RE`) and has no origin (``None``).

Standard library only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.domain.text import split_lines  # the handle API's line rule: "\n" only

__all__ = [
    "MARKER_RE",
    "SHORT_HANDLE",
    "Compacted",
    "Span",
    "Transform",
    "as_source",
    "body_of",
    "cut_line",
    "finish",
    "handle_of",
    "marker",
    "merge_spans",
    "span_of",
    "split_lines",
    "where",
]

Span = tuple[int, int]
"""1-based inclusive range of lines of the raw payload: ``(first, last)``."""

SHORT_HANDLE: Final = 12  # hex chars of a handle printed in markers (the handle API resolves prefixes)
MARKER_RE: Final = re.compile(r"^\[ctxd: [^\r\n]*\]$")
CUT_RE: Final = re.compile(r" \[ctxd: line cut, \d+ more chars\]$")


def handle_of(text: str) -> str:
    """The handle of a payload: sha256 hex of its UTF-8 bytes (what ingestion stores)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def body_of(line: str) -> str:
    """A line without its ending (``\\r\\n`` or ``\\n``; a lone ``\\r`` is not one)."""
    if line.endswith("\r\n"):
        return line[:-2]
    if line.endswith("\n"):
        return line[:-1]
    return line


def merge_spans(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sorted, merged spans (adjacent spans join: (1, 2) and (3, 4) give (1, 4))."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _subtract(spans: Sequence[Span], minus: Sequence[Span]) -> tuple[Span, ...]:
    """Parts of merged ``spans`` not covered by merged ``minus``."""
    out: list[Span] = []
    j = 0
    for a, b in spans:
        start = a
        while j < len(minus) and minus[j][1] < start:
            j += 1
        k = j
        while k < len(minus) and minus[k][0] <= b:
            if minus[k][0] > start:
                out.append((start, minus[k][0] - 1))
            start = max(start, minus[k][1] + 1)
            k += 1
        if start <= b:
            out.append((start, b))
    return tuple(out)


def span_of(origins: Iterable[Span | None]) -> Span | None:
    """The raw span covered by some lines (their origins, markers ignored); None if none."""
    firsts, lasts = [], []
    for origin in origins:
        if origin is not None:
            firsts.append(origin[0])
            lasts.append(origin[1])
    return (min(firsts), max(lasts)) if firsts else None


def where(span: Span | None, handle: str) -> str:
    """How markers name raw lines: ``"lines 12-80 of 1a2b3c4d5e6f"`` (``?lines=12:80`` on
    ``GET /v1/handles/1a2b3c4d5e6f``); ``"of 1a2b3c4d5e6f"`` when the span is unknown."""
    short = handle[:SHORT_HANDLE]
    if span is None:
        return f"of {short}"
    a, b = span
    return f"line {a} of {short}" if a == b else f"lines {a}-{b} of {short}"


def marker(text: str) -> str:
    """A marker line: ``[ctxd: text]`` plus ``\\n``. ``text`` must not contain line breaks."""
    return f"[ctxd: {' '.join(text.split())}]\n"


def cut_line(body: str, max_chars: int) -> str:
    """``body`` unchanged if at most ``max_chars`` characters, else its first ``max_chars``
    characters plus an inline marker counting the characters cut (a suffix-stripped line).
    A line already cut to at most ``max_chars`` characters is left as it is (idempotent)."""
    if len(body) <= max_chars:
        return body
    done = CUT_RE.search(body)
    if done is not None and done.start() <= max_chars:
        return body
    return f"{body[:max_chars]} [ctxd: line cut, {len(body) - max_chars} more chars]"


@dataclass(frozen=True)
class Transform:
    """One technique's record in an item's lineage.

    ``kind`` names the technique; ``params`` its settings and ``stats`` what it counted
    (e.g. repeats collapsed, hunks folded), both as sorted ``(name, value)`` pairs;
    ``source`` is the handle of the raw payload; ``input_*`` / ``output_*`` measure this
    step's input and output text (bytes of UTF-8, lines as the handle API counts them);
    ``kept`` are the raw line spans the output shows (verbatim, cut, or rendered) and
    ``omitted`` the raw spans its input showed and its output no longer does (each is
    readable with ``GET /v1/handles/{source}?lines=a:b``).
    """

    kind: str
    params: tuple[tuple[str, Any], ...]
    stats: tuple[tuple[str, int], ...]
    source: str
    input_bytes: int
    input_lines: int
    output_bytes: int
    output_lines: int
    kept: tuple[Span, ...]
    omitted: tuple[Span, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for a manifest item's lineage."""
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "stats": dict(self.stats),
            "source": self.source,
            "input": {"bytes": self.input_bytes, "lines": self.input_lines},
            "output": {"bytes": self.output_bytes, "lines": self.output_lines},
            "kept": [list(s) for s in self.kept],
            "omitted": [list(s) for s in self.omitted],
        }


@dataclass(frozen=True)
class Compacted:
    """A (possibly compacted) text with its lineage.

    ``text`` is what enters the request; ``origins`` has one entry per line of ``text``
    (:func:`split_lines`): the raw span the line shows, or None for a ctxd marker.
    ``source`` / ``source_bytes`` / ``source_lines`` identify and measure the raw payload;
    ``lineage`` lists the transforms applied, oldest first (empty for the raw payload).
    """

    text: str
    source: str
    source_bytes: int
    source_lines: int
    origins: tuple[Span | None, ...]
    lineage: tuple[Transform, ...] = ()

    @property
    def lines(self) -> list[str]:
        return split_lines(self.text)

    @property
    def kept(self) -> tuple[Span, ...]:
        """Raw spans shown by the text (merged)."""
        return merge_spans(o for o in self.origins if o is not None)

    def lineage_dicts(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.lineage]


def as_source(text: str, *, handle: str | None = None) -> Compacted:
    """The raw payload as a :class:`Compacted` with an empty lineage (line ``i`` shows raw
    line ``i``). ``handle`` defaults to :func:`handle_of` ``(text)``; pass the stored handle
    to avoid hashing again."""
    lines = split_lines(text)
    return Compacted(text=text, source=handle or handle_of(text), source_bytes=len(text.encode("utf-8", "surrogatepass")),
                     source_lines=len(lines), origins=tuple((i, i) for i in range(1, len(lines) + 1)))


def coerce(value: str | Compacted) -> Compacted:
    """A technique's input: a raw payload (str) or an earlier technique's output."""
    return as_source(value) if isinstance(value, str) else value


def finish(inp: Compacted, lines: Sequence[str], origins: Sequence[Span | None], *, kind: str,
           params: Mapping[str, Any], stats: Mapping[str, int]) -> Compacted:
    """Assemble a technique's output and append its :class:`Transform` to the lineage.

    ``lines`` are output lines (with endings; a line other than the last that lacks an
    ending gets ``\\n``; an empty line is dropped), ``origins`` their raw spans (None for
    markers). Returns ``inp``
    itself when the text did not change, so a technique that does not apply leaves no
    record."""
    pairs = [(line, origin) for line, origin in zip(lines, origins, strict=True) if line]  # "" shows nothing
    origins = [origin for _, origin in pairs]
    fixed = [line if (i == len(pairs) - 1 or line.endswith("\n")) else line + "\n"
             for i, (line, _) in enumerate(pairs)]
    text = "".join(fixed)
    if text == inp.text:
        return inp
    kept = merge_spans(o for o in origins if o is not None)
    before = merge_spans(o for o in inp.origins if o is not None)
    transform = Transform(
        kind=kind,
        params=tuple(sorted(params.items())),
        stats=tuple(sorted(stats.items())),
        source=inp.source,
        input_bytes=len(inp.text.encode("utf-8", "surrogatepass")),
        input_lines=len(inp.origins),
        output_bytes=len(text.encode("utf-8", "surrogatepass")),
        output_lines=len(fixed),
        kept=kept,
        omitted=_subtract(before, kept),
    )
    return Compacted(text=text, source=inp.source, source_bytes=inp.source_bytes, source_lines=inp.source_lines,
                     origins=tuple(origins), lineage=(*inp.lineage, transform))
