"""Manifest retention (issue 12 item 3): old manifests deleted without breaking the delta
chains of the ones kept (app/store/repository.py stores a manifest as a delta of the
previous one, with a keyframe every ``KEYFRAME_EVERY``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, delete, func, select
from sqlalchemy.orm import Session as OrmSession

from app.store import repository as repo
from app.store.tables import ManifestRow


def prune_manifests(db: OrmSession, *, older_than: datetime) -> int:
    """Delete the manifests created before ``older_than``, but for each session and format
    its newest manifest (the base of the next one's delta) and every row a kept manifest is
    rebuilt from (its keyframe and the deltas up to it). Returns the rows deleted."""
    groups = db.execute(select(ManifestRow.session_id, ManifestRow.format).where(ManifestRow.created_at < older_than)
                        .distinct()).all()
    deleted = 0
    for session_id, fmt in groups:
        where = and_(ManifestRow.session_id == session_id, ManifestRow.format == fmt)
        newest = db.execute(select(func.max(ManifestRow.id)).where(where)).scalar_one()
        chain_start = func.coalesce(ManifestRow.keyframe_id, ManifestRow.id)
        keep_from = db.execute(select(func.min(chain_start)).where(
            where, (ManifestRow.created_at >= older_than) | (ManifestRow.id == newest))).scalar_one()
        result = db.execute(delete(ManifestRow).where(where, ManifestRow.id < keep_from,
                                                      ManifestRow.created_at < older_than)
                            .execution_options(synchronize_session=False))
        deleted += max(0, repo.rowcount(result))
    return deleted
