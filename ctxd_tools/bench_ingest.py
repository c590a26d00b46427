"""``ctxd bench --ingest``: POST latency along a long synthetic session (issue 9, item 5).

What is timed
-------------
One synthetic agent session is posted batch by batch through the real service function
(``ingest_events``, events validated by the API schemas first) on a real SQLite database
in a temporary directory, migrated with alembic: a user message, then turns of one
assistant message with one to three tool calls followed, in the same batch, by the
results of those calls (sizes 200 B to 4 kB); every 10th turn also writes an artifact and
posts a step. One POST = schema validation + ``ingest_events`` + ``commit``, wall time
(``time.perf_counter``), one thread. The events are deterministic (``seed``). Forty
batches posted to another session first warm up the statement caches (untimed).

Figures: POST p50/p95 in windows of ``window`` consecutive POSTs, the first window
starting at event 10 and the last one ending at the session's last event; the target is
``p50(end) <= 1.5 x p50(event 10)`` (reported, never asserted). Timings at checkpoints
along the session (events 100, 1000, ...) are printed as well, so a cost that grows with
the session shows as a slope.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["TARGET_RATIO", "print_ingest", "run_ingest", "synthetic_batches"]

#: Required: POST p50 at the end of the session at most this multiple of p50 at event 10.
TARGET_RATIO = 1.5

SESSION_BODY: dict[str, Any] = {
    "profile": "qwen3",
    "contract": {"goal": "Fix the failing test in src/pkg/module.py", "contract_version": 1,
                 "constraints": [{"id": "c1", "text": "Do not change the public API."}]},
    "system": "You are a careful software engineer. Use the bash tool.",
    "tools": [{"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                                "parameters": {"type": "object",
                                                               "properties": {"command": {"type": "string"}},
                                                               "required": ["command"]}}}],
}


def synthetic_batches(n_events: int, *, seed: int = 0) -> Iterator[list[dict[str, Any]]]:
    """POST batches (event dicts as a client sends them) of one synthetic session, about
    ``n_events`` events in all (the last batch completes its turn, so up to 6 more).

    First batch: one user message. Then per turn: an assistant message with 1 to 3 tool
    calls (ids ``call_<turn>_<k>``) and their results (200 to 4,000 bytes each); every
    10th turn adds an artifact write and a step."""
    rng = random.Random(seed)
    words = ("def", "return", "self", "import", "class", "None", "value", "test_", "assert", "module", "error")
    yield [{"event_id": "u0", "kind": "message", "role": "user", "content": "Please fix the failing test."}]
    posted, turn = 1, 0
    while posted < n_events:
        turn += 1
        calls = [f"call_{turn}_{k}" for k in range(rng.choice((1, 1, 1, 2, 3)))]
        batch: list[dict[str, Any]] = [{
            "event_id": f"a{turn}", "kind": "message", "role": "assistant", "content": f"Step {turn}: looking.",
            "tool_calls": [{"call_id": c, "name": "bash", "arguments": f'{{"command": "sed -n {turn},+40p f{k}.py"}}'}
                           for k, c in enumerate(calls)]}]
        for k, c in enumerate(calls):
            size = rng.randint(200, 4000)
            text = " ".join(rng.choice(words) for _ in range(size // 5))
            batch.append({"event_id": f"r{turn}_{k}", "kind": "tool_result", "call_id": c,
                          "payload": f"{turn}:{k}\n{text}\n"[:size], "exit_code": 0})
        if turn % 10 == 0:
            batch.append({"event_id": f"w{turn}", "kind": "artifact_write", "artifact": f"src/f{turn % 7}.py"})
            batch.append({"event_id": f"s{turn}", "kind": "step", "text": f"Next: run the tests after turn {turn}."})
        posted += len(batch)
        yield batch


def _window_stats(samples: list[tuple[int, float]], *, first: int, count: int) -> dict[str, Any]:
    """p50/p95 (ms) of ``count`` POSTs starting at index ``first`` of ``samples``
    ((last seq after the POST, seconds))."""
    from ctxd_tools.bench import _stats_ms

    chosen = samples[first:first + count]
    stats = _stats_ms([s for _, s in chosen])
    return {"n": len(chosen), "from_event": chosen[0][0] if chosen else None,
            "to_event": chosen[-1][0] if chosen else None, **stats}


def run_ingest(*, n_events: int = 10_000, window: int = 25, seed: int = 0, progress: bool = True,
               h: Any = None) -> dict[str, Any]:
    """Post one synthetic session of ``n_events`` events; return POST latencies.

    Returns ``{"events", "posts", "window", "start": {n, from_event, to_event, p50_ms,
    p95_ms}, "end": {...}, "checkpoints": [{"event", ...}], "ratio_end_over_start",
    "target": {"required", "met"}, "series": [[last_seq, ms], ...]}``. Raises BenchError."""
    from ctxd_tools.bench import BenchError, _Bar, harness

    if n_events < 20 or window < 1:
        raise BenchError("--ingest-events must be at least 20 and the window at least 1")
    if h is None:
        with harness() as own:
            return run_ingest(n_events=n_events, window=window, seed=seed, progress=progress, h=own)

    from app.api.schemas import EventBatch
    from app.services import sessions as session_service

    # warm-up (untimed): a throwaway session, so that compiled statements and imports are
    # not charged to the first timed POSTs
    warm = h.create_session(SESSION_BODY)
    for _, batch in zip(range(40), synthetic_batches(n_events, seed=seed + 1)):
        h.post_events(warm, batch)
    sid = h.create_session(SESSION_BODY)
    samples: list[tuple[int, float]] = []  # (last seq after the POST, seconds)
    with _Bar(progress) as bar:
        advance = bar.task(f"ingest: {n_events:,} synthetic events", n_events)
        for batch in synthetic_batches(n_events, seed=seed):
            with h.factory() as db:
                t0 = time.perf_counter()
                parsed = EventBatch.model_validate({"events": batch})
                out = session_service.ingest_events(db, sid, [e.model_dump(mode="json") for e in parsed.events],
                                                    shell_states=h.shell_states)
                db.commit()
                seconds = time.perf_counter() - t0
            samples.append((int(out["last_seq"]), seconds))
            for _ in batch:
                advance()
    start_index = next(i for i, (seq, _) in enumerate(samples) if seq >= 10)
    start = _window_stats(samples, first=start_index, count=window)
    end = _window_stats(samples, first=max(0, len(samples) - window), count=window)
    checkpoints = []
    for event in (10, 100, 1_000, 2_500, 5_000, 7_500, 10_000, 20_000, 50_000):
        if event > samples[-1][0]:
            break
        index = next(i for i, (seq, _) in enumerate(samples) if seq >= event)
        checkpoints.append({"event": event, **_window_stats(samples, first=min(index, max(0, len(samples) - window)),
                                                            count=window)})
    ratio = end["p50_ms"] / start["p50_ms"] if start["p50_ms"] and end["p50_ms"] is not None else None
    return {
        "events": samples[-1][0], "posts": len(samples), "window": window, "seed": seed,
        "start": start, "end": end, "checkpoints": checkpoints, "ratio_end_over_start": ratio,
        "target": {"required_ratio_at_most": TARGET_RATIO, "met": None if ratio is None else ratio <= TARGET_RATIO},
        "total_seconds": sum(s for _, s in samples),
        "series": [[seq, s * 1e3] for seq, s in samples],
        "definitions": {"timed": "EventBatch validation + ingest_events + commit, in process, SQLite in a temp dir",
                        "window": f"{window} consecutive POSTs; start = the first POST ending at event >= 10, "
                                  "end = the last POSTs of the session"},
    }


def print_ingest(result: dict[str, Any], *, file: TextIO | None = None) -> None:
    """POST latency along the session and the target (rich)."""
    from rich import box
    from rich.table import Table

    from ctxd_tools.bench import _console, _ms, _x

    console = _console(file)
    t = Table(title=f"POST latency along a synthetic session ({result['events']:,} events, {result['posts']:,} POSTs)",
              box=box.SIMPLE_HEAD, caption=f"ms; each row: {result['window']} consecutive POSTs from that event on")
    for c in ("at event", "events", "p50 ms", "p95 ms"):
        t.add_column(c, justify="right")
    for row in result["checkpoints"]:
        t.add_row(f"{row['event']:,}", f"{row['from_event']:,}-{row['to_event']:,}", _ms(row["p50_ms"]),
                  _ms(row["p95_ms"]))
    end = result["end"]
    t.add_row("end", f"{end['from_event']:,}-{end['to_event']:,}", _ms(end["p50_ms"]), _ms(end["p95_ms"]))
    console.print(t)
    met = result["target"]["met"]
    console.print(f"target (reported, not asserted): POST p50 at the end <= {TARGET_RATIO}x p50 at event 10: "
                  f"{_ms(end['p50_ms'])} vs {_ms(result['start']['p50_ms'])} ms = {_x(result['ratio_end_over_start'])}"
                  f" -> {'met' if met else 'missed'}; all POSTs {result['total_seconds']:.1f} s", highlight=False)
