"""API schemas (pydantic v2). Never passed below the service boundary as ORM rows."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from app.domain.errors import InvalidMessage
from app.domain.manifest import Representation
from app.wire.inbound import MappedMessage


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character (U+0000): identifiers and the system text are stored as "
                         "SQL text, which cannot hold one (payloads and message text can)")
    return value


NoNul = AfterValidator(_no_nul)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("needs text other than whitespace")
    return value


#: text that must hold something other than whitespace (a plan, a conclusion, a child's goal)
NonBlank = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
#: Event id prefixes of the events the server appends itself (``infer:``: the artifact writes
#: inferred from a declared shell tool's command, app/services/shell_inference.py); a client's
#: event id starting with one is 422, so it can never collide with (or pose as) an inferred one.
RESERVED_EVENT_ID_PREFIXES = ("infer:",)


def _not_reserved(value: str) -> str:
    for prefix in RESERVED_EVENT_ID_PREFIXES:
        if value.startswith(prefix):
            raise ValueError(f"event ids starting {prefix!r} are reserved for the events the server infers "
                             "from shell tool calls; use another id")
    return value


EventId = Annotated[str, Field(min_length=1, max_length=200), NoNul, AfterValidator(_not_reserved)]
CallId = Annotated[str, Field(min_length=1, max_length=200), NoNul]
ArtifactName = Annotated[str, Field(min_length=1, max_length=1024), NoNul]
#: A content hash (eq. 5): compared as a string and kept as SQL text with the artifact's
#: revision (issue 11), so bounded and without NUL; ctxd's adapters send SHA-256 hex.
ContentHash = Annotated[str, Field(min_length=1, max_length=256), NoNul]
#: The largest row id (a signed 64-bit BIGINT on PostgreSQL, INTEGER on SQLite): a larger id in a
#: path or query is 422, not an overflow in the database driver (a 500).
ROW_ID_MAX = 2**63 - 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: The largest integer a field takes: JSON's exact range (2**53 - 1). A larger version or revision
#: was accepted and then failed as a 500 when the layout state was serialised (orjson's 64-bit limit).
MAX_JSON_INT = 2**53 - 1


class ConstraintIn(Strict):
    id: Annotated[str, Field(min_length=1, max_length=200), NoNul]
    text: Annotated[str, Field(min_length=1)]


class ContractIn(Strict):
    goal: Annotated[str, Field(min_length=1)]
    constraints: list[ConstraintIn] = Field(default_factory=list)
    contract_version: Annotated[int, Field(ge=1, le=MAX_JSON_INT)] = 1

    @model_validator(mode="after")
    def _unique_ids(self) -> ContractIn:
        ids = [c.id for c in self.constraints]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"constraint ids must be unique; repeated: {dupes}")
        return self


class FunctionDecl(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="a JSON Schema (draft 7) of the arguments")

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """README "Provider rules": a JSON Schema (draft 7, as mistral-common checks it) whose
        top level is ``"type": "object"`` (OpenAI and Anthropic ``input_schema``). mistral-common
        refuses the whole request otherwise, which once surfaced as a 500 on GET request (found
        by tests/api/test_schema_fuzz.py)."""
        if not value:
            return value
        from jsonschema import Draft7Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft7Validator.check_schema(value)
        except SchemaError as exc:
            where = "/".join(map(str, exc.path)) or "(top level)"
            raise ValueError(f"parameters is not a valid JSON Schema (draft 7) at {where}: {exc.message}") from None
        if value.get("type") != "object":
            raise ValueError('parameters must be a JSON Schema with "type": "object" at the top level')
        return value


class ToolDecl(BaseModel):
    """An OpenAI function declaration: ``{"type": "function", "function": {...}}``."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionDecl


#: Most characters of a session's title (``sessions.title``, migration 0015_session_title).
TITLE_MAX_CHARS = 200


#: bidirectional embedding, override and isolate controls: they reorder what follows them
#: on screen (a title shown in a list could then read as something else)
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _no_control(value: str) -> str:
    """A title is one line of plain text: no control character (Unicode category Cc: U+0000
    to U+001F, U+007F to U+009F; a newline or a tab included), no line or paragraph separator
    (U+2028, U+2029), no bidirectional control, and some text besides blanks."""
    for at, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _BIDI_CONTROLS:
            raise ValueError(f"must not contain control characters: U+{ord(char):04X} at character {at} (a title is "
                             "one line of plain text)")
    if not value.strip():
        raise ValueError("must hold text, not only blanks (null clears a title)")
    return value


