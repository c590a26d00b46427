"""Tool-result digest (seed 000 section 4.5.1, table 5 "tool-result digest and raw handle",
table 6 last row; section 4.2's handle rule: a digest in the request, the payload whole
behind its handle).

A digest is ``{command, status, exit code, size (bytes, lines), key lines, handle}``,
rendered as a few short lines::

    [ctxd: digest of a tool result, whole output behind handle 1a2b3c4d5e6f: exit 1 (failed), 5210 bytes, 87 lines]
    [ctxd: command: cd /testbed && python -m pytest tests/test_x.py]
    L80: FAILED tests/test_x.py::test_y - AssertionError: ...
    L87: ========================= 1 failed, 3 passed in 0.12s =========================

Key lines are protected lines (:mod:`app.domain.compaction.patterns`), taken alternately
from the first and the last when there are more than fit, then the last non-blank line,
shown in input order; each is prefixed with ``L<n>: ``, its raw line number. Table 6: a digest can silently drop "every detail of the
payload until the handle is retrieved". The status comes from the exit code, which a
pipeline can mask (``pytest ... | tail`` exits 0): the key lines still show the failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

from app.domain.compaction.lineage import SHORT_HANDLE, Compacted, Span, body_of, coerce, cut_line, finish, marker
from app.domain.compaction.patterns import alternate, is_protected

__all__ = ["KIND", "ToolDigest", "digest_tool_result", "tool_digest"]

KIND: Final = "digest"
COMMAND_CHARS: Final = 160


@dataclass(frozen=True)
class ToolDigest:
    """The fields of a digest. ``status``: ``ok`` (exit 0), ``failed`` (other exit codes),
    ``exception`` (the tool raised or timed out: ``exception`` names it), ``unknown`` (no
    exit code). ``bytes`` are UTF-8 bytes and ``lines`` raw lines of the whole payload;
    ``key_lines`` are ``(raw line number, text)`` with text cut at ``max_line_chars``."""

    command: str | None
    status: str
    exit_code: int | None
    exception: str | None
    bytes: int
    lines: int
    key_lines: tuple[tuple[int, str], ...]
    handle: str

    def as_dict(self) -> dict[str, Any]:
        return {"command": self.command, "status": self.status, "exit_code": self.exit_code,
                "exception": self.exception, "bytes": self.bytes, "lines": self.lines,
                "key_lines": [list(k) for k in self.key_lines], "handle": self.handle}

    def header(self) -> list[str]:
        """The rendered marker lines before the key lines: status and size, then the
        command's first line (cut at 160 characters)."""
        exit_part = f"exit {self.exit_code}" if self.exit_code is not None else "no exit code"
        exception = f", {self.exception}" if self.exception else ""
        out = [marker(f"digest of a tool result, whole output behind handle {self.handle[:SHORT_HANDLE]}: "
                      f"{exit_part} ({self.status}{exception}), {self.bytes} bytes, {self.lines} lines")]
        if self.command and self.command.strip():
            first, *rest = self.command.strip().splitlines()
            out.append(marker(f"command: {cut_line(first, COMMAND_CHARS)}{' ...' if rest else ''}"))
        return out

    def render(self) -> str:
        return "".join(self.header()) + "".join(f"L{n}: {text}\n" for n, text in self.key_lines)


def _status(exit_code: int | None, exception: str | None) -> str:
    if exception:
        return "exception"
    if exit_code is None:
        return "unknown"
    return "ok" if exit_code == 0 else "failed"


def _key_indexes(bodies: list[str], max_key_lines: int) -> list[int]:
    protected = [k for k, b in enumerate(bodies) if is_protected(b)]
    last = next((k for k in range(len(bodies) - 1, -1, -1) if bodies[k].strip()), None)
    room = max(0, max_key_lines - (0 if last is None or last in protected else 1))
    picked = list(islice(alternate(protected), room))
    if last is not None and last not in picked and len(picked) < max_key_lines:
        picked.append(last)
    return sorted(picked)


def _digest(inp: Compacted, *, command: str | None, exit_code: int | None, exception: str | None,
            max_key_lines: int, max_line_chars: int) -> tuple[ToolDigest, list[int]]:
    lines = inp.lines
    bodies = [body_of(line) for line in lines]
    keys = _key_indexes(bodies, max(1, max_key_lines))
    key_lines = []
    for k in keys:
        origin = inp.origins[k]
        key_lines.append((origin[0] if origin else k + 1, cut_line(bodies[k], max_line_chars)))
    digest = ToolDigest(command=command, status=_status(exit_code, exception), exit_code=exit_code,
                        exception=exception, bytes=inp.source_bytes, lines=inp.source_lines,
                        key_lines=tuple(key_lines), handle=inp.source)
    return digest, keys


def tool_digest(value: str | Compacted, *, command: str | None = None, exit_code: int | None = None,
                exception: str | None = None, max_key_lines: int = 6, max_line_chars: int = 200) -> ToolDigest:
    """The digest of a tool result (module docstring). ``value`` is the raw payload (or an
    earlier technique's output: key lines then come from that text, sizes and handle from
    the raw payload). At most ``max_key_lines`` key lines. Pure; raises nothing."""
    return _digest(coerce(value), command=command, exit_code=exit_code, exception=exception,
                   max_key_lines=max_key_lines, max_line_chars=max_line_chars)[0]


def digest_tool_result(value: str | Compacted, *, command: str | None = None, exit_code: int | None = None,
                       exception: str | None = None, max_key_lines: int = 6,
                       max_line_chars: int = 200) -> Compacted:
    """:func:`tool_digest` rendered as the item's text, with its transform in the lineage
    (the digest's fields in ``params``: ``command``, ``status``, ``exit_code``; origins of
    the key lines are their raw lines, the other lines are ctxd's). The digest replaces
    the text even when it is longer: whether a digest is worth it is the caller's choice."""
    inp = coerce(value)
    digest, keys = _digest(inp, command=command, exit_code=exit_code, exception=exception,
                           max_key_lines=max_key_lines, max_line_chars=max_line_chars)
    head = digest.header()
    out = head + [f"L{n}: {text}\n" for n, text in digest.key_lines]
    origins: list[Span | None] = [None] * len(head)
    origins += [inp.origins[k] for k in keys]
    params: Mapping[str, Any] = {"command": command, "status": digest.status, "exit_code": exit_code,
                                 "exception": exception, "max_key_lines": max_key_lines, "max_line_chars": max_line_chars}
    return finish(inp, out, origins, kind=KIND, params=params,
                  stats={"key_lines": len(keys), "protected": sum(1 for line in inp.lines if is_protected(body_of(line)))})
