"""Domain values (frozen dataclasses; standard library only).

Vocabulary from DESIGN.md section 2; equations cite seed 000.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["user", "assistant"]
EventKind = Literal["message", "tool_result", "artifact_write", "step", "hypothesis", "obligation", "plan",
                    "document", "conclusion", "child_conclusion"]
#: kinds of the leaf messages ctxd builds from events that are not messages (issue 16): a
#: plan version and a sub-agent's conclusion each enter the leaf as a user message of their own
LeafKind = Literal["message", "plan", "child_conclusion"]
HypothesisStatus = Literal["working", "supported", "refuted"]
ObligationStatus = Literal["open", "done", "dropped"]
HYPOTHESIS_STATUSES: tuple[str, ...] = ("working", "supported", "refuted")
OBLIGATION_STATUSES: tuple[str, ...] = ("open", "done", "dropped")
Zone = Literal["root", "trunk", "leaf"]
ZONES: tuple[Zone, ...] = ("root", "trunk", "leaf")
BUDGET_ROLES: tuple[str, ...] = ("system", "tools", "task_state", "observations")


@dataclass(frozen=True)
class Constraint:
    """A protected field of the task contract: copied verbatim, never summarised."""

    id: str
    text: str


@dataclass(frozen=True)
class Contract:
    """The task contract: goal + constraints with stable ids + ``contract_version``."""

    goal: str
    constraints: tuple[Constraint, ...]
    contract_version: int = 1


@dataclass(frozen=True)
class Session:
    id: str
    profile: str
    contract: Contract
    system: str
    tools: tuple[dict[str, Any], ...]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: str  # JSON text exactly as the agent's model produced it


@dataclass(frozen=True)
class ThinkingBlock:
    """An Anthropic thinking block of an assistant message, kept exactly as the provider
    returned it (issue 14): ``kind`` ``thinking`` (``text`` = the thinking, ``signature``
    the provider's signature over it) or ``redacted_thinking`` (``text`` = its opaque
    ``data``, no signature). The provider checks the signature when the block is sent
    back, so neither field is ever transformed (no redaction, no neutralisation)."""

    kind: Literal["thinking", "redacted_thinking"]
    text: str
    signature: str | None = None


@dataclass(frozen=True)
class Binding:
    """Eq. 5: what an observation read: ``(artifact, kind, revision, range, content_hash)``.

    ``kind``: ``file`` (a source excerpt), ``external`` (a resource outside the workspace,
    may carry ``ttl_seconds``), ``unknown`` (the command's effect could not be inferred),
    or another client-chosen word. ``fetched_at``: epoch seconds of the read (the server
    stamps the event's time on an ``external`` binding that has none); ``ttl_seconds``:
    seconds after which an ``external`` binding is possibly stale (seed 000 section 4.7.2)."""

    artifact: str
    kind: str
    revision: int
    range: str | None = None
    content_hash: str | None = None
    ttl_seconds: float | None = None
    fetched_at: float | None = None


@dataclass(frozen=True)
class MessageEvent:
    seq: int
    event_id: str
    role: Role
    content: str
    handle: str  # handle of the message's canonical JSON, for elision breadcrumbs
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    redactions: tuple[str, ...] = ()  # kinds of the secrets redacted at ingest (the handle keeps them)
    thinking: tuple[ThinkingBlock, ...] = ()  # Anthropic thinking blocks, as posted (issue 14)
    # "message" for a posted message; "plan" / "child_conclusion" for the leaf message ctxd
    # builds from such an event (app/domain/scratchpad.py), never stored as a message
    kind: LeafKind = "message"
    at: float | None = None  # the server's time of the event (epoch seconds) when loaded from storage


@dataclass(frozen=True)
class ToolResultEvent:
    seq: int
    event_id: str
    call_id: str
    payload: str  # the text that enters requests: redacted at ingest when it held secrets
    handle: str  # sha256 hex of the payload's UTF-8 bytes as posted
    exit_code: int | None = None
    binding: Binding | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    redactions: tuple[str, ...] = ()  # kinds of the secrets redacted at ingest from ``payload`` (the handle keeps them)
    kind: Literal["tool_result"] = "tool_result"
    at: float | None = None


@dataclass(frozen=True)
class ArtifactWriteEvent:
    seq: int
    event_id: str
    artifact: str
    revision: int
    content_hash: str | None = None
    kind: Literal["artifact_write"] = "artifact_write"
    at: float | None = None


@dataclass(frozen=True)
class StepEvent:
    seq: int
    event_id: str
    text: str
    kind: Literal["step"] = "step"
    at: float | None = None


@dataclass(frozen=True)
class HypothesisEvent:
    """A diagnosis the agent holds (seed 000 section 4.6.1, table 7 "Hypotheses"): a model's
    proposal, never a verified fact. ``key`` names it: a later hypothesis event with the
    same key supersedes this one (:func:`app.domain.notes.current_notes`). ``status``:
    ``working`` (held, not settled), ``supported`` (a logged check backs it),
    ``refuted`` (a logged check contradicts it; kept so the agent does not retry it).
    ``depends_on``: seqs of earlier events (observations, other hypotheses) it rests on;
    ingestion checks each names an existing earlier event."""

    seq: int
    event_id: str
    key: str
    text: str
    status: HypothesisStatus
    depends_on: tuple[int, ...] = ()
    kind: Literal["hypothesis"] = "hypothesis"


@dataclass(frozen=True)
class ObligationEvent:
    """Work the task still owes (table 7 "Unresolved obligations"), e.g. "run the broader
    regression suite on the patched revision". ``status``: ``open`` (still owed), ``done``
    (discharged), ``dropped`` (no longer owed, e.g. the contract changed). A later event
    with the same ``key`` supersedes this one."""

    seq: int
    event_id: str
    key: str
    text: str
    status: ObligationStatus
    kind: Literal["obligation"] = "obligation"


@dataclass(frozen=True)
class PlanEvent:
    """The agent's own plan (seed 004 section 3.7 scratchpad, seed 001 "The scratchpad / plan
    file"; issue 16 item 1): the whole current text of the plan, ``version`` 1, 2, ... per
    session (the server numbers them at ingest). Each version enters the leaf as a user
    message at its seq (appended: the earlier request stays a prefix); a pass folds the
    latest folded version into the progress record. ``handle``: the text's payload."""

    seq: int
    event_id: str
    text: str
    version: int
    handle: str
    kind: Literal["plan"] = "plan"
    at: float | None = None


@dataclass(frozen=True)
class DocumentEvent:
    """A retrieved document (seed 004 section 3.1.2 consequence 2; issue 16 item 3):
    ``source`` (where it came from: a URL, a path, a query), ``text``, ``key``. A later
    document with the same key replaces it. While current it is placed next to the
    instruction, at the end of the leaf. ``handle``: the text's payload."""

    seq: int
    event_id: str
    key: str
    source: str
    text: str
    handle: str
    kind: Literal["document"] = "document"
    at: float | None = None


@dataclass(frozen=True)
class ConclusionEvent:
    """A sub-agent's conclusion, posted to its child session (seed 001 "Sub-agents as
    context isolation"; issue 16 item 2). Ingest appends it to the parent session as a
    :class:`ChildConclusionEvent` (``parent_seq``); the child's requests do not render it."""

    seq: int
    event_id: str
    text: str
    handle: str
    parent_seq: int
    kind: Literal["conclusion"] = "conclusion"
    at: float | None = None


@dataclass(frozen=True)
class ChildConclusionEvent:
    """In the parent session: the conclusion of child session ``child`` (its event
    ``child_seq``), payload stored behind ``handle`` in the parent's tenant. One observation
    in the parent's leaf, at its seq; nothing else of the child enters the parent."""

    seq: int
    event_id: str
    child: str
    child_seq: int
    text: str
    handle: str
    kind: Literal["child_conclusion"] = "child_conclusion"
    at: float | None = None


NoteEvent = HypothesisEvent | ObligationEvent
Event = (MessageEvent | ToolResultEvent | ArtifactWriteEvent | StepEvent | HypothesisEvent | ObligationEvent
         | PlanEvent | DocumentEvent | ConclusionEvent | ChildConclusionEvent)


@dataclass(frozen=True)
class TurnGroup:
    """The unit of eviction: an assistant turn with all of its tool results (parallel
    calls included), or a lone user/assistant message. ``pending`` lists call ids that
    have no result yet; such calls are not rendered (every call needs its result)."""

    message: MessageEvent
    results: tuple[ToolResultEvent, ...] = ()
    pending: tuple[str, ...] = ()

    @property
    def first_seq(self) -> int:
        return self.message.seq

    @property
    def seqs(self) -> tuple[int, ...]:
        return (self.message.seq, *(r.seq for r in self.results))
