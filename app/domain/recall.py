"""Recall of evicted and folded content (issue 14 item 3; seed 001 "Agentic retrieval: let
the model fetch", MemGPT's paging of the context window against an external store).

Pure, standard library. What of an event is searchable (:func:`searchable_texts`), where a
query occurs in a text as 1-based inclusive line ranges (:func:`find_ranges`, the lines
``GET .../handles/{h}?lines=a:b`` slices: ``"\\n"`` ends a line, app/domain/text.py
``split_lines``), how hits rank (:func:`rank`), and the optional ``recall`` tool a
profile adds to every request's root (:data:`RECALL_TOOL`, :func:`with_recall_tool`).

Queries match as substrings, never as words: ``get_template_tag_modules`` is one string,
not the words ``get``, ``template``, ``tag`` and ``modules`` that a full-text parser would
split on ``_`` and stem. The store finds candidate texts with trigram indexes (SQLite
FTS5 ``trigram``, PostgreSQL ``pg_trgm``), which need at least 3 characters; shorter
queries are refused (:func:`check_query`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.domain.errors import InvalidParameter
from app.domain.types import Session

#: Trigram indexes index 3-character windows: a shorter query has no trigram to look up.
MIN_QUERY_CHARS = 3
MAX_QUERY_CHARS = 500

#: Rank tiers, best first (:func:`rank`).
WORD, EXACT, FOLDED = "word", "exact", "case_insensitive"
TIERS = (WORD, EXACT, FOLDED)

_WORD_CHAR = re.compile(r"\w")

#: The field of a tool result whose line ranges slice its handle (``?lines=a:b``).
PAYLOAD_FIELD = "payload"


def check_query(query: str) -> str:
    """``query`` when it can be searched: at least :data:`MIN_QUERY_CHARS` characters other
    than surrounding whitespace (trigram indexes) and at most :data:`MAX_QUERY_CHARS`, no
    NUL. Raises InvalidParameter (422) otherwise. Returns the query unchanged (surrounding
    whitespace is part of a substring query)."""
    if "\x00" in query:
        raise InvalidParameter("q must not contain a NUL character", parameter="q")
    if len(query.strip()) < MIN_QUERY_CHARS:
        raise InvalidParameter(f"q must have at least {MIN_QUERY_CHARS} characters besides surrounding whitespace "
                               f"(the search is a trigram substring search), got {query!r}", parameter="q",
                               min_chars=MIN_QUERY_CHARS)
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidParameter(f"q must have at most {MAX_QUERY_CHARS} characters, got {len(query)}", parameter="q",
                               max_chars=MAX_QUERY_CHARS)
    return query


def index_text(text: str) -> str:
    """``text`` as the search index stores it: NUL characters (which PostgreSQL text cannot
    hold) become U+FFFD, one character for one, so line numbers and offsets are the text's."""
    return text.replace("\x00", "\ufffd")


def searchable_texts(kind: str, body: Mapping[str, Any], payload: str | None = None) -> list[tuple[str, str]]:
    """``(field, text)`` pairs of an event as stored (its body after ingest) that search
    covers: a tool result's ``payload`` (``payload``: the text requests render, its redacted
    view when ingest redacted it: secrets are not searchable), a message's ``content``,
    ``reasoning`` and ``tool_calls`` (one line per call: ``name arguments``), a step's,
    hypothesis', obligation's, plan's, document's or conclusion's ``text`` (issue 16), an
    artifact write's ``artifact``. Empty texts are
    left out."""
    pairs: list[tuple[str, str]] = []
    if kind == "tool_result":
        pairs.append((PAYLOAD_FIELD, payload or ""))
    elif kind == "message":
        pairs.append(("content", str(body.get("content") or "")))
        pairs.append(("reasoning", str(body.get("reasoning") or "")))
        calls = body.get("tool_calls") or []
        pairs.append(("tool_calls", "\n".join(f"{c.get('name', '')} {c.get('arguments', '')}" for c in calls)))
    elif kind in ("step", "hypothesis", "obligation", "plan", "document", "conclusion", "child_conclusion"):
        pairs.append(("text", str(body.get("text") or "")))
    elif kind == "artifact_write":
        pairs.append(("artifact", str(body.get("artifact") or "")))
    return [(field, index_text(text)) for field, text in pairs if text]


@dataclass(frozen=True)
class LineRange:
    """Lines ``start`` to ``end`` (1-based, inclusive) of a text holding matches of a query:
    ``exact`` when one of them has the query's case, ``word`` when one of those also stands
    alone (no letter, digit or ``_`` right before or after it); ``matches``: how many."""

    start: int
    end: int
    exact: bool
    word: bool
    matches: int
    #: the first match in the range: its character offset in the text and its length
    first: int = 0
    first_chars: int = 0

    @property
    def lines(self) -> str:
        """``"a:b"``, as ``GET .../handles/{h}?lines=a:b`` takes it."""
        return f"{self.start}:{self.end}"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    at = text.find("\n")
    while at != -1:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


