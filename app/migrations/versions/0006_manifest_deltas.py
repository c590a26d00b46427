"""bounded storage: manifests as deltas with keyframes; prefix states as small records

Revision ID: 0006_manifest_deltas
Revises: 0005_layout_states

Manifests gain ``base_id`` (NULL for a keyframe, i.e. every manifest stored before),
``keyframe_id``, ``depth``, ``planner_version`` and ``data`` (the keyframe or delta as
zlib-compressed JSON; the ``manifest`` JSON column, now nullable, keeps the rows stored
before). Prefix states keep only what
recognises and rebuilds the previous request (app/domain/state.py PreviousRequest): the
``layout`` column is dropped and the old records (whole block digests) are deleted; the
next GET of each session and format is then reported as its first (no prediction of
cached tokens for that one request). Downgrade drops the new columns and keeps only the
manifests stored before; prefix states are emptied again.
"""
import sqlalchemy as sa
from alembic import op

revision = "0006_manifest_deltas"
down_revision = "0005_layout_states"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("manifests") as batch_op:
        batch_op.add_column(sa.Column("base_id", _ID, nullable=True))
        batch_op.add_column(sa.Column("keyframe_id", _ID, nullable=True))
        batch_op.add_column(sa.Column("depth", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("planner_version", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("data", sa.LargeBinary(), nullable=True))
        batch_op.alter_column("manifest", existing_type=sa.JSON(), nullable=True)
    op.execute("DELETE FROM prefix_states")
    with op.batch_alter_table("prefix_states") as batch_op:
        batch_op.drop_column("layout")


def downgrade() -> None:
    op.execute("DELETE FROM prefix_states")
    with op.batch_alter_table("prefix_states") as batch_op:
        batch_op.add_column(sa.Column("layout", sa.JSON(), nullable=False, server_default="{}"))
    op.execute("DELETE FROM manifests WHERE manifest IS NULL")
    with op.batch_alter_table("manifests") as batch_op:
        batch_op.alter_column("manifest", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column("data")
        batch_op.drop_column("planner_version")
        batch_op.drop_column("depth")
        batch_op.drop_column("keyframe_id")
        batch_op.drop_column("base_id")
