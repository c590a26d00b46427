"""Use cases of recall (issue 14 item 3, seed 001 "Agentic retrieval"; MemGPT paging): the
event log paged by seq, and a substring search over it that names each hit's event,
handle and line ranges. Both read one snapshot; neither writes."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from sqlalchemy.orm import Session as OrmSession

from app.domain import recall
from app.domain.errors import InvalidParameter, SessionNotFound
from app.domain.text import split_lines
from app.store import repository as repo
from app.store import search as search_store
from app.store.tables import iso_utc

REPRESENTATIONS = ("summary", "full")
#: Lines of a text a ``summary`` shows (the head; the handle reads the rest).
SUMMARY_LINES = 5
#: Characters of one line range's text a search hit shows at most (the handle reads all).
SNIPPET_CHARS = 400  # a snippet: at most this many characters around its first match
#: Line ranges one search hit lists at most (``match_count`` counts them all).
RANGES_PER_HIT = 20


def _require_session(db: OrmSession, session_id: str) -> None:
    if repo.load_session_state(repo.core(db), session_id) is None:
        raise SessionNotFound(f"no session {session_id!r}", session_id=session_id)


def _head(value: str, lines: int = SUMMARY_LINES) -> dict[str, Any]:
    """The first ``lines`` lines of ``value`` with its size (characters, lines)."""
    parts = split_lines(value)
    return {"head": "".join(parts[:lines]), "lines": len(parts), "chars": len(value),
            "truncated": len(parts) > lines}


def _event_json(row: Any, payloads: dict[str, str], representation: str) -> dict[str, Any]:
    """An event row as the events page shows it: its stored fields (``handle``, for a
    redacted tool output ``view``: the handle of the text requests render), ``seq``,
    ``event_id``, ``kind``, ``created_at``; ``full``: a tool result's ``payload`` (its
    rendered text); ``summary``: instead of a tool result's payload and a message's
    content, their head (:data:`SUMMARY_LINES` lines) and size."""
    body = dict(row.body or {})
    created = row.created_at
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    out: dict[str, Any] = {"seq": int(row.seq), "event_id": row.event_id, "kind": row.kind,
                           "created_at": iso_utc(created) if created is not None else None}
    if row.kind == "tool_result":
        text = payloads.get(repo.text_handle(body), "")
        if representation == "full":
            body["payload"] = text
        else:
            body["payload_summary"] = _head(text)
    elif row.kind == "message" and representation == "summary":
        body["content_summary"] = _head(str(body.pop("content", "") or ""))
        if body.get("reasoning"):
            body["reasoning_summary"] = _head(str(body.pop("reasoning")))
    return out | body


def list_events(db: OrmSession, session_id: str, *, after_seq: int = 0, limit: int = 50,
                representation: str = "summary") -> dict[str, Any]:
    """A page of the session's event log: the events with ``seq > after_seq``, at most
    ``limit``, in seq order (keyset paging: every event comes on exactly one page, events
    posted between pages come on later ones). ``representation``: ``summary`` (payloads and
    message contents as their first lines and size, with the handle that reads them whole)
    or ``full`` (tool outputs' text whole).

    Returns ``{"session_id", "representation", "events": [...], "next_after_seq"}``;
    ``next_after_seq`` is the last seq of the page when more events follow, else None.

    Raises:
        SessionNotFound: no such session (404; another tenant's is the same 404).
        InvalidParameter: an unknown representation (422).
    """
    if representation not in REPRESENTATIONS:
        raise InvalidParameter(f"representation must be one of {', '.join(REPRESENTATIONS)}, got {representation!r}",
                               parameter="representation", supported=list(REPRESENTATIONS))
    _require_session(db, session_id)
    rows = search_store.event_page(db, session_id, after_seq=after_seq, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    handles = [repo.text_handle(r.body) for r in rows if r.kind == "tool_result"]
    payloads = repo.get_payload_texts(db, handles) if handles else {}
    events = [_event_json(r, payloads, representation) for r in rows]
    return {"session_id": session_id, "representation": representation, "events": events,
            "next_after_seq": events[-1]["seq"] if more and events else None}


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _snippet(value: str, item: recall.LineRange) -> dict[str, Any]:
    """A match's ``text``: its lines when they hold at most :data:`SNIPPET_CHARS` characters,
    else a window of at most that many around the first match, each cut side marked
    (``[... N chars]``), so a hit on a 600,000-character minified line shows the match; and
    where the match lies: ``offset`` and ``length`` in UTF-8 bytes of the field's text (for a
    payload, of the handle's bytes: ``GET .../handles/{handle}?offset=&length=`` reads it)."""
    lines = split_lines(value)
    begin = sum(len(line) for line in lines[:item.start - 1])
    text = "".join(lines[item.start - 1:item.end])
    where = {"offset": _utf8(value[:item.first]), "length": _utf8(value[item.first:item.first + item.first_chars])}
    if len(text) <= SNIPPET_CHARS:
        return {"text": text, **where}
    end = begin + len(text)
    room = max(0, SNIPPET_CHARS - item.first_chars)
    lo = max(begin, item.first - room // 2)
    hi = min(end, lo + max(SNIPPET_CHARS, item.first_chars))
    lo = max(begin, min(lo, hi - SNIPPET_CHARS))
    window = value[lo:hi]
    before = f"[... {lo - begin:,} chars] " if lo > begin else ""
    after = f" [... {end - hi:,} chars]" if hi < end else ""
    return {"text": before + window + after, "cut_before": lo - begin, "cut_after": end - hi, **where}


def search(db: OrmSession, session_id: str, query: str, *, limit: int = 10, context: int = 0,
           cursor: str | None = None) -> dict[str, Any]:
    """The session's events holding ``query`` (a substring, case-insensitive; 3 or more
    characters), best first: events where it stands alone as written (``word``), then
    where it is written so inside a longer word (``exact``), then in another case
    (``case_insensitive``); newest (highest seq) first within a tier.

    Each hit: ``seq``, ``event_id``, ``kind`` (with ``role`` / ``call_id``), ``rank``,
    ``handle`` (the event's stored payload) and ``matches``: per field, line ranges (1-based,
    inclusive, widened by ``context`` lines) with their text. A tool result's ``payload``
    ranges slice ``GET .../handles/{match.handle}?lines=a:b`` (the text requests render, its
    redacted view when ingest redacted secrets); other fields' ranges are lines of that
    field (the events page shows it). ``next_cursor`` pages on (None on the last page).
    At most ``search_store.MAX_CANDIDATES`` texts (newest first) are ranked: ``capped`` says
    when more held the query.

    Raises:
        SessionNotFound: no such session (404; another tenant's is the same 404).
        InvalidParameter: a query under 3 characters or over 500, a foreign cursor (422).
    """
    query = recall.check_query(query)
    after = recall.parse_cursor(cursor) if cursor is not None else None
    _require_session(db, session_id)
    found = search_store.candidate_texts(db, session_id, query)
    capped = len(found) >= search_store.MAX_CANDIDATES
    by_seq: dict[int, list[tuple[str, str, list[recall.LineRange]]]] = {}
    for seq, field, value in found:
        ranges = recall.find_ranges(value, query, context=context)
        if ranges:
            by_seq.setdefault(seq, []).append((field, value, ranges))
    ranked = sorted(((recall.rank([r for _, _, rs in fields for r in rs]) or recall.FOLDED, seq)
                     for seq, fields in by_seq.items()), key=lambda t: recall.sort_key(*t))
    if after is not None:
        ranked = [t for t in ranked if recall.sort_key(*t) > after]
    page, more = ranked[:limit], len(ranked) > limit
    rows = search_store.events_by_seq(db, session_id, [seq for _, seq in page])
    hits = []
    for tier, seq in page:
        row = rows[seq]
        body = row.body or {}
        hit: dict[str, Any] = {"seq": seq, "event_id": row.event_id, "kind": row.kind, "rank": tier,
                               "handle": body.get("handle")}
        for key in ("role", "call_id"):
            if key in body:
                hit[key] = body[key]
        matches: list[dict[str, Any]] = []
        for field, value, ranges in sorted(by_seq[seq], key=lambda f: f[0]):
            handle = repo.text_handle(body) if field == recall.PAYLOAD_FIELD else None
            matches.extend({"field": field, "handle": handle, "lines": r.lines, "start_line": r.start,
                            "end_line": r.end, "exact": r.exact, "word": r.word, "matches": r.matches,
                            **_snippet(value, r)} for r in ranges[:RANGES_PER_HIT])
        hit["match_count"] = sum(r.matches for _, _, ranges in by_seq[seq] for r in ranges)
        hit["matches"] = matches
        hits.append(hit)
    next_cursor = recall.cursor_of(*page[-1]) if more and page else None
    return {"session_id": session_id, "query": query, "hits": hits, "next_cursor": next_cursor, "capped": capped}