#: A session's title: a short human label (1 to 200 characters, no control character), shown
#: by GET /v1/sessions/{id}, the sessions list and the inspector; no request depends on it.
Title = Annotated[str, Field(min_length=1, max_length=TITLE_MAX_CHARS,
                             json_schema_extra={"pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]*$"}),
                  AfterValidator(_no_control)]
TITLE_DESCRIPTION = ("a short human label for the session (1 to 200 characters, no control characters such as a "
                     "newline); shown by GET /v1/sessions/{id}, the sessions list and the inspector; no request "
                     "depends on it")


#: A model name as providers and serving engines spell it ("Qwen/Qwen3-8B", "gpt-4o-mini",
#: "anthropic.claude-3-5-sonnet-20240620-v1:0"): no whitespace, no control characters.
ModelName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\s\x00-\x1f\x7f]+$")]


#: What the session create documents of ``metadata`` (the keys ctxd reads; the rest is kept as given).
METADATA_DESCRIPTION = (
    "free-form, kept as given; ctxd reads two keys. `invalidation`: auto (default), tombstone or notice "
    "(README \"Invalidation\"). `shell_tools`: a list of {name, argument}: the tools whose string argument "
    "`argument` is a bash command; the result of a call to one, posted without a binding, gets the bindings, "
    "artifact writes and content hashes inferred from the command (README \"Inferred bindings\"). Default: "
    "each declared tool named bash, shell, run_shell, execute_bash or terminal with a string parameter "
    "`command` (else `cmd`); [] turns inference off")


class _SessionOptions(Strict):
    """What a session create and a child create check alike: ``metadata.invalidation`` and
    unique tool names."""

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _invalidation(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _shell_tools(_invalidation_mode(value))

    @model_validator(mode="after")
    def _unique_tools(self) -> _SessionOptions:
        _unique_tool_names(getattr(self, "tools", None))
        return self


class SessionCreate(_SessionOptions):
    profile: str | None = Field(default=None, description="profile name; default from settings (qwen3)")
    model: ModelName | None = Field(default=None, description=(
        "the `model` of this session's request bodies in every format (openai, anthropic, tokens), e.g. the "
        "name a vLLM server was started with (--served-model-name); default: the profile's model. The "
        "chat template does not render it: token counts do not change"))
    contract: ContractIn
    system: Annotated[str, NoNul] = ""
    tools: list[ToolDecl] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict, description=METADATA_DESCRIPTION)
    title: Title | None = Field(default=None, description=TITLE_DESCRIPTION)


class SessionUpdate(Strict):
    """``PATCH /v1/sessions/{id}``: the fields of a session that may change after its create
    (none of them changes a request). ``title``: the new title, or null to clear it."""

    title: Title | None = Field(description=TITLE_DESCRIPTION + "; null clears it")


def _shell_tools(value: dict[str, Any]) -> dict[str, Any]:
    """``metadata.shell_tools`` (README "Inferred bindings"): a list of ``{"name", "argument"}``
    naming the shell tools whose string argument is a bash command."""
    tools = value.get("shell_tools")
    if tools is None:
        return value
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and set(t) == {"name", "argument"}
            and all(isinstance(t[k], str) and 1 <= len(t[k]) <= 64 and "\x00" not in t[k] for k in t)
            for t in tools):
        raise ValueError('metadata.shell_tools must be a list of {"name": tool name, "argument": name of its '
                         'string argument holding the bash command} (1 to 64 characters each)')
    return value


def _invalidation_mode(value: dict[str, Any]) -> dict[str, Any]:
    """``metadata.invalidation``: how superseded observations are shown (README
    "Invalidation"): ``auto`` (default), ``tombstone`` or ``notice``."""
    mode = value.get("invalidation", "auto")
    if mode not in ("auto", "tombstone", "notice"):
        raise ValueError(f"metadata.invalidation must be auto, tombstone or notice, not {mode!r}")
    return value


def _unique_tool_names(tools: list[ToolDecl] | None) -> None:
    names = [t.function.name for t in tools or []]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"tool names must be unique; repeated: {dupes}")


class SessionCreated(BaseModel):
    id: str


class SessionOut(BaseModel):
    id: str
    profile: str
    model: str | None = Field(description="the `model` of the request bodies: the session's own, else the profile's")
    contract: dict[str, Any]
    system: str
    tools: list[dict[str, Any]]
    metadata: dict[str, Any]
    events: int
    last_seq: int
    artifacts: dict[str, int]
    created_at: str
    title: str | None = Field(default=None, description="the session's title (null: none)")
    parent: str | None = Field(default=None, description="the parent session of a child session (issue 16)")
    children: list[str] = Field(default_factory=list, description="ids of this session's child sessions, oldest first")


