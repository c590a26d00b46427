"""Interactive sessions in the evaluation (``ctxd eval --interactive``): sessions in which a
person speaks during the work, in the neutral OpenAI chat-style format of the shared
``interactive/`` traces (one JSON file each):

``{"source": {...}, "tool": "...", "messages": [OpenAI chat messages; a user message the
agent injected carries "name"], "tools": [OpenAI function declarations], "instructions":
[{"message_index": N, "text": "a standing instruction, verbatim from that user message"}]}``

Each session is replayed as an SDK loop drives ctxd: before every assistant message (a
model call) the history so far is posted as provider messages (``POST /messages``: the
service function :func:`app.services.messages.ingest_messages`, positions appended), then the
request is assembled (``GET /request``'s :func:`app.services.requests.assemble_request`).
Per call: tokens, predicted cached tokens, whether a pass ran, and what the user said that the
request still holds verbatim: every marked instruction of an earlier message, and every
earlier typed user message of at most :data:`ctxd_tools.eval.measures.SHORT_USER_CHARS` characters.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ctxd_tools.eval import measures

__all__ = ["InteractiveCall", "InteractiveSession", "discover_sessions", "interactive_dir", "load_session",
           "replay_session", "run_interactive", "summarize_calls"]

GOAL = "Work with the user on their repository in this session, following what they say."


@dataclass(frozen=True)
class InteractiveSession:
    name: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    instructions: tuple[tuple[int, str], ...]  # (message index, text)

    @property
    def calls(self) -> tuple[int, ...]:
        """The index of every assistant message (a model call precedes each)."""
        return tuple(i for i, m in enumerate(self.messages) if m.get("role") == "assistant")


def interactive_dir() -> Path:
    """The shared ``interactive/`` traces next to the shared mini-swe-agent traces."""
    from ctxd_tools.traces import traces_dir

    return traces_dir().parent / "interactive"


def load_session(path: str | Path) -> InteractiveSession:
    """Read and check one session file. Raises ValueError naming the file and the problem."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: invalid JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValueError(f"{p}: not an interactive session (an object with a 'messages' list)")  # noqa: TRY004
    messages = tuple(data["messages"])
    marks = []
    for n, mark in enumerate(data.get("instructions") or []):
        index, text = mark.get("message_index"), mark.get("text")
        if not isinstance(index, int) or not 0 <= index < len(messages) or not isinstance(text, str) \
                or text not in str(messages[index].get("content") or ""):
            raise ValueError(f"{p}: instructions[{n}] must name a message and quote its text verbatim")
        marks.append((index, text))
    return InteractiveSession(name=p.name, messages=messages, tools=tuple(data.get("tools") or []),
                              instructions=tuple(marks))


def discover_sessions(paths: Sequence[str | Path]) -> list[Path]:
    """Session files: each path a ``*.json`` file or a folder of them (``README`` and
    ``*.traj.json`` skipped); none: the shared interactive traces. Raises ValueError when
    none is found, FileNotFoundError for a missing path."""
    found: dict[str, Path] = {}
    for raw in paths or [interactive_dir()]:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"no such file or folder: {p}")
        for f in sorted(p.glob("*.json")) if p.is_dir() else [p]:
            if not f.name.endswith(".traj.json"):
                found[str(f.resolve())] = f
    if not found:
        raise ValueError(f"no interactive session files in {', '.join(map(str, paths))}")
    return sorted(found.values(), key=lambda f: f.name)


@dataclass
class InteractiveCall:
    """One model call of an interactive session under a policy."""

    call: int
    message_index: int
    input_tokens: int
    cached_tokens: int
    compaction_pass: bool
    pass_over_target: str | None
    held: bool
    instructions_total: int
    instructions_kept: int
    short_user_total: int
    short_user_kept: int
    missing: list[str]  # the instructions the request lost (empty when retained)


def _typed(m: dict[str, Any]) -> bool:
    return m.get("role") == "user" and not m.get("name")


