"""The provider-neutral request: root | trunk | leaf (seed 000 section 4.4, table 4).

Wire serializers (``app/wire``) and renderers (``app/tokenizers``) consume a
:class:`Conversation`; they never see events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.domain.types import Contract


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
    of event ``seq``; :func:`app.domain.text.neutralise_control_text`)."""

    role: str
    content: str
    tool_calls: tuple[LeafToolCall, ...] = ()
    call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    seq: int | None = None
    neutralised: int = 0


@dataclass(frozen=True)
class Conversation:
    """Root (system + tools), trunk (one user message), leaf (later messages)."""

    system: str
    tools: tuple[dict[str, Any], ...]
    trunk: str
    leaf: tuple[LeafMessage, ...]


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
