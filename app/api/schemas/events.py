"""Event schemas: the events a POST appends, provider messages, their answers, preconditions."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from app.api.schemas.common import (
    MAX_JSON_INT,
    ArtifactName,
    CallId,
    ContentHash,
    EventId,
    NonBlank,
    NoNul,
    Strict,
)
from app.domain.errors import InvalidMessage
from app.domain.ingest import PostedEvent, checked_read
from app.domain.invalidation import UNKNOWN_KIND
from app.wire.inbound import MappedMessage


class ToolCallIn(Strict):
    call_id: CallId
    name: Annotated[str, Field(min_length=1, max_length=64), NoNul]
    arguments: str = Field(default="{}", description="JSON text as the model produced it (an object is serialised)")

    @field_validator("arguments", mode="before")
    @classmethod
    def _to_text(cls, value: Any) -> Any:
        if isinstance(value, (dict, list)):
            return json.dumps(value, ensure_ascii=False)
        return value


class ThinkingBlockIn(Strict):
    """An Anthropic thinking block, kept byte for byte (its signature is checked by the API
    when the block is sent back): ``{"type": "thinking", "thinking", "signature"}`` or
    ``{"type": "redacted_thinking", "data"}``."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> ThinkingBlockIn:
        if self.type == "thinking" and (self.thinking is None or self.signature is None or self.data is not None):
            raise ValueError("a thinking block has the strings thinking and signature (and no data)")
        if self.type == "redacted_thinking" and (self.data is None or self.thinking is not None
                                                 or self.signature is not None):
            raise ValueError("a redacted_thinking block has the string data only")
        return self


class MessageIn(Strict):
    event_id: EventId
    kind: Literal["message"]
    role: Literal["user", "assistant"]
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallIn] = Field(default_factory=list)
    thinking: list[ThinkingBlockIn] | None = Field(default=None, description=(
        "an assistant message's Anthropic thinking blocks, sent back as posted in the anthropic format only "
        "(never redacted or neutralised: the API checks their signatures)"))

    @model_validator(mode="after")
    def _calls(self) -> MessageIn:
        if self.role == "user" and (self.tool_calls or self.reasoning or self.thinking):
            raise ValueError("a user message carries neither tool_calls nor reasoning nor thinking")
        if self.role == "user" and not self.content.strip():
            raise ValueError("a user message needs text other than whitespace (Anthropic refuses empty text "
                             "content; README \"Provider rules\")")
        ids = [c.call_id for c in self.tool_calls]
        if len(set(ids)) != len(ids):
            raise ValueError("tool call ids must be unique within a message")
        return self


class BindingIn(Strict):
    """Eq. 5 binding; ``revision`` omitted binds to the artifact's current revision."""

    artifact: ArtifactName
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    revision: Annotated[int, Field(ge=0, le=MAX_JSON_INT)] | None = Field(
        default=None, description="the server's revision read; omitted: the current one; ahead of the server's: 422")
    range: str | None = None
    content_hash: ContentHash | None = Field(default=None, description="hash of the content read (ctxd's adapters: SHA-256 "
                                     "hex of the UTF-8 bytes; compared as a string); a whole read's (no range) that "
                                     "contradicts the hash known for the current revision records an external change")
    ttl_seconds: Annotated[float, Field(ge=0)] | None = Field(
        default=None, description="kind external: seconds after fetched_at past which the item is shown as "
                                  "possibly stale (judged at the latest event's time)")
    fetched_at: AwareDatetime | None = Field(default=None, description="kind external: when it was read "
                                             "(default: the event's arrival)")


class ToolResultIn(Strict):
    event_id: EventId
    kind: Literal["tool_result"]
    call_id: CallId
    payload: str
    exit_code: int | None = None
    binding: BindingIn | None = None
    conditions: dict[str, Any] = Field(default_factory=dict)


