"""In-process replay of recorded trajectories under context policies (``ctxd eval``).

For each (trace, policy) the replay walks :func:`ctxd_tools.miniswe.replay_plan`: it
posts the recorded events to the policy run and, wherever the real agent called its
model, takes the policy's request and measures it (:class:`CallRecord`). No HTTP: the
``window`` and ``select`` runs call the same service functions the API routes call, on a
temporary SQLite database, with one MeterRegistry per process.

What the evaluation knows independently of the policy (:class:`TraceFacts`) comes from
the trajectory with inferred bindings for every policy: the observations and the
artifact revisions they read, the writes, the text the agent had seen before each call,
and the agent's next message (for grounding).

Work is spread over a process pool (``workers``; spawn start method), one task per trace
(every policy, so the facts are computed once), longest traces first; a rich progress bar
counts model calls.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.adapters.bash_effects import command_of
from app.domain.invalidation import ArtifactLedger
from app.domain.manifest import InvalidationReport
from ctxd_tools import miniswe
from ctxd_tools.eval import measures
from ctxd_tools.eval.instructions import inject_instructions, injected_texts
from ctxd_tools.eval.policies import EvalContext, RequestView, get_policy
from ctxd_tools.traces import resolve_trace, traces_dir

__all__ = ["CallRecord", "EvalRun", "TraceFacts", "TraceResult", "discover_traces", "replay_trace",
           "replay_trace_policies", "run_eval"]


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class CallFacts:
    """Policy-independent facts at one model call."""

    index: int
    observations: tuple[measures.Observation, ...]  # every observation posted before the call
    revisions: dict[str, int]  # artifact -> revision at the call
    candidates: tuple[str, ...] | None  # grounding identifiers; None for a failed call
    #: standing instructions posted before the call: each must be verbatim in its request
    instructions: tuple[str, ...] = ()
    #: the user's messages of at most SHORT_USER_CHARS characters posted before the call
    short_user: tuple[str, ...] = ()


def _next_text(m: Any) -> str:
    """The real agent's next message and its commands: content + each call's command."""
    parts = [str(m.get("content") or "")]
    for tc in m.get("tool_calls") or ():
        parts.append(command_of(tc["function"]["arguments"]) or tc["function"]["arguments"])
    return "\n".join(parts)


class TraceFacts:
    """The evaluation's view of one trajectory (inferred bindings, whatever the policy).

    ``calls[k]`` holds the facts at model call k; ``constraints`` the contract's
    constraint texts; ``root`` the text every policy's root holds (system instructions
    and tool declarations), excluded from grounding."""

    def __init__(self, traj: miniswe.Trajectory) -> None:
        self.traj = traj
        body = miniswe.session_create_body(traj)
        self.constraints = [c["text"] for c in body["contract"]["constraints"]]
        self.root = body["system"] + "\n" + json.dumps(body["tools"], sort_keys=True)
        # the history as the agent sent it: the last call's transcript, one text per message
        n_calls = len(traj.assistant_indexes) + (1 if traj.has_failed_final_call else 0)
        full = miniswe.transcript_messages(traj, n_calls - 1) if n_calls else []
        texts = [measures.request_text([m]) for m in full]
        observations: list[measures.Observation] = []
        ledger = ArtifactLedger()  # the server's revisions: writes, and external changes revealed by content hashes
        revisions = ledger.revisions
        self.calls: list[CallFacts] = []
        injected = injected_texts(traj)
        instructions: list[str] = []
        short_user: list[str] = []
        for step in miniswe.replay_plan(traj, infer_bindings=True):
            if isinstance(step, miniswe.PostEvents):
                for e in step.events:
                    if e["kind"] == "message" and e["role"] == "user":
                        instructions += [e["content"]] if e["content"] in injected else []
                        short_user += [e["content"]] if len(e["content"]) <= measures.SHORT_USER_CHARS else []
                    if e["kind"] == "artifact_write":
                        ledger.write(e["artifact"], e.get("content_hash"))
                    elif e["kind"] == "tool_result":
                        reads = []
                        for r in ([e["binding"]] if e.get("binding") else []) + list(e.get("conditions", {}).get("reads", [])):
                            if r.get("kind") == "unknown":
                                continue  # the command's effect is unknown: it read nothing known
                            reads.append((r["artifact"], ledger.revision_of(
                                r["artifact"], revision=r.get("revision"), range=r.get("range"),
                                content_hash=r.get("content_hash"))))
                        observations.append(measures.Observation(e["call_id"], e["payload"], tuple(dict.fromkeys(reads))))
                continue
            candidates: tuple[str, ...] | None = None
            if step.message_index is not None:
                history = "\n".join(texts[: self._stop_position(step.index)])
                candidates = tuple(measures.grounding_candidates(_next_text(traj.messages[step.message_index]),
                                                                history, self.root))
            self.calls.append(CallFacts(step.index, tuple(observations), dict(revisions), candidates,
                                        tuple(instructions), tuple(short_user)))

    def _stop_position(self, k: int) -> int:
        """Number of transcript messages before call k (system and task included)."""
        stop = self.traj.assistant_indexes[k]
        return sum(1 for m in self.traj.messages[:stop] if m["role"] in ("system", "user", "assistant", "tool"))


# --------------------------------------------------------------------------- records


@dataclass
class CallRecord:
    """One model call under one policy. Tokens of the profile's tokenizer."""

    call: int
    failed_call: bool
    input_tokens: int
    cached_tokens: int
    uncached_tokens: int
    over_limit: bool
    by_role: dict[str, int]
    by_zone: dict[str, int]
    constraints_retained: int
    constraints_total: int
    pair_errors: int
    superseded: int
    stale: int
    grounding_candidates: int
    grounding_hits: int
    grounding_via_handle_hits: int
    provider_prompt_tokens: int | None = None
    error: str | None = None
    compaction_pass: bool = False  # the request ran a compaction pass (select) or an eviction (window)
    grounding_record_hits: int = 0  # candidates found in the trunk's progress record (select)
    #: the pass ended above T_lo: why (app.domain.compaction.watermarks.OVER_TARGET_REASONS; issue 10 item 3)
    pass_over_target: str | None = None
    stale_items: int = 0  # eq. 7 per manifest item (service policies; = stale for append, which has no manifest)
    tombstones: int = 0
    tombstone_tokens: int = 0
    replaced_tokens: int = 0
    noticed: int = 0
    notice_tokens: int = 0
    stale_tokens_kept: int = 0
    # issue 16 (select-scratchpad): what the request holds of plans, sub-agents and documents
    plans: int = 0  # plan versions in the leaf
    plan_tokens: int = 0  # their text tokens (counted under task_state)
    plan_in_record: bool = False  # a plan version folded into the trunk's progress record
    documents: int = 0  # current retrieved documents (next to the instruction)
    document_tokens: int = 0
    children: int = 0  # child sessions created so far
    conclusions: int = 0  # child conclusions in the leaf (one observation each)
    conclusion_tokens: int = 0
    # what the user said (--inject-instructions, interactive sessions): the standing
    # instructions and short user messages posted before the call, and how many are verbatim
    instructions_total: int = 0
    instructions_kept: int = 0
    #: results in the request marked possibly_stale (a later command ctxd does not know named
    #: what they read), and their tokens kept beside the notice
    possibly_stale: int = 0
    possibly_stale_tokens: int = 0
    short_user_total: int = 0
    short_user_kept: int = 0


