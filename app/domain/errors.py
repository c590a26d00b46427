"""Domain errors. They carry no HTTP status; ``app/api/problems.py`` maps them (DESIGN.md 5.7)."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of every expected error. ``detail`` is for humans, ``extra`` for machines."""

    title = "Domain error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class NotFound(DomainError):
    title = "Not found"


class SessionNotFound(NotFound):
    title = "Session not found"


class HandleNotFound(NotFound):
    title = "Handle not found"


class ManifestNotFound(NotFound):
    """No persisted manifest with that id in that session."""


class InvalidEvent(DomainError):
    """An event that cannot be appended (unknown call_id, bad shape, ...)."""

    title = "Invalid event"


class EventConflict(DomainError):
    """A repeated event_id with a different body (idempotency violation)."""

    title = "Event conflict"


class UnknownProfile(DomainError):
    title = "Unknown profile"


class InvalidRange(DomainError):
    title = "Invalid range"


class UnsupportedFormat(DomainError):
    title = "Unsupported wire format"


class PinnedOverBudget(DomainError):
    """The pinned content (root + trunk + next step) alone exceeds ``input_limit`` (eq. 1).

    ``extra`` holds ``over_by`` (tokens), ``input_limit`` and ``by_role`` with each role's
    tokens, share limit and overshoot.
    """

    title = "Pinned content exceeds the input budget"


class LayoutContention(DomainError):
    """Other workers moved the session's layout state under every plan of one GET (the
    bounded retries of compare-and-set ran out); retrying the request is safe."""

    title = "Layout state contention"


class TokenizerUnavailable(DomainError):
    title = "Tokenizer unavailable"
