"""event search: searchable texts of events, trigram-indexed; backfilled from the event log

Revision ID: 0010_event_search
Revises: 0009_progress_record

Issue 14 item 3 (recall of evicted and folded content). ``event_texts`` holds one row per
searchable field of an event (app/domain/recall.py ``searchable_texts``: a tool result's
rendered payload, its redacted view when ingest redacted it; a message's content,
reasoning and tool calls; a step's, hypothesis' or obligation's text; an artifact write's
path), NUL characters as U+FFFD. Identifiers such as ``get_template_tag_modules`` must
match whole, so the index is of trigrams, not words:

* PostgreSQL: the ``pg_trgm`` extension (a trusted extension, in Debian's postgresql
  package) and a GIN ``gin_trgm_ops`` index on ``text``, which serves ``ILIKE '%q%'``;
* SQLite (>= 3.34): an external-content FTS5 table ``event_texts_fts`` with the
  ``trigram`` tokenizer, kept in step with ``event_texts`` by insert and delete triggers
  (a session delete's cascade fires them). A later migration that copies ``event_texts``
  in batch mode must create the triggers again.

The backfill walks every event in id order, streaming, and inserts its texts in chunks.
Downgrade drops the table, its index and triggers (the extension stays: other schemas may use it).
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010_event_search"
down_revision = "0009_progress_record"
branch_labels = None
depends_on = None

CHUNK = 500

SQLITE_DDL = (
    ("CREATE VIRTUAL TABLE event_texts_fts USING fts5(text, content='event_texts', content_rowid='id', "
     "tokenize='trigram')"),
    ("CREATE TRIGGER event_texts_ai AFTER INSERT ON event_texts BEGIN "
     "INSERT INTO event_texts_fts(rowid, text) VALUES (new.id, new.text); END"),
    ("CREATE TRIGGER event_texts_ad AFTER DELETE ON event_texts BEGIN "
     "INSERT INTO event_texts_fts(event_texts_fts, rowid, text) VALUES ('delete', old.id, old.text); END"),
)


def upgrade() -> None:
    op.create_table(
        "event_texts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(length=32), sa.ForeignKey("sessions.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("field", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
    )
    op.create_index("ix_event_texts_session_seq", "event_texts", ["session_id", "seq"])
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute("CREATE INDEX ix_event_texts_trgm ON event_texts USING gin (text gin_trgm_ops)")
    elif conn.dialect.name == "sqlite":
        for statement in SQLITE_DDL:
            op.execute(statement)
    backfill(conn)


def _texts(kind: str, body: dict[str, Any], payload: str | None) -> list[tuple[str, str]]:
    """app/domain/recall.py ``searchable_texts`` as of this revision (a migration does not
    import the app's code, which may change after it)."""
    pairs: list[tuple[str, str]] = []
    if kind == "tool_result":
        pairs.append(("payload", payload or ""))
    elif kind == "message":
        pairs += [("content", str(body.get("content") or "")), ("reasoning", str(body.get("reasoning") or "")),
                  ("tool_calls", "\n".join(f"{c.get('name', '')} {c.get('arguments', '')}"
                                           for c in body.get("tool_calls") or []))]
    elif kind in ("step", "hypothesis", "obligation"):
        pairs.append(("text", str(body.get("text") or "")))
    elif kind == "artifact_write":
        pairs.append(("artifact", str(body.get("artifact") or "")))
    return [(field, text.replace("\x00", "\ufffd")) for field, text in pairs if text]


def backfill(conn: sa.Connection) -> int:
    """Insert the searchable texts of every stored event; returns the number of rows."""
    events = sa.table("events", sa.column("id", sa.Integer), sa.column("session_id", sa.String),
                      sa.column("seq", sa.Integer), sa.column("kind", sa.String), sa.column("body", sa.JSON))
    payloads = sa.table("payloads", sa.column("sha256", sa.String), sa.column("data", sa.LargeBinary))
    texts = sa.table("event_texts", sa.column("session_id", sa.String), sa.column("seq", sa.Integer),
                     sa.column("field", sa.String), sa.column("text", sa.Text))
    total = 0
    batch: list[tuple[str, int, str, dict[str, Any]]] = []

    def flush() -> None:
        nonlocal total
        handles = sorted({str(b.get("view") or b.get("handle")) for _, _, k, b in batch if k == "tool_result"})
        data: dict[str, str] = {}
        if handles:
            data = {sha: bytes(raw).decode("utf-8", errors="replace") for sha, raw in
                    conn.execute(sa.select(payloads.c.sha256, payloads.c.data).where(payloads.c.sha256.in_(handles)))}
        rows = [{"session_id": sid, "seq": seq, "field": field, "text": text}
                for sid, seq, kind, body in batch
                for field, text in _texts(kind, body, data.get(str(body.get("view") or body.get("handle"))))]
        if rows:
            conn.execute(sa.insert(texts), rows)
        total += len(rows)
        batch.clear()

    # materialised: PostgreSQL cannot stream a result while the same connection inserts
    for start_id in _id_chunks(conn, events):
        for sid, seq, kind, body in conn.execute(
                sa.select(events.c.session_id, events.c.seq, events.c.kind, events.c.body)
                .where(events.c.id >= start_id[0], events.c.id < start_id[1]).order_by(events.c.id)).all():
            batch.append((sid, int(seq), kind, body or {}))
        flush()
    return total


def _id_chunks(conn: sa.Connection, events: Any) -> list[tuple[int, int]]:
    low, high = conn.execute(sa.select(sa.func.min(events.c.id), sa.func.max(events.c.id))).one()
    if low is None:
        return []
    return [(start, start + CHUNK) for start in range(int(low), int(high) + 1, CHUNK)]


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS event_texts_ad")
        op.execute("DROP TRIGGER IF EXISTS event_texts_ai")
        op.execute("DROP TABLE IF EXISTS event_texts_fts")
    op.drop_index("ix_event_texts_session_seq", table_name="event_texts")
    op.drop_table("event_texts")  # its pg_trgm index goes with it