def replay_session(session: InteractiveSession, ctx: Any, *, policy: str = "select",
                   on_call: Callable[[int], None] | None = None) -> list[InteractiveCall]:
    """Replay ``session`` through the service functions (module docstring) on ``ctx`` (an
    :class:`ctxd_tools.eval.policies.EvalContext`)."""
    from app.api.schemas import validated_messages
    from app.services import sessions as session_service
    from app.services.messages import ingest_messages
    from app.services.requests import assemble_request
    from app.wire.inbound import map_messages

    with ctx.unit_of_work() as db:
        sid = session_service.create_session(db, ctx.profiles, profile=ctx.profile,
                                             contract={"goal": GOAL, "constraints": []}, system="",
                                             tools=[dict(t) for t in session.tools], metadata={})
    posted = 0
    out: list[InteractiveCall] = []
    for k, index in enumerate(session.calls):
        if index > posted:
            batch = [dict(m) for m in session.messages[posted:index]]
            mapped = validated_messages(map_messages(batch, fmt="openai", start=posted), start=posted)
            with ctx.unit_of_work() as db:
                ingest_messages(db, sid, mapped, start=posted, profiles=ctx.profiles, meters=ctx.meters,
                                shell_states=ctx.shell_states, memo=ctx.memo)
            posted = index
        assembled = assemble_request(ctx.session_factory, ctx.profiles, ctx.meters, sid, fmt="openai",
                                     memo=ctx.memo, policy=policy)
        body = assembled.request
        text = measures.request_text(body["messages"], body.get("tools"))
        wanted = [t for i, t in session.instructions if i < index]
        shorts = [str(m["content"]) for m in session.messages[:index]
                  if _typed(m) and 0 < len(str(m.get("content") or "")) <= measures.SHORT_USER_CHARS]
        missing = [t for t in wanted if t not in text]
        manifest = assembled.manifest
        out.append(InteractiveCall(
            call=k, message_index=index, input_tokens=manifest.tokens.total,
            cached_tokens=manifest.cache.predicted_cached_tokens,
            compaction_pass=assembled.assembly.evicted_now > 0, pass_over_target=assembled.assembly.over_target,
            held=assembled.assembly.held is not None, instructions_total=len(wanted),
            instructions_kept=len(wanted) - len(missing), short_user_total=len(shorts),
            short_user_kept=measures.constraint_hits(text, shorts), missing=missing))
        if on_call is not None:
            on_call(1)
    return out


def summarize_calls(calls: Sequence[InteractiveCall]) -> dict[str, Any]:
    """Totals over ``calls``: tokens, reuse, passes per call, instruction and short-message retention."""
    inp = sum(c.input_tokens for c in calls)
    cached = sum(c.cached_tokens for c in calls)
    passes = sum(1 for c in calls if c.compaction_pass)
    return {
        "calls": len(calls), "input_tokens": inp, "cached_tokens": cached,
        "reuse_ratio": measures.reuse_ratio(cached, inp), "passes": passes,
        "passes_per_call": passes / len(calls) if calls else None,
        "passes_held": sum(1 for c in calls if c.held),
        "passes_above_t_lo": sum(1 for c in calls if c.compaction_pass and c.pass_over_target),
        "instruction_pairs": sum(c.instructions_total for c in calls),
        "instruction_retention": measures.retention_fraction(sum(c.instructions_kept for c in calls),
                                                            sum(c.instructions_total for c in calls)),
        "short_user_pairs": sum(c.short_user_total for c in calls),
        "short_user_retention": measures.retention_fraction(sum(c.short_user_kept for c in calls),
                                                           sum(c.short_user_total for c in calls)),
        "missing": sorted({t for c in calls for t in c.missing}),
    }


def run_interactive(paths: Sequence[str | Path], *, profile: str = "qwen3", policy: str = "select",
                    progress: bool = True) -> dict[str, Any]:
    """Replay every session in this process on a temporary database; returns
    ``{"profile", "policy", "sessions": {name: totals}, "total": totals, "calls": {name:
    [per call]}, "seconds"}``."""
    from ctxd_tools.eval.replay import _progress, make_context

    files = discover_sessions(paths)
    sessions = [load_session(f) for f in files]
    start = time.perf_counter()
    per: dict[str, list[InteractiveCall]] = {}
    with tempfile.TemporaryDirectory(prefix="ctxd-eval-interactive-") as db_dir, \
            _progress(progress, sum(len(s.calls) for s in sessions)) as advance:
        ctx = make_context(profile, db_dir)
        for s in sessions:
            per[s.name] = replay_session(s, ctx, policy=policy, on_call=advance)
    every = [c for calls in per.values() for c in calls]
    return {"profile": profile, "policy": policy, "total": summarize_calls(every),
            "sessions": {name: summarize_calls(calls) for name, calls in per.items()},
            "calls": {name: [asdict(c) for c in calls] for name, calls in per.items()},
            "seconds": time.perf_counter() - start}


def render_interactive(results: dict[str, Any]) -> str:
    """A markdown report of :func:`run_interactive`'s results."""
    def frac(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    lines = [f"# Interactive sessions ({results['policy']}, profile {results['profile']})", "",
             ("| session | calls | input tokens | reuse | passes per call | passes held | instruction retention "
              "(pairs) | short user messages kept (pairs) |"), "|---|---|---|---|---|---|---|---|"]
    for name, t in [*results["sessions"].items(), ("total", results["total"])]:
        lines.append(f"| {name} | {t['calls']:,} | {t['input_tokens']:,} | {100 * (t['reuse_ratio'] or 0):.1f}% | "
                     f"{frac(t['passes_per_call'])} | {t['passes_held']} | {frac(t['instruction_retention'])} "
                     f"({t['instruction_pairs']:,}) | {frac(t['short_user_retention'])} ({t['short_user_pairs']:,}) |")
    missing = results["total"]["missing"]
    lines += ["", "Instructions lost: " + ("none" if not missing else "; ".join(repr(m[:80]) for m in missing))]
    return "\n".join(lines) + "\n"