@dataclass
class TraceResult:
    trace: str
    policy: str
    calls: list[CallRecord]
    provider: dict[str, Any]
    input_limit: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"trace": self.trace, "policy": self.policy, "calls": [asdict(c) for c in self.calls],
                "provider": self.provider, "input_limit": self.input_limit, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TraceResult:
        return cls(trace=data["trace"], policy=data["policy"], calls=[CallRecord(**c) for c in data["calls"]],
                   provider=data["provider"], input_limit=data["input_limit"], seconds=data["seconds"])


def measure_call(view: RequestView, facts: CallFacts, constraints: Sequence[str], call: miniswe.ModelCall) -> CallRecord:
    """Every per-call metric of one request (module :mod:`ctxd_tools.eval.measures`)."""
    usage = call.usage.prompt_tokens if call.usage is not None else None
    if view.error is not None:
        return CallRecord(call=call.index, failed_call=call.failed, input_tokens=0, cached_tokens=0, uncached_tokens=0,
                          over_limit=True, by_role={}, by_zone={}, constraints_retained=0,
                          constraints_total=len(constraints), pair_errors=0, superseded=0, stale=0,
                          grounding_candidates=0, grounding_hits=0, grounding_via_handle_hits=0,
                          provider_prompt_tokens=usage, error=view.error)
    text = measures.request_text(view.messages, view.tools)
    superseded, stale = measures.stale_pairs(facts.observations, facts.revisions, measures.tool_contents(view.messages), text)
    cands = facts.candidates or ()
    direct, via = measures.grounding_hits(cands, text)
    if via < len(cands):
        direct, via = measures.grounding_hits(cands, text, view.handle_texts(text))
    in_record = sum(1 for c in cands if view.trunk_text and measures.contains_identifier(view.trunk_text, c))
    inv = view.invalidation or InvalidationReport()
    per_item = stale if view.items is None else measures.stale_items(facts.observations, facts.revisions, view.items)
    marked = [i for i in (view.items or {}).values() if i.state == "possibly_stale"]
    return CallRecord(
        compaction_pass=view.compaction_pass, grounding_record_hits=in_record, pass_over_target=view.pass_over_target,
        stale_items=per_item, tombstones=inv.tombstones, tombstone_tokens=inv.tombstone_tokens,
        replaced_tokens=inv.replaced_tokens, noticed=inv.noticed, notice_tokens=inv.notice_tokens,
        stale_tokens_kept=inv.stale_tokens_kept, **view.scratchpad,
        possibly_stale=len(marked), possibly_stale_tokens=sum(i.tokens or 0 for i in marked),
        instructions_total=len(facts.instructions), instructions_kept=measures.constraint_hits(text, facts.instructions),
        short_user_total=len(facts.short_user), short_user_kept=measures.constraint_hits(text, facts.short_user),
        call=call.index, failed_call=call.failed, input_tokens=view.total, cached_tokens=view.cached,
        uncached_tokens=view.total - view.cached, over_limit=view.total > view.input_limit,
        by_role=view.by_role, by_zone=view.by_zone,
        constraints_retained=measures.constraint_hits(text, constraints), constraints_total=len(constraints),
        pair_errors=measures.pair_errors(view.messages), superseded=superseded, stale=stale,
        grounding_candidates=len(cands), grounding_hits=direct, grounding_via_handle_hits=via,
        provider_prompt_tokens=usage)


