"""layout states carry invalidation's deferral (issue 11)

Revision ID: 0007_layout_deferral
Revises: 0006_manifest_deltas

Upgrade: ``layout_states`` gains ``deferred`` (JSON list of change seqs whose in-place
tombstones wait for the next trunk rewrite; ``[]``) and ``shown_upto`` (the latest change
seq whose tombstones were shown; 0), both written with the rest of the state by
compare-and-set on ``version``. Existing rows start with nothing deferred and nothing
shown: their next GET decides as a session's first. Downgrade drops both columns. Runs on
SQLite (batch mode) and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0007_layout_deferral"
down_revision = "0006_manifest_deltas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("layout_states") as batch_op:
        batch_op.add_column(sa.Column("deferred", sa.JSON(), nullable=False, server_default=sa.text("'[]'")))
        batch_op.add_column(sa.Column("shown_upto", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("layout_states") as batch_op:
        batch_op.drop_column("shown_upto")
        batch_op.drop_column("deferred")
