"""Importer for mini-swe-agent trajectories (format ``mini-swe-agent-1.x``).

Turns one recorded trajectory into what ctxd needs to replay it: the body of
``POST /v1/sessions``, the events to ``POST /v1/sessions/{id}/events``, and a
replay plan saying where the real agent called its model. Nothing of the task is
lost: the first user message is split into goal, constraints and remaining
instructions, and :func:`reconstruct_first_user_message` puts it back together
byte for byte.

Pure functions over JSON values; standard library only, plus tree-sitter-bash
through :mod:`app.adapters.bash_effects` when bindings are inferred.

Splitting the first user message (mini-swe-agent's ``instance_template``)
-----------------------------------------------------------------------
* ``goal``: the PR description: the text after the line
  ``Consider the following PR description:`` inside ``<pr_description>``, up to
  the last ``</pr_description>``, with surrounding whitespace trimmed.
* ``boundary-1``, ``boundary-2``, ...: one constraint per bullet under the
  heading line ``## Important Boundaries`` (until the next ``## `` heading or
  ``</instructions>``). A bullet is a line starting with ``- ``; indented
  non-blank lines that follow it belong to it. The constraint text is the bullet
  **without** its ``- `` marker (trailing whitespace trimmed): the marker is list
  syntax, not part of the rule, and ctxd renders constraints in its own list.
  The whole bullet line (marker, text, newline) is removed from the
  instructions; the cut records the marker and the newline so nothing is lost.
* ``submission``: the body of the ``## Submission`` section: everything after
  its heading line up to the end of the instructions (``</instructions>``, or the
  next ``## `` heading if one follows), whitespace trimmed. The heading line
  stays in the remaining instructions.
* ``system`` = system message + ``"\\n\\n"`` + the first user message with the
  parts above cut out (everything else verbatim: the ``<pr_description>``
  framing, headings, the other sections).

Every constraint text and the goal are verbatim substrings of the first user
message.

Inferred bindings (``infer_bindings=True``)
------------------------------------------
Each ``bash`` call's command is interpreted by :mod:`app.adapters.bash_effects`
(rules there), in session order, so a script written by ``cat > x.py <<EOF`` in
one call is known when ``python x.py`` runs in a later one.

* Every write becomes ``{"event_id": "m{i:04d}-w{j}", "kind": "artifact_write",
  "artifact": path}``, ``i`` the index of the assistant message, ``j`` counting
  that message's writes from 0. A call's writes are placed right before its
  ``tool_result`` (so after the assistant message and after the results of
  earlier calls of the same message); a call without a recorded result (the
  final submit) has its writes right after the assistant message. Tree writes
  (``git stash``, a patch of unknown text...) are expanded to the artifacts the
  session has read or written so far under that directory. Writes are emitted
  whether or not the command succeeded: a failing ``sed -i`` or a timed-out
  script may still have written (seed 000 section 4.7.2).
* The ``tool_result`` of a call that read files gets ``"binding": {"artifact",
  "kind": "file", "range": "a:b" | None}`` for its first read; further reads go
  to ``conditions["reads"] = [{"artifact", "range"}, ...]`` (the API takes one
  binding per result). A binding (or read) carries ``"revision"`` only when the read ran
  before a write of the same artifact by the same call (``cat f && sed -i .. f``):
  then the revision the read saw is given explicitly (artifact revisions count
  the session's writes from 0, as the server does); otherwise the server binds
  to the current revision, which is the one the read saw.
* Unparsed commands write nothing and get ``"binding": {"artifact": "*", "kind":
  "unknown"}``: their effect is unknown, and the binding says so (it supports nothing
  and no write marks it).
* Content hashes (issue 11, SHA-256 hex of the UTF-8 text:
  :func:`app.domain.invalidation.content_hash`), only where the content is known exactly
  and the command exited 0 without an exception: a write whose whole text the command
  states (``cat > f <<'EOF'``, ``echo``/``printf > f``, ``cp`` of such a file) carries
  ``"content_hash"``; the binding of a command that prints one file whole and alone
  (``cat f``, ``cd d && cat f``) carries the hash of its output. Ranges, filtered or
  numbered reads, and writes of unknown text (``sed -i``, scripts, ``git checkout``)
  carry none. The server compares a whole read's hash with the one known for the current
  revision: a difference is a change no write logged (an external change, a new
  revision); after a write of unknown text the read's hash simply becomes the known one.
  The adapter numbers revisions as the server will (:class:`ArtifactLedger`).

The default (``infer_bindings=False``) keeps the events exactly as recorded.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

from app.adapters.bash_effects import CallEffects, SessionEffects, command_of
from app.adapters.shell_tools import call_bindings, hash_effects
from app.domain.invalidation import ArtifactLedger

__all__ = [
    "BASH_TOOL",
    "Cut",
    "ModelCall",
    "PostEvents",
    "ProviderUsage",
    "Step",
    "TaskSplit",
    "Trajectory",
    "TrajectoryFormatError",
    "UsageTotals",
    "load_trajectory",
    "parse_trajectory",
    "provider_usage_totals",
    "reconstruct_first_user_message",
    "replay_plan",
    "session_create_body",
    "split_task",
    "tool_declarations",
    "trajectory_events",
    "transcript_messages",
]

SOURCE: Final = "mini-swe-agent"
SUPPORTED_FORMAT_PREFIX: Final = "mini-swe-agent-1."
DEFAULT_PROFILE: Final = "qwen3"

GOAL_MARKER: Final = "Consider the following PR description:"
BOUNDARIES_HEADING: Final = "## Important Boundaries"
SUBMISSION_HEADING: Final = "## Submission"
BULLET_MARKER: Final = "- "

#: The one tool mini-swe-agent declares in tool-calling mode (its ``BASH_TOOL``),
#: so the replayed session and the append-only baseline count the same schema.
BASH_TOOL: Final[Mapping[str, Any]] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The bash command to execute",
                }
            },
            "required": ["command"],
        },
    },
}

_ROLES: Final = frozenset({"system", "user", "assistant", "tool", "exit"})
_HEADING_RE: Final = re.compile(r"^## ", re.MULTILINE)


# --------------------------------------------------------------------------- errors


class TrajectoryFormatError(ValueError):
    """The file is not a usable mini-swe-agent trajectory.

    ``path`` names the file (or ``"<memory>"``), ``problem`` says what is wrong,
    ``where`` (optional) points into the JSON, e.g. ``"messages[12]"``.
    """

    def __init__(self, path: str, problem: str, *, where: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"{path}: not a mini-swe-agent trajectory{at}: {problem}")


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Trajectory:
    """A validated trajectory. ``messages`` are the recorded dicts, unchanged."""

    path: str
    instance_id: str
    trajectory_format: str
    model: str | None
    exit_status: str
    messages: tuple[Mapping[str, Any], ...]
    info: Mapping[str, Any]

    @property
    def system_message(self) -> str:
        return str(self.messages[0]["content"])

    @property
    def first_user_message(self) -> str:
        return str(self.messages[1]["content"])

    @property
    def assistant_indexes(self) -> tuple[int, ...]:
        """Indexes into ``messages`` of the assistant messages, in order."""
        return tuple(i for i, m in enumerate(self.messages) if m["role"] == "assistant")

    @property
    def has_failed_final_call(self) -> bool:
        """True when the agent called its model once more after the last recorded
        message and that call failed (no assistant message was recorded).

        Rule: exit status is not ``Submitted`` and the last non-``exit`` message is
        a tool (or user) message, i.e. the agent was waiting for a model answer.
        On the 32 shared traces this matches ``info.model_stats.api_calls``.
        """
        if self.exit_status == "Submitted":
            return False
        last = _last_non_exit(self.messages)
        return last is not None and last["role"] in ("tool", "user")


@dataclass(frozen=True)
class Cut:
    """One span removed from the first user message.

    The removed text was ``prefix + text_of(part) + suffix``; it sat at ``offset``
    in :attr:`TaskSplit.remaining` (offsets are in the remaining text, after the
    earlier cuts). ``part`` is ``"goal"`` or a constraint id.
    """

    part: str
    offset: int
    prefix: str = ""
    suffix: str = ""


@dataclass(frozen=True)
class TaskSplit:
    """The first user message split into contract + remaining instructions."""

    system_message: str
    goal: str
    constraints: tuple[tuple[str, str], ...]  # (id, text), in document order
    remaining: str
    cuts: tuple[Cut, ...]

    @property
    def system(self) -> str:
        """Session ``system``: system message + blank line + remaining instructions."""
        return self.system_message + "\n\n" + self.remaining

    def part_text(self, part: str) -> str:
        if part == "goal":
            return self.goal
        for cid, text in self.constraints:
            if cid == part:
                return text
        raise KeyError(part)


@dataclass(frozen=True)
class ProviderUsage:
    """What the provider reported for one model call (DeepSeek field names), tokens."""

    prompt_tokens: int
    prompt_cache_hit_tokens: int
    prompt_cache_miss_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "prompt_cache_hit_tokens": self.prompt_cache_hit_tokens,
            "prompt_cache_miss_tokens": self.prompt_cache_miss_tokens,
        }


@dataclass(frozen=True)
class PostEvents:
    """Replay step: POST these events (in order, one batch)."""

    events: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ModelCall:
    """Replay step: the agent called its model here (k-th call, 0-based).

    ``usage`` describes the request of that call (None when the provider gave no
    usage, e.g. the failed final call). ``message_index`` is the index in
    ``Trajectory.messages`` of the assistant message the call produced, None when
    the call failed.
    """

    index: int
    usage: ProviderUsage | None
    message_index: int | None

    @property
    def failed(self) -> bool:
        return self.message_index is None


Step = PostEvents | ModelCall


@dataclass(frozen=True)
class UsageTotals:
    """Sums over the recorded model calls (tokens; cost in USD as recorded).

    ``calls_with_usage`` counts assistant messages with ``extra.response.usage``;
    ``api_calls`` and ``instance_cost`` are copied from ``info.model_stats``
    (``api_calls`` includes a failed final call); ``cost`` sums ``extra.cost``.
    """

    calls_with_usage: int
    prompt_tokens: int
    prompt_cache_hit_tokens: int
    prompt_cache_miss_tokens: int
    completion_tokens: int
    cost: float
    api_calls: int | None
    instance_cost: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls_with_usage": self.calls_with_usage,
            "prompt_tokens": self.prompt_tokens,
            "prompt_cache_hit_tokens": self.prompt_cache_hit_tokens,
            "prompt_cache_miss_tokens": self.prompt_cache_miss_tokens,
            "completion_tokens": self.completion_tokens,
            "cost": self.cost,
            "api_calls": self.api_calls,
            "instance_cost": self.instance_cost,
        }


# --------------------------------------------------------------------------- loading


def load_trajectory(path: str | Path) -> Trajectory:
    """Read and validate ``path``.

    Raises ``TrajectoryFormatError`` for invalid JSON or a wrong shape; ``OSError``
    when the file cannot be read.
    """
    p = str(path)
    raw = Path(path).read_bytes()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrajectoryFormatError(p, f"invalid JSON ({exc})") from exc
    return parse_trajectory(data, source=p)


def parse_trajectory(data: Any, *, source: str = "<memory>") -> Trajectory:
    """Validate an already-decoded trajectory (see module docstring for the shape)."""

    def fail(problem: str, where: str | None = None) -> TrajectoryFormatError:
        return TrajectoryFormatError(source, problem, where=where)

    if not isinstance(data, dict):
        raise fail(f"top level must be a JSON object, got {type(data).__name__}")
    fmt = data.get("trajectory_format")
    if not isinstance(fmt, str):
        raise fail("missing 'trajectory_format'")
    if not fmt.startswith(SUPPORTED_FORMAT_PREFIX):
        raise fail(f"unsupported trajectory_format {fmt!r} (expected {SUPPORTED_FORMAT_PREFIX}x)")
    info = data.get("info")
    if not isinstance(info, dict):
        raise fail("missing 'info' object")
    exit_status = info.get("exit_status")
    if not isinstance(exit_status, str):
        raise fail("missing 'info.exit_status'")
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        raise fail("'messages' must be a list starting with a system and a user message")
    instance_id = data.get("instance_id")
    if not isinstance(instance_id, str) or not instance_id:
        instance_id = Path(source).name.split(".traj")[0] if source != "<memory>" else ""
        if not instance_id:
            raise fail("missing 'instance_id'")

    seen_calls: set[str] = set()
    answered: set[str] = set()
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise fail("message must be an object", where)
        role = m.get("role")
        if role not in _ROLES:
            raise fail(f"unknown role {role!r}", where)
        if i == 0 and role != "system":
            raise fail(f"first message must be 'system', got {role!r}", where)
        if i == 1 and role != "user":
            raise fail(f"second message must be 'user' (the task), got {role!r}", where)
        if role == "system" and i != 0:
            raise fail("a system message may only come first", where)
        if role == "exit" and i != len(messages) - 1:
            raise fail("an 'exit' message may only come last", where)
        if role in ("system", "user", "tool") and not isinstance(m.get("content"), str):
            raise fail(f"{role} message needs string 'content'", where)
        if role == "assistant":
            _check_assistant(m, where, seen_calls, fail)
        elif role == "tool":
            extra = m.get("extra")
            if not isinstance(extra, dict):
                raise fail("tool message needs an 'extra' object", where)
            if not isinstance(extra.get("raw_output"), str):
                raise fail("tool message needs string 'extra.raw_output'", where)
            rc = extra.get("returncode")
            if rc is not None and (not isinstance(rc, int) or isinstance(rc, bool)):
                raise fail("'extra.returncode' must be an integer or null", where)
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str):
                raise fail("tool message needs string 'tool_call_id'", where)
            if call_id not in seen_calls:
                raise fail(f"tool_call_id {call_id!r} names no earlier tool call", where)
            if call_id in answered:
                raise fail(f"tool_call_id {call_id!r} answered twice", where)
            answered.add(call_id)

    model_cfg = info.get("config", {}).get("model", {}) if isinstance(info.get("config"), dict) else {}
    model = model_cfg.get("model_name") if isinstance(model_cfg, dict) else None
    return Trajectory(
        path=source,
        instance_id=instance_id,
        trajectory_format=fmt,
        model=model if isinstance(model, str) else None,
        exit_status=exit_status,
        messages=tuple(messages),
        info=info,
    )


def _check_assistant(m: dict[str, Any], where: str, seen_calls: set[str], fail: Any) -> None:
    content = m.get("content")
    if content is not None and not isinstance(content, str):
        raise fail("assistant 'content' must be a string or null", where)
    tool_calls = m.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise fail("assistant 'tool_calls' must be a list", where)
    for j, tc in enumerate(tool_calls):
        w = f"{where}.tool_calls[{j}]"
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            raise fail("tool call needs a 'function' object", w)
        if not isinstance(tc.get("id"), str) or not tc["id"]:
            raise fail("tool call needs a string 'id'", w)
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise fail("tool call function needs string 'name' and 'arguments'", w)
        if tc["id"] in seen_calls:
            raise fail(f"duplicate tool call id {tc['id']!r}", w)
        seen_calls.add(tc["id"])
    usage = _usage_dict(m)
    if usage is not None:
        for key in ("prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens"):
            if not isinstance(usage.get(key, 0), int):
                raise fail(f"'extra.response.usage.{key}' must be an integer", where)


# --------------------------------------------------------------------------- contract


def split_task(traj: Trajectory) -> TaskSplit:
    """Split the first user message into goal, constraints and remaining text.

    Rules in the module docstring. Raises ``TrajectoryFormatError`` when the PR
    description cannot be found (there would be no goal).
    """
    text = traj.first_user_message
    spans: list[tuple[int, int, str, str, str]] = []  # start, end, part, prefix, suffix

    # goal
    open_tag = text.find("<pr_description>")
    marker = text.find(GOAL_MARKER, max(open_tag, 0)) if open_tag >= 0 else -1
    close_tag = text.rfind("</pr_description>")
    if open_tag < 0 or marker < 0 or close_tag < marker:
        raise TrajectoryFormatError(
            traj.path,
            f"first user message has no '<pr_description>' block with the line {GOAL_MARKER!r}",
            where="messages[1]",
        )
    g0, g1 = _trim(text, marker + len(GOAL_MARKER), close_tag)
    if g0 == g1:
        raise TrajectoryFormatError(traj.path, "the PR description is empty", where="messages[1]")
    spans.append((g0, g1, "goal", "", ""))
    after_goal = close_tag

    # bullets under "## Important Boundaries"
    section = _section(text, BOUNDARIES_HEADING, after_goal)
    if section is not None:
        for n, (start, end, body_start, body_end) in enumerate(_bullets(text, *section), 1):
            spans.append(
                (start, end, f"boundary-{n}", text[start:body_start], text[body_end:end])
            )

    # body of "## Submission"
    section = _section(text, SUBMISSION_HEADING, after_goal)
    if section is not None:
        s0, s1 = _trim(text, *section)
        if s0 < s1:
            spans.append((s0, s1, "submission", "", ""))

    spans.sort()
    for (a0, a1, ap, _, _), (b0, _, bp, _, _) in pairwise(spans):
        if b0 < a1:
            raise TrajectoryFormatError(
                traj.path, f"parts {ap!r} and {bp!r} of the task overlap", where="messages[1]"
            )

    remaining: list[str] = []
    cuts: list[Cut] = []
    constraints: list[tuple[str, str]] = []
    goal = ""
    pos = 0
    out_len = 0
    for start, end, part, prefix, suffix in spans:
        remaining.append(text[pos:start])
        out_len += start - pos
        cuts.append(Cut(part=part, offset=out_len, prefix=prefix, suffix=suffix))
        body = text[start + len(prefix) : end - len(suffix)]
        if part == "goal":
            goal = body
        else:
            constraints.append((part, body))
        pos = end
    remaining.append(text[pos:])
    return TaskSplit(
        system_message=traj.system_message,
        goal=goal,
        constraints=tuple(constraints),
        remaining="".join(remaining),
        cuts=tuple(cuts),
    )


def reconstruct_first_user_message(split: TaskSplit) -> str:
    """Inverse of :func:`split_task`: remaining text + cut parts -> original message."""
    out: list[str] = []
    pos = 0
    for cut in split.cuts:
        out.append(split.remaining[pos : cut.offset])
        out.append(cut.prefix + split.part_text(cut.part) + cut.suffix)
        pos = cut.offset
    out.append(split.remaining[pos:])
    return "".join(out)


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _line_end(text: str, pos: int) -> int:
    """Index just past the newline ending the line at ``pos`` (or len(text))."""
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


def _section(text: str, heading: str, after: int) -> tuple[int, int] | None:
    """Body span of the section whose heading line is exactly ``heading``: from
    the line after the heading to the next ``## `` heading, ``</instructions>``
    or the end of the text."""
    m = re.compile(r"^" + re.escape(heading) + r"[ \t]*\r?$", re.MULTILINE).search(text, after)
    if m is None:
        return None
    body_start = _line_end(text, m.start())
    end = len(text)
    nxt = _HEADING_RE.search(text, body_start)
    if nxt is not None:
        end = nxt.start()
    close = text.find("</instructions>", body_start)
    if 0 <= close < end:
        end = close
    return body_start, end


def _bullets(text: str, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """Bullets in ``text[start:end]``: (line start, span end incl. newline,
    text start after the marker, text end with trailing whitespace trimmed)."""
    found: list[tuple[int, int, int, int]] = []
    pos = start
    while pos < end:
        line_end = min(_line_end(text, pos), end)
        if text.startswith(BULLET_MARKER, pos):
            span_end = line_end
            # indented, non-blank continuation lines belong to the bullet
            while span_end < end and text[span_end] in " \t":
                nxt_end = min(_line_end(text, span_end), end)
                if not text[span_end:nxt_end].strip():
                    break
                span_end = nxt_end
            body_start = pos + len(BULLET_MARKER)
            _, body_end = _trim(text, body_start, span_end)
            if body_end > body_start:
                found.append((pos, span_end, body_start, body_end))
            line_end = span_end
        pos = line_end
    return found


# --------------------------------------------------------------------------- session + events


def tool_declarations() -> list[dict[str, Any]]:
    """The session's ``tools``: one OpenAI function tool ``bash(command: str)``."""
    return [copy.deepcopy(dict(BASH_TOOL))]


