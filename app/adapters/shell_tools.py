"""Declared shell tools and the bindings inferred from their commands (issue 11 items 1, 2).

Shared by the offline importer (:mod:`ctxd_tools.miniswe`) and the service's ingest
(:func:`app.services.sessions.ingest_events`), so both infer the same reads, writes and
content hashes from a command (rules in :mod:`app.adapters.bash_effects`). Pure functions
over JSON values; tree-sitter-bash through :mod:`app.adapters.bash_effects`.

Declared shell tools
--------------------
A session's shell tools map a tool name to the argument holding the bash command:

* explicit: ``metadata.shell_tools = [{"name": "run", "argument": "script"}, ...]``
  (an empty list turns inference off);
* default: each declared tool (``tools``) whose name is one of :data:`SHELL_NAMES` and whose
  parameters have a string property ``command`` (else ``cmd``): that property.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from app.adapters.bash_effects import CallEffects
from app.domain.invalidation import UNKNOWN_KIND, content_hash

__all__ = [
    "COMMAND_ARGUMENTS",
    "SHELL_NAMES",
    "call_bindings",
    "declared_shell_tools",
    "hash_effects",
    "unknown_binding",
]

#: Tool names taken as a shell tool by default (with a string ``command``/``cmd`` parameter).
SHELL_NAMES: Final = frozenset({"bash", "shell", "run_shell", "execute_bash", "terminal"})
#: The parameters taken as the command of a default shell tool, in order of preference.
COMMAND_ARGUMENTS: Final = ("command", "cmd")


def declared_shell_tools(tools: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any]) -> dict[str, str]:
    """{tool name: name of its command argument} of a session: ``metadata["shell_tools"]``
    when present (a list of ``{"name", "argument"}``, validated at session create), else the
    default rule of the module docstring over ``tools`` (OpenAI function declarations)."""
    explicit = metadata.get("shell_tools")
    if isinstance(explicit, list):
        return {t["name"]: t["argument"] for t in explicit if isinstance(t, Mapping)}
    out: dict[str, str] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or fn.get("name") not in SHELL_NAMES:
            continue
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        for arg in COMMAND_ARGUMENTS:
            spec = props.get(arg) if isinstance(props, Mapping) else None
            if isinstance(spec, Mapping) and spec.get("type") == "string":
                out[str(fn["name"])] = arg
                break
    return out


def unknown_binding() -> dict[str, Any]:
    """The binding of a command whose effect is unknown (it does not parse): it supports
    nothing and no write marks it (issue 11 item 2)."""
    return {"artifact": "*", "kind": UNKNOWN_KIND, "range": None}


def call_bindings(
    call: CallEffects, revisions: Mapping[str, int]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """(binding of the first read, the other distinct reads) of one call; the binding of an
    unparsed call is :func:`unknown_binding`.

    ``revisions`` holds the artifacts' revisions before this call's writes (missing: 0); a
    read followed by a write of the same artifact in this call carries the revision it saw
    explicitly (``cat f && sed -i .. f`` read r, not r+1); other reads carry none (the
    server binds them to the current revision, the one they saw)."""
    if not call.effects.parsed:
        return unknown_binding(), []
    entries: list[dict[str, Any]] = []
    for r in call.effects.reads:
        entry: dict[str, Any] = {"artifact": r.artifact, "range": r.range}
        if r.writes_before < sum(1 for a in call.written if a == r.artifact):
            entry["revision"] = revisions.get(r.artifact, 0) + r.writes_before
        if entry not in entries:
            entries.append(entry)
    if not entries:
        return None, []
    first = entries[0]
    binding = {"artifact": first["artifact"], "kind": "file", "range": first["range"]}
    if "revision" in first:
        binding["revision"] = first["revision"]
    return binding, entries[1:]


def hash_effects(call: CallEffects, writes: Sequence[dict[str, Any]], binding: dict[str, Any] | None, *,
                 exit_code: int | None, failed: bool, payload: str) -> None:
    """Give content hashes (:func:`app.domain.invalidation.content_hash`) where the content
    is known exactly, and only when the command ran to completion (``exit_code`` 0 and not
    ``failed``, e.g. an exception or a timeout: such a command may have written or printed
    part):

    * each write (dicts with ``"artifact"``, in the order of ``call.written``) whose whole
      text the command states (``cat > f <<'EOF'``, ``echo``, ``printf``, ``cp`` of a known
      file): the hash of that text, unless it holds a carriage return (a shell tool's text
      mode turns CRLF into LF, so a read could never match it);
    * the binding of a command that prints one file whole and alone (``cat f``, after
      ``cd`` only: :attr:`CommandEffects.shows`): the hash of the output, unless the output
      holds U+FFFD (bytes that were not UTF-8, replaced: not what the file holds).

    Writes of unknown text (``sed -i``, scripts, ``git checkout``), ranges and any other
    read get no hash. ``payload`` is the raw output, before any redaction."""
    if exit_code != 0 or failed:
        return
    for w, text in zip(writes, call.contents, strict=False):
        if w["artifact"] != "." and text is not None and "\r" not in text:
            h = content_hash(text)
            if h is not None:
                w["content_hash"] = h
    shows = call.effects.shows
    if binding is not None and shows is not None and binding["artifact"] == shows and binding.get("range") is None \
            and "\ufffd" not in payload:
        h = content_hash(payload)
        if h is not None:
            binding["content_hash"] = h
