"""session title: a short human label for a session (the inspector's list, GET /v1/sessions)

Revision ID: 0015_session_title
Revises: 0014_ui_session_ends

Upgrade: ``sessions.title`` (nullable, at most 200 characters; NULL for every existing
session: none has a title). ``POST /v1/sessions`` sets it, ``PATCH /v1/sessions/{id}``
changes or clears it; the API refuses control characters in it, so it is plain one-line
text. Nothing of a request depends on it (the chat template never renders it). Downgrade
drops it (the titles are lost). Runs on SQLite (batch mode for the drop) and PostgreSQL.
"""
import sqlalchemy as sa
from alembic import op

revision = "0015_session_title"
down_revision = "0014_ui_session_ends"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("title", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch_op:
        batch_op.drop_column("title")
