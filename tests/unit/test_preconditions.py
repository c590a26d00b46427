"""The pure compare-and-swap check (app.domain.preconditions)."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidPrecondition, PreconditionFailed
from app.domain.preconditions import ArtifactState, check_precondition

STATE = ArtifactState("config.yaml", 1, "h60")


def test_holds() -> None:
    assert check_precondition(STATE, revision=1) is STATE
    assert check_precondition(STATE, content_hash="h60") is STATE
    assert check_precondition(STATE, revision=1, content_hash="h60") is STATE
    assert check_precondition(ArtifactState("new.py", 0), revision=0) == ArtifactState("new.py", 0, None)


@pytest.mark.parametrize(("revision", "content_hash", "reason"), [
    (0, None, "revision_changed"),
    (None, "h30", "content_hash_changed"),
    (0, "h60", "revision_changed"),
    (1, "h30", "content_hash_changed"),
])
def test_fails_with_the_current_state(revision: int | None, content_hash: str | None, reason: str) -> None:
    with pytest.raises(PreconditionFailed) as exc:
        check_precondition(STATE, revision=revision, content_hash=content_hash)
    assert exc.value.extra["reason"] == reason
    assert (exc.value.extra["revision"], exc.value.extra["content_hash"]) == (1, "h60")
    presented = {k: v for k, v in (("revision", revision), ("content_hash", content_hash)) if v is not None}
    assert exc.value.extra["presented"] == presented


def test_unknown_hash_is_not_confirmed() -> None:
    with pytest.raises(PreconditionFailed) as exc:
        check_precondition(ArtifactState("a.py", 2), content_hash="h")
    assert exc.value.extra["reason"] == "content_hash_unknown" and "content_hash" not in exc.value.extra


def test_invalid() -> None:
    with pytest.raises(InvalidPrecondition):
        check_precondition(STATE)
    with pytest.raises(InvalidPrecondition, match="does not exist yet"):
        check_precondition(STATE, revision=2)
