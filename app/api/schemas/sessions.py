"""Session schemas: create, update, children, the session as GET shows it, lists, profiles."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from app.api.schemas.common import (
    MAX_JSON_INT,
    NonBlank,
    NoNul,
    Strict,
)


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
