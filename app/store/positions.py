"""Provider message positions of a session (issue 14 item 1; table ``message_positions``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy import insert as core_insert
from sqlalchemy.orm import Session as OrmSession

from app.store.tables import MessagePositionRow, utcnow


def next_position(db: OrmSession, session_id: str) -> int:
    """The position the session's next new provider message takes: positions are dense
    from 0 (the Anthropic system prompt's -1 aside), so one past the largest."""
    largest = db.execute(select(func.max(MessagePositionRow.position))
                         .where(MessagePositionRow.session_id == session_id)).scalar()
    return 0 if largest is None or largest < 0 else int(largest) + 1


def stored_positions(db: OrmSession, session_id: str, positions: Sequence[int]) -> dict[int, tuple[str, list[int]]]:
    """position -> (sha256, seqs of its events) of the messages stored at ``positions``
    (the ones that exist)."""
    if not positions:
        return {}
    rows = db.execute(select(MessagePositionRow.position, MessagePositionRow.sha256, MessagePositionRow.seqs)
                      .where(MessagePositionRow.session_id == session_id,
                             MessagePositionRow.position.between(min(positions), max(positions))))
    wanted = set(positions)
    return {int(p): (str(h), [int(s) for s in seqs or []]) for p, h, seqs in rows if p in wanted}


def add_positions(db: OrmSession, session_id: str, rows: Sequence[tuple[int, str, list[int]]]) -> None:
    """Record new positions: (position, sha256, seqs of its events)."""
    if rows:
        now = utcnow()
        db.execute(core_insert(MessagePositionRow), [
            {"session_id": session_id, "position": p, "sha256": h, "seqs": seqs, "created_at": now}
            for p, h, seqs in rows])