def session_create_body(traj: Trajectory, *, profile: str = DEFAULT_PROFILE,
                        infer_bindings: bool = False) -> dict[str, Any]:
    """Body of ``POST /v1/sessions`` for ``traj``. Its ``bash`` tool is a declared shell tool,
    so the server infers bindings from the posted commands (README "Inferred bindings");
    with ``infer_bindings`` (the events of :func:`replay_plan` ``(infer_bindings=True)``
    carry the adapter's own) ``metadata.shell_tools`` is ``[]``: the server infers nothing,
    and no write is counted twice."""
    split = split_task(traj)
    body: dict[str, Any] = {
        "profile": profile,
        "contract": {
            "goal": split.goal,
            "constraints": [{"id": cid, "text": text} for cid, text in split.constraints],
            "contract_version": 1,
        },
        "system": split.system,
        "tools": tool_declarations(),
        "metadata": {
            "source": SOURCE,
            "instance_id": traj.instance_id,
            "trajectory_format": traj.trajectory_format,
            "model": traj.model,
            "exit_status": traj.exit_status,
        },
    }
    if infer_bindings:
        body["metadata"]["shell_tools"] = []
    return body


def _reasoning(m: Mapping[str, Any]) -> str | None:
    r = m.get("reasoning_content")
    if not r:
        psf = m.get("provider_specific_fields")
        r = psf.get("reasoning_content") if isinstance(psf, dict) else None
    return r if isinstance(r, str) and r else None


