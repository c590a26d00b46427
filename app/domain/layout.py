"""The provider-neutral request: root | trunk | leaf (seed 000 section 4.4, table 4).

Wire serializers (``app/wire``) and renderers (``app/tokenizers``) consume a
:class:`Conversation`; they never see events.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.domain.types import Contract, ThinkingBlock


def begins_with(items: tuple[Any, ...], prefix: tuple[Any, ...]) -> bool:
    """Whether ``items`` begins with ``prefix`` (equal elements, compared in C: the same
    objects by identity first). How a GET finds that its leaf (or its items) extends the
    last GET's, whose derived figures a session memo then reuses."""
    return len(prefix) <= len(items) and items[:len(prefix)] == prefix


@dataclass(frozen=True)
class LeafToolCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class LeafMessage:
    """One leaf message. ``role`` is assistant, tool or user; tool messages carry
    ``call_id`` and ``name``; assistant messages may carry ``tool_calls``.
    ``neutralised`` counts the control strings broken in its texts (for the manifest item
    of event ``seq``; :func:`app.domain.text.neutralise_control_text`). ``thinking``: the
    Anthropic thinking blocks an assistant message was posted with (only the anthropic
    wire format sends them; the profile's render sees ``reasoning``); ``is_error``: a tool
    result posted as an error (the anthropic format's ``tool_result.is_error``).

    ``memo``: what renderers and serializers derive from this message (its template dict,
    its wire form, its digest), kept with the message itself: a session's leaf messages
    are reused from request to request (``assemble_window(leaf_cache=...)``), so each is
    converted once, and the memo goes when the message goes (no process-global cache).
    Not part of the value (equality, hash, repr); keys are ``(who, variant)`` tuples and
    entries are treated as read-only by every reader."""

    role: str
    content: str
    tool_calls: tuple[LeafToolCall, ...] = ()
    call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    seq: int | None = None
    neutralised: int = 0
    thinking: tuple[ThinkingBlock, ...] = ()  # an assistant message's Anthropic thinking blocks, untouched
    is_error: bool = False  # a tool message whose result was posted as an error (Anthropic ``is_error``)
    memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Conversation:
    """Root (system + tools), trunk (one user message), leaf (later messages)."""

    system: str
    tools: tuple[dict[str, Any], ...]
    trunk: str
    leaf: tuple[LeafMessage, ...]


# -- leaf-level normalisation (README "Provider rules": every wire format and profile sees
# -- the same values, so the bodies served and the count agree; the event log keeps the raw text)

FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI, Anthropic and mistral-common function names
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]")


_JSON_TYPE = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN / Infinity: Python accepts them, JSON does not


def _arguments(arguments: str) -> tuple[str, str | None]:
    if not arguments.strip():
        return "{}", None  # no arguments: vLLM and SGLang read "" as {}
    try:
        value = json.loads(arguments, parse_constant=_reject_constant)
        # an object the template would print with a lone surrogate cannot be encoded as UTF-8
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        problem = "not JSON"
    else:
        if isinstance(value, dict):
            return arguments, None
        problem = f"a JSON {_JSON_TYPE.get(type(value), 'value')}"
    return json.dumps({"arguments": arguments}, ensure_ascii=False), problem


def tool_arguments(arguments: str) -> str:
    """Tool-call arguments as every request carries them: a JSON object's text.

    The text itself when it parses (strict JSON: no NaN or Infinity) to an object; ``"{}"``
    for empty or blank text (what vLLM and SGLang make of it); anything else wrapped as
    ``{"arguments": <the text>}`` (the text kept whole, as the Anthropic ``tool_use.input``
    needs an object). vLLM ``json.loads`` the arguments of every history call before
    rendering and, depending on its version, refuses a request whose text does not parse
    or renders ``{}`` instead: after this, the count is what it renders.
    """
    return _arguments(arguments)[0]


def arguments_problem(arguments: str) -> str | None:
    """Why :func:`tool_arguments` wrapped ``arguments`` ("not JSON", "a JSON array", ...),
    or None when the text was kept or was empty."""
    return _arguments(arguments)[1]


def function_name(name: str) -> str:
    """A tool call's name as requests carry it: ``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI,
    Anthropic ``tool_use.name``, mistral-common), every other character replaced by
    ``_`` (declared tool names already match, so only a name the model made up changes)."""
    return name if FUNCTION_NAME.match(name) else (_NOT_NAME.sub("_", name)[:64] or "_")


def assistant_text(content: str) -> str:
    """Assistant text as requests carry it: trailing whitespace removed.

    Anthropic answers 400 to a request whose final assistant text ends in whitespace; the
    text is trimmed in every assistant message, not only the last, so a message renders the
    same whether or not it ends the request (the leaf stays append-stable) and every format
    and the count see the same text."""
    return content.rstrip()


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, fixed separators, UTF-8 kept (stable bytes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_tools(tools: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Tool declarations sorted by function name, each normalised through canonical JSON
    (key order sorted), so the root renders to the same bytes on every call."""

    def name(tool: dict[str, Any]) -> str:
        return str(tool.get("function", {}).get("name", tool.get("name", "")))

    return tuple(json.loads(canonical_json(t)) for t in sorted(tools, key=name))


def render_contract(contract: Contract) -> str:
    """The task contract as trunk text: goal and every constraint verbatim with its id."""
    lines = [f"# Task contract (version {contract.contract_version})", "", "## Goal", contract.goal.strip("\n"), ""]
    if contract.constraints:
        lines.append("## Constraints (binding; ids are stable)")
        for constraint in contract.constraints:
            lines.append(f"[{constraint.id}]")
            lines.append(constraint.text)
            lines.append("")
    return "\n".join(lines).rstrip("\n")
