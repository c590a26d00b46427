"""tenancy: tenants, API keys, payload ownership links; sessions backfilled to "default"

Revision ID: 0008_tenancy
Revises: 0007_layout_deferral

Issue 12. Every session belongs to a tenant: the ``default`` tenant is created and every
existing session is assigned to it (``sessions.tenant_id``, server default ``default``).
A payload is readable only through an ownership link (``payload_owners``): the backfill
links every payload an event of a session names (message and tool-result handles) to that
session. Payloads ctxd derived for a request (elision indexes) are linked again by the
next request that names them (the request path stores them on every GET).
``sessions.stored_bytes`` (storage quota, counted as if not deduplicated) is backfilled
with the sizes of the payloads each session's events name, each event counted.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_tenancy"
down_revision = "0007_layout_deferral"
branch_labels = None
depends_on = None

CHUNK = 1000
DEFAULT_TENANT = "default"


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column("name", sa.String(length=64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.execute(sa.text("INSERT INTO tenants (id, name) VALUES (:id, :name)").bindparams(id=DEFAULT_TENANT,
                                                                                        name=DEFAULT_TENANT))
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column("tenant_id", sa.String(length=32), sa.ForeignKey("tenants.id", ondelete="CASCADE"), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    with op.batch_alter_table("sessions") as batch:  # SQLite: copy and move (foreign keys are off here)
        batch.add_column(sa.Column("tenant_id", sa.String(length=32), nullable=False, server_default=DEFAULT_TENANT))
        batch.add_column(sa.Column("stored_bytes", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                                   nullable=False, server_default="0"))
        batch.create_foreign_key("fk_sessions_tenant_id", "tenants", ["tenant_id"], ["id"])
    op.create_index("ix_sessions_tenant_created", "sessions", ["tenant_id", "created_at", "id"])
    op.create_table(
        "payload_owners",
        sa.Column("sha256", sa.String(length=64), sa.ForeignKey("payloads.sha256"), nullable=False),
        sa.Column("session_id", sa.String(length=32), sa.ForeignKey("sessions.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("sha256", "session_id"),
    )
    op.create_index("ix_payload_owners_tenant", "payload_owners", ["tenant_id", "sha256"])
    op.create_index("ix_payload_owners_session", "payload_owners", ["session_id"])
    backfill(op.get_bind())


def backfill(conn: sa.Connection) -> int:
    """Link every payload an event names to the event's session (tenant ``default``) and
    add its size to the session's ``stored_bytes``; returns the number of links."""
    events = sa.table("events", sa.column("session_id", sa.String), sa.column("kind", sa.String),
                      sa.column("body", sa.JSON), sa.column("id", sa.Integer))
    payloads = sa.table("payloads", sa.column("sha256", sa.String), sa.column("size", sa.Integer))
    owners = sa.table("payload_owners", sa.column("sha256", sa.String), sa.column("session_id", sa.String),
                      sa.column("tenant_id", sa.String))
    sessions = sa.table("sessions", sa.column("id", sa.String), sa.column("stored_bytes", sa.Integer))
    links: set[tuple[str, str]] = set()
    handles_bytes: dict[str, list[str]] = {}
    for session_id, body in conn.execute(sa.select(events.c.session_id, events.c.body)
                                         .where(events.c.kind.in_(["message", "tool_result"]))
                                         .order_by(events.c.id)).yield_per(CHUNK):
        handle = (body or {}).get("handle")
        if isinstance(handle, str):
            links.add((handle, session_id))
            handles_bytes.setdefault(session_id, []).append(handle)
    wanted = sorted({h for h, _ in links})
    sizes: dict[str, int] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start:start + CHUNK]
        for sha, size in conn.execute(sa.select(payloads.c.sha256, payloads.c.size).where(payloads.c.sha256.in_(chunk))):
            sizes[sha] = int(size)
    rows = [{"sha256": h, "session_id": s, "tenant_id": DEFAULT_TENANT} for h, s in sorted(links) if h in sizes]
    for start in range(0, len(rows), CHUNK):
        conn.execute(sa.insert(owners), rows[start:start + CHUNK])
    for session_id, handles in handles_bytes.items():
        total = sum(sizes.get(h, 0) for h in handles)
        if total:
            conn.execute(sa.update(sessions).where(sessions.c.id == session_id).values(stored_bytes=total))
    return len(rows)


def downgrade() -> None:
    op.drop_table("payload_owners")
    op.drop_index("ix_sessions_tenant_created", table_name="sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_constraint("fk_sessions_tenant_id", type_="foreignkey")
        batch.drop_column("stored_bytes")
        batch.drop_column("tenant_id")
    op.drop_index("ix_api_keys_tenant_id", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")