def _message_event(i: int, m: Mapping[str, Any]) -> dict[str, Any] | None:
    role = m["role"]
    if role == "assistant":
        return {
            "event_id": f"m{i:04d}-assistant",
            "kind": "message",
            "role": "assistant",
            "content": m.get("content") or "",
            "reasoning": _reasoning(m),
            "tool_calls": [
                {
                    "call_id": tc["id"],
                    "name": tc["function"]["name"],
                    "arguments": tc["function"]["arguments"],
                }
                for tc in (m.get("tool_calls") or [])
            ],
        }
    if role == "tool":
        extra = m["extra"]
        exc = extra.get("exception_info")
        return {
            "event_id": f"m{i:04d}-tool",
            "kind": "tool_result",
            "call_id": m["tool_call_id"],
            "payload": extra["raw_output"],
            "exit_code": extra.get("returncode"),
            "conditions": {"exception_info": exc} if exc else {},
        }
    if role == "user" and i >= 2:
        return {
            "event_id": f"m{i:04d}-user",
            "kind": "message",
            "role": "user",
            "content": m["content"],
        }
    return None  # system, task message (part of the session), exit


def trajectory_events(traj: Trajectory, *, infer_bindings: bool = False) -> list[dict[str, Any]]:
    """All events of the trajectory in order (messages after the task message,
    without the final ``exit`` message). ``event_id`` = ``m{index:04d}-{role}``.

    With ``infer_bindings``, also the ``artifact_write`` events and the result
    bindings inferred from each bash command (module docstring)."""
    return [ev for _, ev in _indexed_events(traj, infer_bindings=infer_bindings)]


