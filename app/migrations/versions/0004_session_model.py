"""a session's own ``model`` for its request bodies (NULL: the profile's model)

Revision ID: 0004_session_model
Revises: 0003_ingest
"""
import sqlalchemy as sa
from alembic import op

revision = "0004_session_model"
down_revision = "0003_ingest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("model", sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("model")
