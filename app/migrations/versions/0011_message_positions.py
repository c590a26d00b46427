"""message positions: provider messages posted through POST /v1/sessions/{id}/messages

Revision ID: 0011_message_positions
Revises: 0010_event_search

Upgrade: table ``message_positions`` (session_id, position) -> sha256 of what the message
mapped to and the seqs of its events (issue 14 item 1: a message re-posted at a known
position is a no-op when equal, a 409 when changed). Deleted with its session (ON DELETE
CASCADE). Downgrade drops it. Runs on SQLite and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0011_message_positions"
down_revision = "0010_event_search"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "message_positions",
        sa.Column("session_id", sa.String(32), sa.ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("seqs", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("message_positions")