def replay_trace(path: str | Path, policy_name: str, ctx: EvalContext,
                 on_call: Callable[[int], None] | None = None, *,
                 traj: miniswe.Trajectory | None = None, facts: TraceFacts | None = None) -> TraceResult:
    """Replay one trajectory under one policy; returns a record per model call.
    ``traj`` and ``facts`` may be given when several policies replay the same file."""
    start = time.perf_counter()
    traj = traj or miniswe.load_trajectory(path)
    facts = facts or TraceFacts(traj)
    policy = get_policy(policy_name)
    run = policy.start(traj, ctx)
    records: list[CallRecord] = []
    input_limit = ctx.profiles.get(ctx.profile).budget.input_limit
    for step in miniswe.replay_plan(traj, infer_bindings=policy.infer_bindings):
        if isinstance(step, miniswe.PostEvents):
            run.post(step.events)
            continue
        view = run.request(step)
        records.append(measure_call(view, facts.calls[step.index], facts.constraints, step))
        if on_call is not None:
            on_call(1)
    totals = miniswe.provider_usage_totals(traj)
    provider = {"prompt_tokens": totals.prompt_tokens, "prompt_cache_hit_tokens": totals.prompt_cache_hit_tokens,
                "prompt_cache_miss_tokens": totals.prompt_cache_miss_tokens, "cost": totals.cost,
                "calls_with_usage": totals.calls_with_usage, "model": traj.model}
    return TraceResult(trace=Path(path).name, policy=policy_name, calls=records, provider=provider,
                       input_limit=input_limit, seconds=time.perf_counter() - start)


