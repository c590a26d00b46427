"""Storage of recall (issue 14 item 3): the searchable texts of events, their trigram
lookups, and keyset pages of the event log. Rows never leave ``app/store``; services call
these and never commit."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Row, insert, select, text

from app.store.repository import Db, core, dialect_name
from app.store.tables import EventRow, EventTextRow

#: Candidate rows one search reads at most (newest first): ranking happens on these.
MAX_CANDIDATES = 2000


def add_event_texts(db: Db, session_id: str, rows: Sequence[tuple[int, str, str]]) -> None:
    """Index ``(seq, field, text)`` rows of the session's new events (one INSERT; on SQLite
    the triggers of migration 0010_event_search feed the FTS5 table)."""
    if rows:
        core(db).execute(insert(EventTextRow),
                         [{"session_id": session_id, "seq": seq, "field": field, "text": value}
                          for seq, field, value in rows])


def _like_pattern(query: str) -> str:
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_SQLITE_SEARCH = text(
    "SELECT t.seq, t.field, t.text FROM event_texts_fts AS f JOIN event_texts AS t ON t.id = f.rowid "
    "WHERE event_texts_fts MATCH :phrase AND t.session_id = :sid AND t.seq < :below "
    "ORDER BY t.seq DESC, t.field LIMIT :cap")


def candidate_texts(db: Db, session_id: str, query: str, *, below_seq: int = 2**31 - 1,
                    cap: int = MAX_CANDIDATES) -> list[tuple[int, str, str]]:
    """``(seq, field, text)`` of the session's indexed texts that hold ``query`` ignoring
    case (``seq < below_seq``), newest first, at most ``cap`` rows: through the FTS5
    ``trigram`` table on SQLite (a phrase of the query's trigrams: a substring match),
    ``ILIKE`` served by the ``pg_trgm`` GIN index on PostgreSQL. The query has 3 or more
    characters (app/domain/recall.py ``check_query``). Case folding differs a little
    between the two (ASCII and Unicode rules); the caller matches again exactly."""
    conn = core(db)
    if dialect_name(conn) == "sqlite":
        phrase = '"' + query.replace('"', '""') + '"'
        rows: Iterable[Any] = conn.execute(_SQLITE_SEARCH, {"phrase": phrase, "sid": session_id,
                                                                 "below": below_seq, "cap": cap})
    else:
        table = EventTextRow.__table__
        rows = conn.execute(select(table.c.seq, table.c.field, table.c.text)
                            .where(table.c.session_id == session_id, table.c.seq < below_seq,
                                   table.c.text.ilike(_like_pattern(query), escape="\\"))
                            .order_by(table.c.seq.desc(), table.c.field).limit(cap))
    return [(int(row[0]), str(row[1]), str(row[2])) for row in rows]


_PAGE = (select(EventRow.seq, EventRow.event_id, EventRow.kind, EventRow.body, EventRow.created_at)
         .order_by(EventRow.seq))


def event_page(db: Db, session_id: str, *, after_seq: int, limit: int) -> list[Row[Any]]:
    """Up to ``limit`` events of the session with ``seq > after_seq``, in seq order (keyset:
    the unique (session_id, seq) index serves it; rows appended meanwhile come on a later
    page, none is skipped or repeated)."""
    return list(core(db).execute(_PAGE.where(EventRow.session_id == session_id, EventRow.seq > after_seq)
                                 .limit(limit)))


def events_by_seq(db: Db, session_id: str, seqs: Iterable[int]) -> dict[int, Row[Any]]:
    """The session's events of ``seqs``: seq -> row (chunks of 500)."""
    wanted = sorted(set(seqs))
    out: dict[int, Row[Any]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        for row in core(db).execute(_PAGE.where(EventRow.session_id == session_id, EventRow.seq.in_(chunk))):
            out[int(row.seq)] = row
    return out

