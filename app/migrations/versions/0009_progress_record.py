"""progress record: layout states keep select's record and their pass count

Revision ID: 0009_progress_record
Revises: 0008_tenancy

Upgrade: ``layout_states.passes`` (moves of the cut: compaction passes under select,
evictions under window; 0 for existing rows) and ``layout_states.record`` (the progress
record its fold point gives, as JSON; NULL until the next pass writes it). Downgrade drops
both. Runs on SQLite (batch mode) and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0009_progress_record"
down_revision = "0008_tenancy"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("layout_states") as batch_op:
        batch_op.add_column(sa.Column("passes", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("record", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("layout_states") as batch_op:
        batch_op.drop_column("record")
        batch_op.drop_column("passes")
