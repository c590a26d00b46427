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


class InvalidMessage(InvalidEvent):
    """A provider message (POST /messages, issue 14) ctxd cannot carry or that breaks an
    event rule; ``extra``: ``loc`` (the place in the body) and ``position`` when known."""

    title = "Invalid message"


class ControlTokenInText(DomainError):
    """Operator text that is rendered verbatim (task contract, system, tool declarations)
    spells one of the profile's chat control tokens. ``extra``: ``loc`` (the field's path),
    ``control_string``, ``profile``."""

    title = "Control token in protected text"


class EventConflict(DomainError):
    """A repeated event_id with a different body (idempotency violation)."""

    title = "Event conflict"


class MessageConflict(EventConflict):
    """A provider message re-posted at a known position of the session's message stream with
    other content than the message stored there; ``extra``: ``position``."""

    title = "Message conflict"


class SessionHasChildren(DomainError):
    """Deleting a session that still has child sessions (issue 16): refused, so a child's
    parent link never dangles and a conclusion always has a parent to return to. Delete the
    children first (``children`` lists their ids)."""

    title = "Session has child sessions"


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


class NewestGroupOverBudget(DomainError):
    """The newest turn group cannot fit ``input_limit`` (eq. 1) even with every older group
    evicted and each of its tool results cut to its marker (head + tail of zero tokens).

    The newest group is never evicted silently: the caller must shorten it (its message text)
    or the pinned content. ``extra`` holds ``seq`` (the group's first seq), ``seqs`` and
    ``event_ids`` (its message and results), ``over_by`` (tokens over ``input_limit`` of the
    smallest request holding the group), ``input_limit`` and ``total`` (that request's tokens).
    """

    title = "Newest turn group exceeds the input budget"


class ServerFault(DomainError):
    """A recognised fault on ctxd's side, not the caller's (a profile whose chat template
    cannot be cut into zones, a broken storage invariant): a 500 problem that names it."""

    title = "Server fault"


class TemplateUnsupported(ServerFault):
    """The profile's chat template renders in a way ctxd cannot count by zone (the trunk
    renders differently with and without tools, or a zone start is not a segment boundary)."""

    title = "Chat template not supported"


class ProviderRuleViolation(DomainError):
    """The request breaks a structural rule of the profile's tokenizer or chat template (or
    of the wire format) that ctxd does not lay out around: the tokenizer library's own
    validation refused it (a Jinja ``raise_exception``, a mistral-common validation error).
    ``extra`` holds ``rule`` (the rule's id in the README "Provider rules" tables, or
    ``chat-template`` / ``mistral-common`` with the library's message in ``reason``).
    """

    title = "Request breaks a provider rule"


class TokenizerUnavailable(DomainError):
    title = "Tokenizer unavailable"


class InvalidPrecondition(DomainError):
    """A precondition that cannot be checked: nothing presented, or a revision ahead of
    the server's counter (never observed)."""

    title = "Invalid precondition"


class PreconditionFailed(DomainError):
    """The artifact state an action was planned on no longer holds (compare-and-swap)."""

    title = "Precondition failed"


class PayloadTooLarge(DomainError):
    """A payload over the configured maximum (``extra``: index, event_id, field, size_bytes,
    max_bytes); the batch is refused whole."""

    title = "Payload too large"


class Unauthorized(DomainError):
    """A request without a valid API key where one is required (issue 12): missing, malformed,
    unknown or revoked key alike (the answer does not say which)."""

    title = "Unauthorized"


class RateLimited(DomainError):
    """The tenant's request rate is over its limit; ``retry_after`` (whole seconds) says when
    the window admits the next request."""

    title = "Too many requests"


class StorageQuotaExceeded(DomainError):
    """The tenant's stored payload bytes (counted as if not deduplicated) would exceed its quota."""

    title = "Storage quota exceeded"


class InvalidParameter(DomainError):
    """A parameter that cannot be used (a page cursor this API did not make, a bad tenant name)."""

    title = "Invalid parameter"
