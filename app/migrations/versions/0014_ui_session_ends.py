"""ui session ends: inspector sessions ended by their logout

Revision ID: 0014_ui_session_ends
Revises: 0013_artifact_content_hash

Upgrade: the table ``ui_session_ends`` (``nonce`` primary key, ``expires_at`` indexed): the
nonce of each inspector session cookie ended by its logout, refused until the cookie would
have expired (issue 15; before, a logout only asked the browser to drop the cookie, and a
copy of it stayed valid for ``CTXD_UI_SESSION_SECONDS``). Downgrade drops the table (the
sessions ended so far become valid again until they expire). Runs on SQLite and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0014_ui_session_ends"
down_revision = "0013_artifact_content_hash"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_session_ends",
        sa.Column("nonce", sa.String(64), primary_key=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ui_session_ends_expires_at", "ui_session_ends", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_ui_session_ends_expires_at", table_name="ui_session_ends")
    op.drop_table("ui_session_ends")