class ArtifactWriteIn(Strict):
    event_id: EventId
    kind: Literal["artifact_write"]
    artifact: ArtifactName
    content_hash: ContentHash | None = Field(default=None, description="hash of the content written, when known "
                                             "(ctxd's adapters: SHA-256 hex of the UTF-8 bytes)")


class StepIn(Strict):
    event_id: EventId
    kind: Literal["step"]
    text: Annotated[str, Field(min_length=1)]


NoteKey = Annotated[str, Field(min_length=1, max_length=200), NoNul]


class HypothesisIn(Strict):
    """A diagnosis (table 7 "Hypotheses"); a later hypothesis with the same ``key``
    supersedes it. ``status``: working | supported | refuted. ``depends_on``: seqs of
    existing earlier events of the session (else 422)."""

    event_id: EventId
    kind: Literal["hypothesis"]
    key: NoteKey
    text: Annotated[str, Field(min_length=1)]
    status: Literal["working", "supported", "refuted"] = "working"
    depends_on: Annotated[list[Annotated[int, Field(ge=1, le=MAX_JSON_INT)]], Field(max_length=1000)] = Field(default_factory=list)


class ObligationIn(Strict):
    """Work still owed (table 7 "Unresolved obligations"); a later obligation with the same
    ``key`` supersedes it. ``status``: open | done | dropped."""

    event_id: EventId
    kind: Literal["obligation"]
    key: NoteKey
    text: Annotated[str, Field(min_length=1)]
    status: Literal["open", "done", "dropped"] = "open"


class PlanIn(Strict):
    """The agent's plan, whole (issue 16 item 1; seed 004 section 3.7): each plan event is a
    new version (the server numbers them 1, 2, ... per session), appended to the leaf; a
    pass folds the latest folded version into the progress record."""

    event_id: EventId
    kind: Literal["plan"]
    text: NonBlank



class DocumentIn(Strict):
    """A retrieved document (issue 16 item 3; seed 004 section 3.1.2): placed next to the
    instruction at the end of the leaf while current; a later document with the same
    ``key`` replaces it."""

    event_id: EventId
    kind: Literal["document"]
    key: NoteKey
    source: Annotated[str, Field(min_length=1, max_length=2048), NoNul]
    text: Annotated[str, Field(min_length=1)]


class ConclusionIn(Strict):
    """A sub-agent's conclusion, posted to its child session (issue 16 item 2): returned to
    the parent session as one observation naming the child and the handle of the text. A
    session without a parent refuses it (422)."""

    event_id: EventId
    kind: Literal["conclusion"]
    text: NonBlank



EventIn = Annotated[MessageIn | ToolResultIn | ArtifactWriteIn | StepIn | HypothesisIn | ObligationIn | PlanIn
                    | DocumentIn | ConclusionIn,
                    Field(discriminator="kind")]


class EventBatch(Strict):
    events: Annotated[list[EventIn], Field(min_length=1, max_length=1000)]

    @model_validator(mode="after")
    def _reads(self) -> EventBatch:
        """A tool result's ``conditions["reads"]`` entries (free-form conditions) name what
        a binding names: InvalidEvent (422, naming the event) for an artifact, revision or
        content hash the binding's schema would refuse (app/domain/ingest.py ``checked_read``)."""
        for index, event in enumerate(self.events):
            reads = event.conditions.get("reads") if isinstance(event, ToolResultIn) else None
            for entry in reads if isinstance(reads, list) else ():
                if isinstance(entry, dict) and isinstance(entry.get("artifact"), str) \
                        and entry.get("kind") != UNKNOWN_KIND:
                    checked_read(entry, {"index": index, "event_id": event.event_id})
        return self

    def posted(self) -> list[PostedEvent]:
        """The events as the services take them: typed values holding each field as the
        schema dumps it to JSON."""
        return [PostedEvent.from_json(e.model_dump(mode="json")) for e in self.events]


class EventResult(BaseModel):
    event_id: str
    seq: int
    status: Literal["created", "duplicate"]
    revision: int | None = None


class EventBatchOut(BaseModel):
    session_id: str
    last_seq: int
    results: list[EventResult]


