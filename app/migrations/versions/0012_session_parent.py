"""session parent: child sessions of sub-agents link to their parent

Revision ID: 0012_session_parent
Revises: 0011_message_positions

Upgrade: ``sessions.parent_id`` (nullable, a foreign key to ``sessions.id``, indexed; NULL
for every existing session: none has a parent). Issue 16 item 2: ``POST
/v1/sessions/{id}/children`` sets it; deleting a session that still has children is
refused (409), so the link never dangles. Downgrade drops it. Runs on SQLite (batch mode)
and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0012_session_parent"
down_revision = "0011_message_positions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.add_column(sa.Column("parent_id", sa.String(32), nullable=True))
        batch_op.create_foreign_key("fk_sessions_parent_id", "sessions", ["parent_id"], ["id"])
        batch_op.create_index("ix_sessions_parent_id", ["parent_id"])


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_index("ix_sessions_parent_id")
        batch_op.drop_constraint("fk_sessions_parent_id", type_="foreignkey")
        batch_op.drop_column("parent_id")
