"""Action-time preconditions: compare-and-swap on an artifact's revision (seed 000
section 4.7.2, footnote 12: optimistic validation at the tool boundary).

The model planned an action on a state of an artifact: a revision (the server's
counter: 0 before the first ``artifact_write``, +1 per write) and/or a content
hash. Before the tool runner applies the action, it asks whether that state
still holds. Pure standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.domain.errors import InvalidPrecondition, PreconditionFailed

__all__ = ["ArtifactState", "check_precondition"]


@dataclass(frozen=True)
class ArtifactState:
    """An artifact as the server knows it now: ``revision`` (0 when never written)
    and ``content_hash``, the hash recorded for that revision (by its write or by a
    read bound to it; the latest one), None when none was recorded."""

    artifact: str
    revision: int
    content_hash: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "revision": self.revision, "content_hash": self.content_hash}


def check_precondition(current: ArtifactState, *, revision: int | None = None,
                       content_hash: str | None = None) -> ArtifactState:
    """Returns ``current`` when the presented state still holds: ``revision`` equals
    the current revision and ``content_hash`` equals the current hash (each only
    when given; at least one must be).

    Raises:
        InvalidPrecondition: neither given, or ``revision`` is ahead of the current
            one (a revision from the future was never observed: a client error, 422).
        PreconditionFailed: the state changed (409). ``extra`` holds ``artifact``,
            ``revision`` (current), ``content_hash`` (current, when known),
            ``presented`` (what the caller sent) and ``reason``:
            ``revision_changed``, ``content_hash_changed``, or
            ``content_hash_unknown`` (no hash recorded for the current revision:
            the state cannot be confirmed, and a missing record never proves
            freshness, seed 000 section 4.7.1).
    """
    if revision is None and content_hash is None:
        raise InvalidPrecondition("give the revision or the content_hash the action was planned on",
                                  artifact=current.artifact)
    if revision is not None and revision > current.revision:
        raise InvalidPrecondition(
            f"revision {revision} of {current.artifact!r} does not exist yet (current: {current.revision})",
            artifact=current.artifact, revision=current.revision)
    presented = {k: v for k, v in (("revision", revision), ("content_hash", content_hash)) if v is not None}
    reason = None
    if revision is not None and revision != current.revision:
        reason = "revision_changed"
        detail = f"{current.artifact!r} is at revision {current.revision}, not {revision}"
    elif content_hash is not None and current.content_hash is None:
        reason = "content_hash_unknown"
        detail = (f"no content hash is recorded for revision {current.revision} of {current.artifact!r}; "
                  "read it again")
    elif content_hash is not None and content_hash != current.content_hash:
        reason = "content_hash_changed"
        detail = f"{current.artifact!r} at revision {current.revision} has another content hash"
    if reason is None:
        return current
    extra: dict[str, Any] = {"artifact": current.artifact, "revision": current.revision}
    if current.content_hash is not None:
        extra["content_hash"] = current.content_hash
    raise PreconditionFailed(detail, **extra, presented=presented, reason=reason)