def coarse_writes(traj: Trajectory) -> set[str]:
    """Event ids of the inferred ``artifact_write`` events that come from a tree write
    (``git stash``, a patch of unknown text, ``rm -r``...) expanded to an artifact the
    command did not name: the coarse edges of invalidation (issue 11's over-invalidation
    measure)."""
    out: set[str] = set()
    _indexed_events(traj, infer_bindings=True, coarse=out)
    return out


def _indexed_events(traj: Trajectory, *, infer_bindings: bool,
                    coarse: set[str] | None = None) -> list[tuple[int, dict[str, Any]]]:
    """Events paired with the index of the message they belong to (for batching
    in :func:`replay_plan`), in posting order; message indexes never decrease.
    ``coarse`` collects the event ids of writes expanded from tree writes."""
    out: list[tuple[int, dict[str, Any]]] = []
    if not infer_bindings:
        for i, m in enumerate(traj.messages):
            ev = _message_event(i, m)
            if ev is not None:
                out.append((i, ev))
        return out

    session = SessionEffects()
    answered = {m["tool_call_id"] for m in traj.messages if m["role"] == "tool"}
    revisions: dict[str, int] = {}  # artifact -> the server's revision (writes, then external changes)
    ledger = ArtifactLedger()  # the server's revisions and known hashes, in posting order
    pending: dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]], CallEffects]] = {}
    for i, m in enumerate(traj.messages):
        ev = _message_event(i, m)
        if ev is None:
            continue
        if m["role"] == "assistant":
            out.append((i, ev))
            j = 0
            for tc in m.get("tool_calls") or []:
                if tc["function"]["name"] != BASH_TOOL["function"]["name"]:
                    continue
                call = session.run(command_of(tc["function"]["arguments"]))
                writes = [
                    {"event_id": f"m{i:04d}-w{j + n}", "kind": "artifact_write", "artifact": artifact}
                    for n, artifact in enumerate(call.written)
                ]
                j += len(writes)
                if coarse is not None:
                    named = {w.artifact for w in call.effects.writes if not w.tree}
                    coarse.update(w["event_id"] for w in writes if w["artifact"] not in named)
                # an unparsed call's effect is unknown: the binding says so (issue 11 item 2)
                binding, reads = call_bindings(call, revisions)
                for artifact in call.written:
                    revisions[artifact] = revisions.get(artifact, 0) + 1
                if tc["id"] in answered:
                    pending[tc["id"]] = (writes, binding, reads, call)
                else:
                    for w in writes:
                        ledger.write(w["artifact"])
                    out.extend((i, w) for w in writes)
        elif m["role"] == "tool":
            writes, binding, reads, done = pending.pop(m["tool_call_id"], ([], None, [], None))
            if done is not None:
                extra = m["extra"]
                hash_effects(done, writes, binding, exit_code=extra.get("returncode"),
                             failed=bool(extra.get("exception_info")), payload=ev["payload"])
            for w in writes:
                ledger.write(w["artifact"], w.get("content_hash"))
            if binding is not None and binding.get("kind") == "file":
                before = ledger.revisions.get(binding["artifact"], 0)
                after = ledger.revision_of(binding["artifact"], revision=binding.get("revision"),
                                           range=binding["range"], content_hash=binding.get("content_hash"))
                if after > before:  # an external change: the server bumps it, later explicit revisions count it
                    revisions[binding["artifact"]] = revisions.get(binding["artifact"], 0) + 1
            out.extend((i, w) for w in writes)
            if binding is not None:
                ev["binding"] = binding
            if reads:
                ev["conditions"] = {**ev["conditions"], "reads": reads}
            if done is not None and done.touched:
                ev["conditions"] = {**ev["conditions"], "touches": list(done.touched)}
            out.append((i, ev))
        else:
            out.append((i, ev))
    return out


