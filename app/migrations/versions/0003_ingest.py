"""ingest: tool calls per session (backfilled from the event log), payload token counts

Revision ID: 0003_ingest
Revises: 0002

Ingest checks a batch's call ids against this table instead of reading every message and
tool result of the session (issue 9, item 5). The backfill walks the existing events in
(session, seq) order, streaming, and inserts in chunks: each assistant message's tool
calls with its seq, each tool result's seq on its call. Data that the ingest checks would
have refused (a call id declared twice, a second result, a result naming no earlier
call) cannot be in the log; if some is, the first declaration and the first result win.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0003_ingest"
down_revision = "0002"
branch_labels = None
depends_on = None

CHUNK = 1000


def upgrade() -> None:
    op.create_table(
        "tool_calls",
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("call_seq", sa.Integer(), nullable=False),
        sa.Column("result_seq", sa.Integer(), nullable=True),
        sa.CheckConstraint("result_seq IS NULL OR result_seq > call_seq", name="ck_tool_calls_result_after_call"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id", "call_id"),
        sa.UniqueConstraint("session_id", "result_seq", name="uq_tool_calls_session_result_seq"),
    )
    backfill(op.get_bind())
    with op.batch_alter_table("payloads") as batch:
        batch.add_column(sa.Column("token_counts", sa.JSON(), nullable=True))


def backfill(conn: sa.Connection) -> int:
    """Fill ``tool_calls`` from the events; returns the number of calls inserted."""
    events = sa.table("events", sa.column("session_id", sa.String), sa.column("seq", sa.Integer),
                      sa.column("kind", sa.String), sa.column("body", sa.JSON))
    tool_calls = sa.table("tool_calls", sa.column("session_id", sa.String), sa.column("call_id", sa.String),
                          sa.column("call_seq", sa.Integer), sa.column("result_seq", sa.Integer))
    query = (sa.select(events.c.session_id, events.c.seq, events.c.kind, events.c.body)
             .where(events.c.kind.in_(["message", "tool_result"]))
             .order_by(events.c.session_id, events.c.seq))
    inserted = 0
    session: str | None = None
    calls: dict[str, dict[str, Any]] = {}

    def flush() -> None:
        nonlocal inserted
        rows = list(calls.values())
        for start in range(0, len(rows), CHUNK):
            conn.execute(tool_calls.insert(), rows[start:start + CHUNK])
        inserted += len(rows)
        calls.clear()

    for session_id, seq, kind, body in conn.execute(query.execution_options(yield_per=CHUNK)):
        if session_id != session:
            flush()  # one session's calls at a time: memory bounded by the largest session
            session = session_id
        if kind == "message":
            for call in (body or {}).get("tool_calls") or []:
                calls.setdefault(call["call_id"], {"session_id": session_id, "call_id": call["call_id"],
                                                   "call_seq": seq, "result_seq": None})
        else:
            call_id = (body or {}).get("call_id")
            row = calls.get(call_id) if isinstance(call_id, str) else None
            if row is not None and row["result_seq"] is None and seq > row["call_seq"]:
                row["result_seq"] = seq
    flush()
    return inserted


def downgrade() -> None:
    with op.batch_alter_table("payloads") as batch:
        batch.drop_column("token_counts")
    op.drop_table("tool_calls")
