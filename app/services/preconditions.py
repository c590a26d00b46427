"""Use case: check an action-time precondition (seed 000 section 4.7.2)."""

from __future__ import annotations

from sqlalchemy.orm import Session as OrmSession

from app.domain.preconditions import ArtifactState, check_precondition
from app.services.sessions import require_session_row
from app.store import repository as repo


def check(db: OrmSession, session_id: str, artifact: str, *, revision: int | None = None,
          content_hash: str | None = None) -> ArtifactState:
    """The artifact's current state when the presented ``revision`` / ``content_hash``
    still hold (an artifact never written is at revision 0, with the hash of a whole read
    of it when one was posted, else none).

    Raises:
        SessionNotFound: no such session (404).
        InvalidPrecondition: nothing presented, or a revision ahead of the server's (422).
        PreconditionFailed: the state changed (409, with the current revision and hash).
    """
    require_session_row(db, session_id)
    current_revision, known_hash = repo.artifact_state(db, session_id, artifact)
    current = ArtifactState(artifact, current_revision, known_hash)
    return check_precondition(current, revision=revision, content_hash=content_hash)