# --------------------------------------------------------------------------- plan + usage


def _usage_dict(m: Mapping[str, Any]) -> Mapping[str, Any] | None:
    extra = m.get("extra")
    resp = extra.get("response") if isinstance(extra, dict) else None
    usage = resp.get("usage") if isinstance(resp, dict) else None
    return usage if isinstance(usage, dict) else None


def _provider_usage(m: Mapping[str, Any]) -> ProviderUsage | None:
    u = _usage_dict(m)
    if u is None or not isinstance(u.get("prompt_tokens"), int):
        return None
    prompt = int(u["prompt_tokens"])
    hit = u.get("prompt_cache_hit_tokens")
    if not isinstance(hit, int):  # OpenAI-style field as a fallback
        details = u.get("prompt_tokens_details")
        hit = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
        hit = hit if isinstance(hit, int) else 0
    miss = u.get("prompt_cache_miss_tokens")
    if not isinstance(miss, int):
        miss = prompt - hit
    return ProviderUsage(prompt_tokens=prompt, prompt_cache_hit_tokens=hit, prompt_cache_miss_tokens=miss)


def replay_plan(traj: Trajectory, *, infer_bindings: bool = False) -> tuple[Step, ...]:
    """Ordered replay steps: ``ModelCall`` right before each assistant message,
    ``PostEvents`` with everything recorded between two calls (the assistant
    message and its tool results, plus any user message; with
    ``infer_bindings`` also the inferred artifact writes, see
    :func:`trajectory_events`), and a final ``ModelCall(usage=None)`` when the
    trajectory ends with a failed call (see :attr:`Trajectory.has_failed_final_call`)."""
    steps: list[Step] = []
    batch: list[dict[str, Any]] = []
    events = _indexed_events(traj, infer_bindings=infer_bindings)
    pos = 0
    k = 0
    for i, m in enumerate(traj.messages):
        if m["role"] == "assistant":
            if batch:
                steps.append(PostEvents(events=tuple(batch)))
                batch = []
            steps.append(ModelCall(index=k, usage=_provider_usage(m), message_index=i))
            k += 1
        while pos < len(events) and events[pos][0] == i:
            batch.append(events[pos][1])
            pos += 1
    if batch:
        steps.append(PostEvents(events=tuple(batch)))
    if traj.has_failed_final_call:
        steps.append(ModelCall(index=k, usage=None, message_index=None))
    return tuple(steps)