class ChildCreate(_SessionOptions):
    """A child session for a sub-agent (issue 16 item 2): it inherits the parent's tenant
    and constraints verbatim (ids, texts, contract version); ``goal`` is the sub-task.
    System text, tools, profile and model default to the parent's, and so do the metadata
    keys ``shell_tools`` and ``invalidation`` unless ``metadata`` gives them."""

    goal: NonBlank
    system: Annotated[str, NoNul] | None = None
    tools: list[ToolDecl] | None = None
    profile: str | None = None
    model: ModelName | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)



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


# --- manifests (response models: they document the GET answers in the OpenAPI document;
# the routes return pre-serialized bytes, see app/api/routes/v1.py) ---------------------


class Described(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokensOut(Described):
    """Exact tokens of the rendered request (profile tokenizer, chat framing included)."""

    total: int
    by_zone: dict[Literal["root", "trunk", "leaf"], int]
    by_role: dict[Literal["system", "tools", "task_state", "observations"], int]


class BudgetOut(Described):
    """Eq. 1: ``input_limit = window - output_reserve - headroom`` (tokens)."""

    window: int
    output_reserve: int
    headroom: int
    input_limit: int
    t_lo: int | None = Field(default=None, description="compaction target T_lo (tokens; the window policy's "
                             "eviction target)")
    low_watermark: int = Field(description="T_lo under its former name (tokens)")
    role_limits: dict[str, int] = Field(description="each budget role's planning share of input_limit (tokens)")


class DivergenceOut(Described):
    zone: Literal["root", "trunk", "leaf"]
    seq: int | None
    token_offset: int
    reason: str


class CacheOut(Described):
    """Prefix reuse against the previous request of the session in the same format."""

    model: Literal["vllm_blocks", "openai", "anthropic", "none"]
    block_size: int
    predicted_cached_tokens: int
    uncached_tokens: int
    previous_tokens: int
    common_prefix_tokens: int
    common_prefix_exact: bool
    extends_previous: bool
    breakpoints: list[int] | None = Field(default=None, description="cache_control token offsets (anthropic)")
    first_divergence: DivergenceOut | None = Field(default=None, description="set when the request does not "
                                                   "extend the previous one")


class LayoutOut(Described):
    root: str
    trunk: str
    leaf: str
    cut_seq: int = Field(description="seq of the first kept turn group; earlier groups are elided")
    version: int | None = Field(default=None, description="version of the session's layout state")
    evicted_now: int
    elision_index: list[str] = Field(description="handles of the index payloads the elision note names")


class TransformOut(Described):
    name: str
    count: int | None = None
    note: str = ""


class WriteOut(Described):
    """The change that first superseded a historical observation (issue 11)."""

    artifact: str
    revision: int = Field(description="the revision the change created (the server's counter)")
    seq: int = Field(description="seq of the change's event")
    event_id: str
    cause: Literal["write", "external"] = Field(description="write: an artifact_write event; external: a read whose "
                                                "content hash matched no logged write")


class InvalidationChoiceOut(Described):
    """How a historical or possibly stale observation is shown (seed 000 table 9) and its cost."""

    choice: Literal["tombstone", "notice", "deferred"] = Field(
        description="tombstone: replaced in place; notice: kept, a notice appended; deferred: a tombstone waiting for "
                    "the next trunk rewrite, a notice shown meanwhile")
    tokens: int | None = Field(default=None, description="tokens of the tombstone")
    replaced_tokens: int | None = Field(default=None, description="tokens of the output the tombstone replaces")
    stale_tokens_kept: int | None = Field(default=None, description="tokens of the stale output left in the request")
    cache: str = Field(description="the choice's effect on prefix reuse")


class ItemOut(Described):
    """One event as the manifest accounts for it."""

    seq: int
    event_id: str
    kind: Literal["message", "tool_result", "artifact_write", "step", "hypothesis", "obligation", "plan", "document",
                  "conclusion", "child_conclusion"]
    handle: str | None = None
    call_id: str | None = None
    bytes: int | None = Field(default=None, description="payload bytes (UTF-8) of a tool result")
    lines: int | None = Field(default=None, description='payload lines ("\\n") of a tool result')
    tokens_known: bool | None = Field(default=None, description="whether the tool result's payload tokens are "
                                      "known yet (counted once after its POST)")
    tokens: int | None = Field(default=None, description=(
        "a tool result: its payload's tokens (the whole payload, no framing), when known; a user or assistant "
        "message in the leaf: the tokens it adds to the rendered request, chat framing included (exact, from the "
        "request's own count; absent where the profile's meter cannot attribute them, e.g. a mistral-tekken user "
        "message merged into the [INST] block before it)"))
    zone: Literal["root", "trunk", "leaf"] | None
    representation: Representation
    why: str
    elided_bytes: int | None = Field(default=None, description="bytes a head + tail cut leaves out")
    elided_lines: list[int] | None = Field(default=None, description="[first, last] line a head + tail cut leaves "
                                           "out (read them back with ?lines=first:last)")
    elided_tokens: int | None = Field(default=None, description="tokens cut out of a head + tail result, when known")
    pending_calls: list[str] | None = None
    transforms: list[TransformOut] | None = Field(default=None, description="changes applied to the text on its way "
                                                  "into the request, in the order applied")
    state: Literal["current", "historical", "possibly_stale", "unknown", "unbound"] | None = Field(
        default=None, description="a tool result's support (issue 11): current: bound, nothing changed since; "
                                  "historical: true of the revision it read, no longer of the current one; "
                                  "possibly_stale: an external read past its TTL; unknown: the command's effect is "
                                  "unknown; unbound: no binding")
    bindings: list[str] | None = Field(default=None, description="what the tool result read, path@rN[ lines a:b]")
    superseded_by: list[str] | None = Field(default=None, description="the writes that made it historical, path@rN")
    write: WriteOut | None = Field(default=None, description="the first of those writes")
    fetched_at: float | None = Field(default=None, description="an external read's fetch time (epoch seconds)")
    expires_at: float | None = Field(default=None, description="fetched_at + its TTL (epoch seconds)")
    invalidation: InvalidationChoiceOut | None = Field(default=None, description="how it is shown, when not current")


class EventRangeOut(Described):
    """Older events accounted for together (the manifest stays bounded by the window)."""

    seq_from: int
    seq_to: int
    events: int
    representations: dict[Representation, int]
    tokens: int = Field(description="payload tokens of the elided tool results in the range (the known counts)")
    bytes: int | None = Field(default=None, description="payload bytes of the elided tool results in the range")
    tokens_known: bool | None = Field(default=None, description="false while some result's count is not known yet")
    index: str | None = Field(description="handle of the index payload naming their turn and result handles")
    why: str


class NoticeOut(Described):
    after_seq: int = Field(description="the notice follows the turn group starting at this seq")
    tokens: int


class InvalidationOut(Described):
    """The request's invalidation summary (issue 11; seed 000 table 9)."""

    mode: Literal["auto", "tombstone", "notice"] = Field(description="the session's metadata.invalidation")
    pass_due: bool = Field(description="a trunk rewrite was due: tombstones of new changes wait for it")
    deferred: list[int] = Field(description="seqs of the changes whose tombstones wait for the next trunk rewrite")
    shown_upto: int = Field(description="the latest change seq whose tombstones were shown")
    historical: int = Field(description="historical observations in the request")
    tombstones: int
    tombstone_tokens: int
    replaced_tokens: int = Field(description="tokens of the outputs the tombstones replace")
    noticed: int = Field(description="historical or possibly stale observations kept with a notice")
    stale_tokens_kept: int = Field(description="tokens of those outputs, still in the request")
    notices: list[NoticeOut]
    notice_tokens: int
    presented: list[str] = Field(description="revisions (path@rN) the request presents as current: what an action "
                                             "planned on it assumes (POST /preconditions checks them)")


class ManifestOut(Described):
    """What the request contains and why (persisted under ``id``)."""

    session_id: str
    profile: str
    format: Literal["openai", "anthropic", "tokens"]
    last_seq: int
    request_sha256: str = Field(description="sha256 of the request body's JSON bytes")
    tokens: TokensOut
    budget: BudgetOut
    cache: CacheOut
    layout: LayoutOut
    items: list[ItemOut]
    elided: list[ItemOut] = Field(description="evicted events of the newest evicted turn groups, each with its handle")
    invalidation: InvalidationOut | None = Field(default=None, description="superseded observations and how they "
                                                 "are shown")
    elided_tokens: int
    elided_tokens_exact: bool | None = Field(default=None, description="false while some elided or cut output's "
                                             "token count is not known yet (elided_tokens sums the known ones)")
    layout_warnings: list[str]
    ranges: list[EventRangeOut] | None = Field(default=None, description="older events accounted for together")
    compaction: dict[str, Any] | None = Field(default=None, description="select's compaction: policy, whether this "
                                              "request ran a pass, watermarks, the pass forecast (tokens, growth "
                                              "per call, N, due), the progress record's fold point, tokens, budget "
                                              "and source: deterministic or model-written, with wait {seconds, ran_out} "
                                              "when the pass's GET waited for the summarizer (issue 10)")
    id: int


class AssembledRequest(BaseModel):
    request: dict[str, Any] = Field(description="the wire body for the requested format, to send as is")
    manifest: ManifestOut


class ManifestSummaryOut(Described):
    id: int
    format: str
    last_seq: int
    request_sha256: str
    tokens_total: int
    created_at: str


class ManifestList(Described):
    session_id: str
    manifests: list[ManifestSummaryOut]
    next_before_id: int | None


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


# --- issue 12: tenancy and lifecycle ----------------------------------------------------

class SessionSummary(BaseModel):
    id: str
    profile: str
    model: str | None = Field(description="the `model` of the request bodies: the session's own, else the profile's")
    title: str | None = Field(default=None, description="the session's title (null: none)")
    goal: str = Field(default="", description="the first line of the contract's goal, at most 120 characters (cut "
                                              "with '…' when longer)")
    last_seq: int
    created_at: str


class SessionList(BaseModel):
    sessions: list[SessionSummary]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")


class SessionDeleted(BaseModel):
    id: str
    payloads_deleted: int = Field(description="payloads no other session referenced, now gone")
    payloads_kept: int = Field(description="payloads of this session that another session still references")


class ProfileOut(BaseModel):
    name: str
    model: str
    tokenizer: dict[str, Any]
    window: int = Field(description="context window W, tokens")
    output_reserve: int = Field(description="O, tokens")
    headroom: int = Field(description="M, tokens")
    input_limit: int = Field(description="W - O - M, tokens (eq. 1)")
    item_cap_tokens: int
    render_reasoning: bool
    recall: bool = Field(default=False, description="requests carry the `recall` tool declaration (README \"Recall\")")
    cache: dict[str, Any]
    prices: dict[str, float]


class ProfileList(BaseModel):
    default: str
    profiles: list[ProfileOut]


# --- issue 14 item 3: recall (event pages, search) --------------------------------------

class EventPage(BaseModel):
    session_id: str
    representation: Literal["summary", "full"]
    events: list[dict[str, Any]] = Field(description="events in seq order: seq, event_id, kind, created_at and the "
                                         "stored fields (handle; a redacted tool output's view); full: a tool "
                                         "result's payload; summary: payload_summary / content_summary (head, lines, "
                                         "chars, truncated)")
    next_after_seq: int | None = Field(description="pass as `after_seq` for the next page; null on the last page")


class SearchMatch(BaseModel):
    field: str = Field(description="payload (a tool result's rendered text), content, reasoning, tool_calls, text, "
                                   "artifact")
    handle: str | None = Field(description="payload matches: the handle whose `?lines=` slices these lines; else null")
    lines: str = Field(description="a:b, 1-based, inclusive")
    start_line: int
    end_line: int
    exact: bool = Field(description="a match with the query's case")
    word: bool = Field(description="an exact match standing alone (no letter, digit or _ either side)")
    matches: int = Field(description="occurrences in this range")
    text: str = Field(description="the lines when they hold at most 400 characters, else a window of at most 400 "
                                  "around the first match with each cut side marked `[... N chars]`")
    offset: int = Field(description="the first match's UTF-8 byte offset in the field's text (a payload: in the "
                                    "handle's bytes, for `GET .../handles/{handle}?offset=&length=`)")
    length: int = Field(description="the first match's length in UTF-8 bytes")
    cut_before: int | None = Field(default=None, description="characters of the lines left out before the window")
    cut_after: int | None = Field(default=None, description="characters of the lines left out after the window")


class SearchHit(BaseModel):
    model_config = ConfigDict(extra="allow")  # role, call_id
    seq: int
    event_id: str
    kind: str
    rank: Literal["word", "exact", "case_insensitive"]
    handle: str | None
    match_count: int
    matches: list[SearchMatch]


class SearchResult(BaseModel):
    session_id: str
    query: str
    hits: list[SearchHit]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null on the last page")
    capped: bool = Field(description="more indexed texts held the query than one search ranks (2000, newest first)")