def replay_trace_policies(path: str | Path, policies: Sequence[str], ctx: EvalContext,
                          on_call: Callable[[int], None] | None = None, *,
                          inject: bool = False) -> list[TraceResult]:
    """Replay one trajectory under each policy (the facts are computed once); ``inject``:
    with standing instructions inserted (:func:`ctxd_tools.eval.instructions.inject_instructions`)."""
    traj = miniswe.load_trajectory(path)
    if inject:
        traj = inject_instructions(traj)
    facts = TraceFacts(traj)
    return [replay_trace(path, p, ctx, on_call, traj=traj, facts=facts) for p in policies]


# --------------------------------------------------------------------------- processes


def make_context(profile: str, db_dir: str | Path) -> EvalContext:
    """A context on a fresh SQLite database in ``db_dir`` with the shipped profiles (plus
    ``CTXD_PROFILES_PATH``) and an in-process segment cache."""
    from app.settings import Settings, offline_environment
    from app.store.db import make_engine, make_session_factory
    from app.store.migrate import upgrade_head
    from app.tokenizers.loading import MeterRegistry
    from app.tokenizers.profiles import ProfileRegistry, load_profiles
    from app.tokenizers.segments import LocalLRUCache

    offline_environment()
    settings = Settings(data_dir=Path(db_dir))
    url = f"sqlite:///{Path(db_dir) / f'eval-{os.getpid()}.sqlite3'}"
    upgrade_head(url)
    engine = make_engine(url)
    registry = ProfileRegistry(load_profiles(settings.profiles_path))
    registry.get(profile)
    meters = MeterRegistry(LocalLRUCache(settings.local_cache_bytes))
    return EvalContext(profiles=registry, meters=meters, session_factory=make_session_factory(engine), profile=profile)


_WORKER: dict[str, Any] = {}


def _init_worker(profile: str, db_dir: str, queue: Any) -> None:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    _WORKER["ctx"] = make_context(profile, db_dir)
    _WORKER["queue"] = queue
    ctx = _WORKER["ctx"]
    ctx.meters.get(ctx.profiles.get(profile))  # load the tokenizer before the first task


def _worker_task(path: str, policies: list[str], inject: bool = False) -> list[dict[str, Any]]:
    queue = _WORKER.get("queue")
    pending = [0]

    def on_call(n: int) -> None:
        pending[0] += n
        if queue is not None and pending[0] >= 8:
            queue.put(pending[0])
            pending[0] = 0

    results = replay_trace_policies(path, policies, _WORKER["ctx"], on_call, inject=inject)
    if queue is not None and pending[0]:
        queue.put(pending[0])
    return [r.to_json() for r in results]


def discover_traces(paths: Sequence[str | Path]) -> list[Path]:
    """Trajectory files: each path is looked up as ``ctxd replay`` and ``ctxd bench`` look up
    theirs (:func:`ctxd_tools.traces.resolve_trace`: a path, else a file name in the shared traces
    directory, the ``.traj.json`` suffix optional) and is a ``*.traj.json`` file or a folder
    searched for them (not recursively); no paths means the shared traces directory. Sorted
    by name; duplicates removed. Raises FileNotFoundError (TracesNotFound) for a name found
    nowhere and ValueError when no trajectory is found."""
    found: dict[str, Path] = {}
    for p in map(resolve_trace, paths or [traces_dir()]):
        for f in sorted(p.glob("*.traj.json")) if p.is_dir() else [p]:
            found[str(f.resolve())] = f
    if not found:
        raise ValueError(f"no *.traj.json trajectories in {', '.join(map(str, paths))}")
    return sorted(found.values(), key=lambda f: f.name)