def provider_usage_totals(traj: Trajectory) -> UsageTotals:
    """Sums of the provider's usage over all recorded calls (the real baseline:
    the whole transcript resent on every call, cache hits included)."""
    n = prompt = hit = miss = completion = 0
    cost = 0.0
    for m in traj.messages:
        if m["role"] != "assistant":
            continue
        pu = _provider_usage(m)
        if pu is not None:
            n += 1
            prompt += pu.prompt_tokens
            hit += pu.prompt_cache_hit_tokens
            miss += pu.prompt_cache_miss_tokens
        u = _usage_dict(m) or {}
        c = u.get("completion_tokens")
        completion += c if isinstance(c, int) else 0
        extra = m.get("extra")
        ec = extra.get("cost") if isinstance(extra, dict) else None
        cost += float(ec) if isinstance(ec, (int, float)) else 0.0
    stats = traj.info.get("model_stats")
    stats = stats if isinstance(stats, dict) else {}
    api_calls = stats.get("api_calls")
    inst_cost = stats.get("instance_cost")
    return UsageTotals(
        calls_with_usage=n,
        prompt_tokens=prompt,
        prompt_cache_hit_tokens=hit,
        prompt_cache_miss_tokens=miss,
        completion_tokens=completion,
        cost=cost,
        api_calls=api_calls if isinstance(api_calls, int) else None,
        instance_cost=float(inst_cost) if isinstance(inst_cost, (int, float)) else None,
    )