def line_count(text: str) -> int:
    """Lines of ``text`` as ``split_lines`` counts them (a last line without ``"\\n"`` counts)."""
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def find_ranges(text: str, query: str, *, context: int = 0, max_matches: int = 1000) -> list[LineRange]:
    """The line ranges of ``text`` holding ``query`` (case-insensitive substring; a query
    spanning lines gives a range over them), widened by ``context`` lines each side within
    the text, overlapping ranges merged; in text order. At most ``max_matches``
    occurrences are looked at."""
    if not text or not query:
        return []
    starts = _line_starts(text)
    last = line_count(text)
    found: list[LineRange] = []
    for index, match in enumerate(re.finditer(re.escape(query), text, flags=re.IGNORECASE)):
        if index >= max_matches:
            break
        begin, end = match.span()
        exact = text[begin:end] == query
        word = exact and not (begin > 0 and _WORD_CHAR.match(text[begin - 1]) and _WORD_CHAR.match(query[0])) \
            and not (end < len(text) and _WORD_CHAR.match(text[end]) and _WORD_CHAR.match(query[-1]))
        first = bisect.bisect_right(starts, begin)
        final = bisect.bisect_right(starts, max(begin, end - 1))
        found.append(LineRange(max(1, first - context), min(last, final + context), exact, bool(word), 1,
                               begin, end - begin))
    merged: list[LineRange] = []
    for item in found:
        if merged and item.start <= merged[-1].end:
            prev = merged[-1]
            merged[-1] = LineRange(prev.start, max(prev.end, item.end), prev.exact or item.exact,
                                   prev.word or item.word, prev.matches + 1, prev.first, prev.first_chars)
        else:
            merged.append(item)
    return merged


def rank(ranges: list[LineRange]) -> str | None:
    """The tier of an event's hits: ``word`` (the query exactly, standing alone), ``exact``
    (the query's case, inside a longer word), ``case_insensitive``; None without a hit."""
    if not ranges:
        return None
    if any(r.word for r in ranges):
        return WORD
    return EXACT if any(r.exact for r in ranges) else FOLDED


def sort_key(tier: str, seq: int) -> tuple[int, int]:
    """Order of search hits: better tier first, then newest (highest seq) first."""
    return TIERS.index(tier), -seq


def cursor_of(tier: str, seq: int) -> str:
    """The opaque page cursor after a hit: ``<tier index>.<seq>``."""
    return f"{TIERS.index(tier)}.{seq}"


def parse_cursor(cursor: str) -> tuple[int, int]:
    """``(tier index, seq)`` of a :func:`cursor_of` cursor; the next page holds the hits whose
    :func:`sort_key` is greater. Raises InvalidParameter (422) for a cursor this API did not make."""
    try:
        tier_text, seq_text = cursor.split(".", 1)
        tier, seq = int(tier_text), int(seq_text)
    except ValueError:
        raise InvalidParameter(f"cursor {cursor!r} is not a next_cursor of this API", parameter="cursor") from None
    if not 0 <= tier < len(TIERS) or seq < 0 or not tier_text.isdigit() or not seq_text.isdigit():
        raise InvalidParameter(f"cursor {cursor!r} is not a next_cursor of this API", parameter="cursor")
    return tier, -seq


# -- the recall tool ----------------------------------------------------------------------

RECALL_TOOL_NAME = "recall"

#: The ``recall`` tool declaration (OpenAI function format) a profile with ``recall = true``
#: adds after the session's own tools, in the root: constant bytes, so it never moves the
#: cached prefix; counted under the ``tools`` role like the others. The agent's loop
#: executes a call (the model never reaches ctxd): ``query`` -> ``GET
#: /v1/sessions/{id}/search?q=<query>&context=<context>``; ``handle`` (+ ``lines``) ->
#: ``GET /v1/sessions/{id}/handles/<handle>?lines=<lines>`` (README "Recall").
RECALL_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": RECALL_TOOL_NAME,
        "description": (
            "Recall earlier content of this task that is no longer shown in full (older tool outputs and messages "
            "were elided or folded into the progress record to fit the context window). Give `query` (at least 3 "
            "characters, matched exactly as a substring, case-insensitive, e.g. an identifier, a file path or an "
            "error text) to find the events that held it, with their handles and matching line ranges; or give "
            "`handle` (and optionally `lines`, \"a:b\", 1-based inclusive) to read a stored output back."),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": MIN_QUERY_CHARS, "maxLength": MAX_QUERY_CHARS,
                          "description": "text to find in earlier outputs and messages"},
                "handle": {"type": "string", "description": "a handle named by an elision note or a search hit"},
                "lines": {"type": "string", "pattern": "^[0-9]+:[0-9]+$",
                          "description": "with handle: lines a:b of it (1-based, inclusive)"},
                "context": {"type": "integer", "minimum": 0, "maximum": 20,
                            "description": "with query: lines of context around each hit (default 2)"},
            },
        },
    },
}


def with_recall_tool(session: Session) -> Session:
    """``session`` with :data:`RECALL_TOOL` after its own tools, unless it already declares
    a tool named ``recall`` (the session's own declaration is then the one served)."""
    names = {str(t.get("function", t).get("name")) for t in session.tools}
    if RECALL_TOOL_NAME in names:
        return session
    return replace(session, tools=(*session.tools, RECALL_TOOL))
