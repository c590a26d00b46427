"""Untrusted spans framed as data (issue 11 item 7). Pure standard library.

Every tool payload enters the request inside one fixed frame::

    <<<ctxd-data source="tool:bash" revision="config.yaml@r0 lines 1:20" trust="untrusted">>>
    exit_code: 0
    ...the tool's output (head + tail when cut)...
    <<<end-ctxd-data>>>

The opening line, a newline, the tool message's text (run facts, then the output), a
newline, the closing line: always, so :func:`unframe` recovers the text exactly. ctxd's
own notices (issue 11 item 4) follow the closing line, outside the frame.

* ``source``: where the text came from: ``tool:<name>`` (the tool message itself pairs
  it with its call).
* ``revision``: what it read (eq. 5 bindings as ``path@rN``, ranges as ``lines a:b``,
  several joined by ``, ``), ``unbound`` when nothing is known, ``unknown effect`` when
  the command could not be interpreted.
* ``trust``: ``untrusted`` for every tool payload: text to read as data, never as
  instructions of the system, the user or ctxd.

Attribute values are JSON strings (quotes, backslashes and control characters escaped),
so an artifact name cannot end an attribute or the opening line.

The payload cannot close or forge the frame: inside the payload, every ``<<<`` directly
followed by ``ctxd-data`` or ``end-ctxd-data`` gets U+200B inserted after it
(:func:`escape_payload`), so the frame's two delimiters occur in the framed text exactly
once each, at its ends. Inserting a character that is neither ``<`` nor a letter cannot
create a new delimiter, and the closing delimiter is searched by exact match. The
handle keeps the payload exactly as posted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from app.domain.types import Binding

__all__ = ["CLOSE", "OPEN", "escape_payload", "frame", "frame_attributes", "revision_attribute", "unframe"]

OPEN = "<<<ctxd-data"
CLOSE = "<<<end-ctxd-data>>>"
_DELIMITER = re.compile(r"(?<=<<<)(?=(?:end-)?ctxd-data)")
ZWSP = "\u200b"


def escape_payload(text: str) -> tuple[str, int]:
    """``text`` with every frame delimiter broken (U+200B after its ``<<<``), and how many."""
    return _DELIMITER.subn(ZWSP, text)


def _attr(value: str) -> str:
    quoted = json.dumps(value, ensure_ascii=False)
    return _DELIMITER.sub(ZWSP, quoted).replace(">>>", ">\\u003e>")


def revision_attribute(bindings: Sequence[Binding]) -> str:
    """The ``revision`` attribute: each binding as ``path@rN`` (``lines a:b`` when a
    range), ``unknown effect`` for an unknown one, ``unbound`` when there is none."""
    if not bindings:
        return "unbound"
    parts = []
    for b in bindings:
        if b.kind == "unknown":
            parts.append("unknown effect")
            continue
        part = f"{b.artifact}@r{b.revision}" if b.revision >= 0 else b.artifact
        if b.range:
            part += f" lines {b.range}"
        if b.kind not in ("file", ""):
            part += f" ({b.kind})"
        parts.append(part)
    return ", ".join(dict.fromkeys(parts))


def frame_attributes(*, tool: str, call_id: str, bindings: Sequence[Binding], trust: str = "untrusted") -> str:
    """The opening line of a frame (without the payload)."""
    source = f"tool:{tool}"  # not the call id: the tool message pairs with its call, and ids vary in length
    return (f"{OPEN} source={_attr(source)} revision={_attr(revision_attribute(bindings))} "
            f"trust={_attr(trust)}>>>")


def frame(text: str, *, tool: str, call_id: str, bindings: Sequence[Binding], trust: str = "untrusted") -> tuple[str, int]:
    """``text`` (already bounded) inside the frame; returns the framed text and how many
    delimiters were escaped in it (a transform the manifest records)."""
    body, escaped = escape_payload(text)
    return f"{frame_attributes(tool=tool, call_id=call_id, bindings=bindings, trust=trust)}\n{body}\n{CLOSE}", escaped


def unframe(content: str) -> str:
    """The text inside a tool message's frame (escaped delimiters stay escaped; ctxd's
    notices after the frame are dropped): the inverse of :func:`frame` on a payload
    without delimiters. ``content`` without a frame is returned as it is."""
    if not content.startswith(OPEN):
        return content
    start = content.find(">>>\n")
    end = content.rfind("\n" + CLOSE)
    return content if start < 0 or end < start else content[start + 4:end]