def transcript_messages(
    traj: Trajectory, k: int, *, include_reasoning: bool = True
) -> list[dict[str, Any]]:
    """The OpenAI-format messages the agent sent on model call ``k`` (0-based,
    as numbered by :func:`replay_plan`): system, task, then every assistant/tool
    (and user) message recorded before the k-th assistant message, with
    ``content`` exactly as recorded (observation wrapper and 10k-char cuts
    included). Append-only: call k's list is a prefix of call k+1's.

    mini-swe-agent sends each recorded message minus its ``extra``; here only the
    fields a provider reads are kept (role, content, tool_calls with id/type/
    function, tool_call_id) plus ``reasoning_content`` on assistant messages when
    ``include_reasoning`` (the DeepSeek reasoner traces show it was resent: the
    prompt grows by the completion tokens, reasoning included).

    Raises ``IndexError`` when there is no call ``k``.
    """
    idx = traj.assistant_indexes
    if 0 <= k < len(idx):
        stop = idx[k]
    elif k == len(idx) and traj.has_failed_final_call:
        last = _last_non_exit_index(traj.messages)
        stop = last + 1
    else:
        raise IndexError(f"{traj.path}: no model call {k}")
    out: list[dict[str, Any]] = []
    for m in traj.messages[:stop]:
        role = m["role"]
        if role in ("system", "user"):
            out.append({"role": role, "content": m["content"]})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
            if include_reasoning and m.get("reasoning_content") is not None:
                msg["reasoning_content"] = m["reasoning_content"]
            if m.get("tool_calls"):
                msg["tool_calls"] = [
                    {
                        "id": tc["id"],
                        "type": tc.get("type") or "function",
                        "function": {
                            "name": tc["function"]["name"],
                            "arguments": tc["function"]["arguments"],
                        },
                    }
                    for tc in m["tool_calls"]
                ]
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
    return out


def _last_non_exit_index(messages: Sequence[Mapping[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] != "exit":
            return i
    return -1


def _last_non_exit(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    i = _last_non_exit_index(messages)
    return messages[i] if i >= 0 else None