# --- provider messages (issue 14 item 1; app/wire/inbound.py maps them) -----------------


class MessageBatch(Strict):
    """Provider messages as an agent keeps them (the SDK's objects dumped, or the dicts it
    sent), in the format the ``format`` query parameter names. ``start``: the position of
    ``messages[0]`` in the session's message stream (0: the whole history, re-posted)."""

    messages: Annotated[list[Any], Field(max_length=1000, description=(
        "OpenAI chat messages (roles system, developer, user, assistant, tool) or Anthropic messages (roles "
        "user, assistant), exactly as the SDK returns them"))]
    start: Annotated[int, Field(ge=0, le=2**31 - 1)] = Field(default=0, description=(
        "position of messages[0] in the session's message stream; a known position is compared (equal: no-op, "
        "changed: 409), a new one appended; past the next position: 422"))
    system: Any = Field(default=None, description="anthropic only: the top-level system prompt (a string or text "
                        "blocks), mapped to the session's instructions")


_EVENT = TypeAdapter(EventIn)


def validated_messages(mapped: list[MappedMessage], *, start: int,
                       max_instructions_chars: int | None = None) -> list[MappedMessage]:
    """``mapped`` with each event validated as ``POST /events`` validates it (and dumped the
    same way), so a message breaks no event rule (a user message with no text, an id with a
    NUL...), and instructions within ``max_instructions_chars`` (CTXD_MAX_STRING_CHARS, as
    the ``system`` of a session). Raises InvalidMessage (422) naming the message (``loc``)
    and the rule."""
    out = []
    for m in mapped:
        if max_instructions_chars is not None and len(m.instructions or "") > max_instructions_chars:
            raise InvalidMessage(f"the instructions at position {m.position} have {len(m.instructions or ''):,} "
                                 f"characters, over the limit of {max_instructions_chars:,} (setting "
                                 "CTXD_MAX_STRING_CHARS)", position=m.position,
                                 loc=["body", "system"] if m.position < 0 else ["body", "messages",
                                                                                  m.position - start])
        events = []
        for event in m.events:
            try:
                events.append(_EVENT.validate_python(event).model_dump(mode="json"))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ["body", "system"] if m.position < 0 else ["body", "messages", m.position - start]
                raise InvalidMessage(f"message {'system' if m.position < 0 else m.position - start} (position "
                                     f"{m.position}) maps to an invalid {event.get('kind')} event: "
                                     f"{first.get('msg', '')}", loc=where, position=m.position,
                                     event_id=event.get("event_id")) from None
        out.append(replace(m, events=tuple(events)))
    return out


class MessageResult(BaseModel):
    position: int = Field(description="the message's position in the session's message stream (-1: the "
                          "anthropic system prompt)")
    status: Literal["created", "duplicate"]
    event_ids: list[str] = Field(description="ids of the events it maps to (msg:<position>[:<part>])")
    seqs: list[int]
    instructions: bool = Field(description="the message carried instructions (a system or developer message)")


class MessageBatchOut(BaseModel):
    session_id: str
    last_seq: int
    next_position: int = Field(description="the position of the next new message")
    messages: list[MessageResult]


class PreconditionIn(Strict):
    """The state of ``artifact`` an action was planned on: its ``revision`` (the
    server's counter; an artifact never written is at 0) and/or its ``content_hash``."""

    artifact: Annotated[str, Field(min_length=1, max_length=1024)]
    revision: Annotated[int, Field(ge=0, le=MAX_JSON_INT)] | None = None
    content_hash: ContentHash | None = None

    @model_validator(mode="after")
    def _something(self) -> PreconditionIn:
        if self.revision is None and self.content_hash is None:
            raise ValueError("give revision or content_hash (or both)")
        return self


class PreconditionOut(BaseModel):
    """The precondition holds: the artifact's current state."""

    artifact: str
    revision: int
    content_hash: str | None = None
    holds: Literal[True] = True
