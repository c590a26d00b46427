"""artifact content hash: the hash known for each artifact's current revision

Revision ID: 0013_artifact_content_hash
Revises: 0012_session_parent

Upgrade: ``artifacts.content_hash`` (nullable): the content hash known for the artifact's
current revision (issue 11, "Also"), so ingest compares a read's hash with one
primary-key read instead of searching the event log. Backfilled from the stored events
with the rules of ``app.domain.invalidation.ArtifactLedger``: the ``artifact_write``
that made the current revision gives its hash (or none), else the first whole read
(binding without a range) at that revision gives its; a never-written artifact whose
whole read carried a hash gets a row at revision 0. Downgrade drops the column and those
rows at revision 0. Runs on SQLite (batch mode) and PostgreSQL.
"""
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013_artifact_content_hash"
down_revision = "0012_session_parent"
branch_labels = None
depends_on = None

_events = sa.table("events", sa.column("session_id", sa.String()), sa.column("seq", sa.Integer()),
                   sa.column("kind", sa.String()), sa.column("body", sa.JSON()))
_artifacts = sa.table("artifacts", sa.column("session_id", sa.String()), sa.column("artifact", sa.String()),
                      sa.column("revision", sa.Integer()), sa.column("content_hash", sa.String()))


def _known_hashes(conn: Any) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], str]]:
    current = {(s, a): r for s, a, r in conn.execute(
        sa.select(_artifacts.c.session_id, _artifacts.c.artifact, _artifacts.c.revision))}
    known: dict[tuple[str, str], str | None] = {}
    rows = conn.execute(sa.select(_events.c.session_id, _events.c.kind, _events.c.body)
                        .where(_events.c.kind.in_(["artifact_write", "tool_result"]))
                        .order_by(_events.c.session_id, _events.c.seq))
    for session_id, kind, body in rows:
        if not isinstance(body, dict):
            continue
        if kind == "artifact_write":
            if not isinstance(body.get("artifact"), str):
                continue
            key = (session_id, body["artifact"])
            if body.get("revision") == current.get(key, 0):
                known[key] = body.get("content_hash") if isinstance(body.get("content_hash"), str) else None
            continue
        b = body.get("binding")
        if not isinstance(b, dict) or b.get("kind") == "unknown" or b.get("range") is not None \
                or not isinstance(b.get("content_hash"), str) or not isinstance(b.get("artifact"), str):
            continue
        key = (session_id, b["artifact"])
        if b.get("revision") == current.get(key, 0) and known.get(key) is None:
            known[key] = b["content_hash"]
    return current, {k: v for k, v in known.items() if v is not None}


def upgrade() -> None:
    with op.batch_alter_table("artifacts") as batch_op:
        batch_op.add_column(sa.Column("content_hash", sa.String(256), nullable=True))
    conn = op.get_bind()
    current, known = _known_hashes(conn)
    for (session_id, artifact), content_hash in known.items():
        if (session_id, artifact) in current:
            conn.execute(sa.update(_artifacts).where(_artifacts.c.session_id == session_id,
                                                     _artifacts.c.artifact == artifact)
                         .values(content_hash=content_hash))
        else:
            conn.execute(sa.insert(_artifacts).values(session_id=session_id, artifact=artifact, revision=0,
                                                      content_hash=content_hash))


def downgrade() -> None:
    op.execute(sa.delete(_artifacts).where(_artifacts.c.revision == 0))
    with op.batch_alter_table("artifacts") as batch_op:
        batch_op.drop_column("content_hash")
