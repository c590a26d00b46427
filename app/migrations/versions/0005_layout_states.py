"""layout states: the versioned layout decision replaces sessions.cut_seq

Revision ID: 0005_layout_states
Revises: 0004_session_model

Upgrade: one ``layout_states`` row per session (version 0, ``cut_seq`` copied from
``sessions.cut_seq``), then ``sessions.cut_seq`` is dropped. Downgrade restores the
column from the layout states. Runs on SQLite (batch mode) and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0005_layout_states"
down_revision = "0004_session_model"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "layout_states",
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("cut_seq", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.execute("INSERT INTO layout_states (session_id, version, cut_seq, updated_at) "
               "SELECT id, 0, cut_seq, CURRENT_TIMESTAMP FROM sessions")
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_column("cut_seq")


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.add_column(sa.Column("cut_seq", sa.Integer(), nullable=False, server_default="0"))
    op.execute("UPDATE sessions SET cut_seq = (SELECT cut_seq FROM layout_states WHERE layout_states.session_id = sessions.id) "
               "WHERE id IN (SELECT session_id FROM layout_states)")
    op.drop_table("layout_states")