def count_calls(path: Path) -> int:
    traj = miniswe.load_trajectory(path)
    return len(traj.assistant_indexes) + (1 if traj.has_failed_final_call else 0)


@dataclass
class EvalRun:
    """Everything one ``ctxd eval`` produced: per (trace, policy) results and timing."""

    profile: str
    policies: list[str]
    traces: list[str]
    results: list[TraceResult]
    seconds: float
    workers: int
    calls_per_policy: int = 0
    notes: list[str] = field(default_factory=list)
    over_invalidation: dict[str, Any] = field(default_factory=dict)  # ctxd_tools.eval.overinvalidation.measure

    def result(self, policy: str, trace: str) -> TraceResult:
        for r in self.results:
            if r.policy == policy and r.trace == trace:
                return r
        raise KeyError((policy, trace))


def run_eval(paths: Sequence[str | Path], *, policies: Sequence[str], profile: str = "qwen3", workers: int = 2,
             progress: bool = True, inject: bool = False) -> EvalRun:
    """Replay every trajectory under every policy; ``workers`` processes (1 = in this
    process); ``inject``: with standing instructions inserted into each
    (:mod:`ctxd_tools.eval.instructions`). Raises ValueError for an unknown policy or profile."""
    for p in policies:
        get_policy(p)
    files = discover_traces(paths)
    sizes = {f: count_calls(f) for f in files}
    tasks = sorted(files, key=lambda f: -sizes[f])  # longest first: balances the pool
    total_calls = sum(sizes.values()) * len(policies)
    start = time.perf_counter()
    results: list[TraceResult] = []
    with tempfile.TemporaryDirectory(prefix="ctxd-eval-") as db_dir, _progress(progress, total_calls) as advance:
        if workers <= 1:
            ctx = make_context(profile, db_dir)
            for f in tasks:
                results += replay_trace_policies(f, policies, ctx, advance, inject=inject)
        else:
            results = _run_pool(tasks, list(policies), profile, db_dir, workers, advance, inject)
    results.sort(key=lambda r: (policies.index(r.policy), r.trace))
    from ctxd_tools.eval.overinvalidation import measure

    return EvalRun(profile=profile, policies=list(policies), traces=[f.name for f in files], results=results,
                   seconds=time.perf_counter() - start, workers=max(1, workers),
                   calls_per_policy=sum(sizes.values()), over_invalidation=measure(files)["total"])


def _run_pool(tasks: list[Path], policies: list[str], profile: str, db_dir: str, workers: int,
              advance: Callable[[int], None], inject: bool = False) -> list[TraceResult]:
    import multiprocessing as mp
    import queue as queue_mod
    import threading
    from concurrent.futures import ProcessPoolExecutor

    context = mp.get_context("spawn")
    manager = context.Manager()
    q = manager.Queue()
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                advance(q.get(timeout=0.2))
            except queue_mod.Empty:
                continue
            except (EOFError, OSError):
                return

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                                 initargs=(profile, db_dir, q)) as pool:
            futures = [pool.submit(_worker_task, str(f), policies, inject) for f in tasks]
            results = [TraceResult.from_json(r) for fut in futures for r in fut.result()]
    finally:
        stop.set()
        thread.join(timeout=2)
        while True:
            try:
                advance(q.get_nowait())
            except (queue_mod.Empty, EOFError, OSError):
                break
        manager.shutdown()
    return results


class _progress:
    """A rich progress bar over model calls (or a no-op); ``advance(n)`` is thread-safe."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled
        self.total = total
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[int], None]:
        if not self.enabled:
            return lambda n: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(TextColumn("replaying model calls"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
        self._bar.start()
        self._task = self._bar.add_task("calls", total=self.total)
        return lambda n: self._bar.advance(self._task, n)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
