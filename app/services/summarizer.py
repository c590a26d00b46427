"""The optional model-written progress record (issue 10 item 6; seed 000 section 4.6.2).

When ``CTXD_SUMMARIZER_URL`` names an OpenAI-compatible chat-completions endpoint, ctxd
asks it for a candidate record (``response_format: json_schema``, strict, schema
:data:`app.domain.audit.CANDIDATE_SCHEMA`) and admits the candidate only when
:func:`app.domain.audit.audit_candidate` finds nothing. Any finding rejects it; the
findings are fed back at most ``CTXD_SUMMARIZER_RETRIES`` (N, default 2) times, then the
deterministic record is used. A transport error, an HTTP error status, a timeout or a body
that is not a chat completion also ends in the deterministic record: running out of
retries never makes an unverified summary safe to admit.

Function boundary for the compaction pass (the select engineer's code calls these):

* :func:`summarize_record` (config, deterministic record as a dict, events, contract,
  folded seqs) -> :class:`SummaryOutcome`: chunking, requests, audit, feedback, fallback;
  :meth:`SummaryOutcome.record_source` is what the planner takes.
* :func:`request_candidate`: one HTTP request -> the parsed JSON value (or
  :class:`SummarizerError`).
* :func:`app.domain.audit.audit_candidate`: pure; cheap enough to re-run inside a GET's
  pass on a candidate computed earlier (no HTTP).

Latency: the summarizer never runs inside a GET. :func:`summarize_pass_after_post` is the
background hook the POST /events route schedules (FastAPI BackgroundTasks, after the
response) when a summarizer is configured: when the next GET would run a compaction pass
(``app.services.requests.planned_pass``: the last GET's forecast says a pass is near, and
the plan of the events as they stand runs one), it asks for a candidate of exactly that
pass's record and audits it against that pass's inventory; the outcome goes to the app's
:class:`CandidateStore` with its basis (contract version, folded seqs, last seq) and
planner version. The GET that runs the pass uses the admitted candidate only when its own
fold matches exactly (:meth:`app.domain.compaction.written.RecordSource.matches`);
otherwise the deterministic record.

An agent GETs right after its POST, before a model call of seconds answers, so the GET that
runs a pass waits for this worker's job of exactly its fold while it is in flight
(:class:`SummaryJobs`, ``app.state.ctxd.summary_jobs``), at most ``CTXD_SUMMARIZER_WAIT_SECONDS``
(0: never), in its thread-pool thread with no transaction open; its manifest's
``compaction.record.source.wait`` says how long, or that the wait ran out. Other GETs never
wait. A job in another worker is not seen: that worker's GET uses the deterministic record.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_fixed

from app.caches import ENTRY_OVERHEAD, ByteLRU
from app.domain.audit import (
    CANDIDATE_SCHEMA,
    audit_candidate,
    chunk_messages,
    evidence_items,
    host_record,
    summarizer_chunks,
)
from app.domain.compaction.evidence import Finding
from app.domain.compaction.written import FINDINGS_SHOWN, RecordSource
from app.domain.types import Contract, Event
from app.observability import metrics

log = logging.getLogger("ctxd")

SCHEMA_NAME = "progress_record"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class SummarizerError(Exception):
    """The summarizer could not be asked or did not answer a chat completion (transport
    error, timeout, HTTP error status, a body that is not a completion). Internal to the
    background path: it ends in the deterministic record, never in an HTTP error."""


@dataclass(frozen=True)
class SummarizerConfig:
    """From settings (``CTXD_SUMMARIZER_*``); ``timeout_seconds`` per request, token
    figures estimated (:func:`app.domain.audit.estimate_tokens`)."""

    url: str
    model: str = "summarizer"
    api_key: str = ""
    timeout_seconds: float = 30.0
    retries: int = 2
    input_tokens: int = 32768
    max_chunks: int = 4
    output_tokens: int = 4096
    transport_attempts: int = 2  # per request: one more try after a connection error, a timeout or a 429/5xx

    @classmethod
    def from_settings(cls, settings: Any) -> SummarizerConfig | None:
        if not settings.summarizer_url:
            return None
        return cls(url=settings.summarizer_url, model=settings.summarizer_model, api_key=settings.summarizer_api_key,
                   timeout_seconds=settings.summarizer_timeout_seconds, retries=settings.summarizer_retries,
                   input_tokens=settings.summarizer_input_tokens, max_chunks=settings.summarizer_max_chunks,
                   output_tokens=settings.summarizer_output_tokens)


@dataclass(frozen=True)
class SummaryOutcome:
    """``record``: the admitted candidate (``source`` ``model``) or the deterministic
    record (``deterministic``); ``requests``: HTTP requests answered or attempted (transport
    retries not counted); ``rejections``: the findings of each rejected candidate, in
    order; ``error``: the transport or protocol error that ended the loop, if any;
    ``basis``: what the record was audited against."""

    record: dict[str, Any]
    source: Literal["model", "deterministic"]
    requests: int
    rejections: tuple[tuple[Finding, ...], ...] = ()
    error: str | None = None
    basis: tuple[int, tuple[int, ...], int] = (0, (), 0)
    planner_version: int = 0  # the planner that computed the pass asked for (0: not asked for a pass)

    @property
    def admitted(self) -> bool:
        return self.source == "model"

    def record_source(self) -> RecordSource:
        """The outcome as the planner takes it (:class:`app.domain.compaction.written.RecordSource`):
        the pass it was audited for, the admitted candidate or the rejection findings."""
        return RecordSource(source=self.source, folded_seqs=self.basis[1], contract_version=self.basis[0],
                            planner_version=self.planner_version,
                            candidate=self.record if self.source == "model" else None,
                            rejections=tuple(tuple(f"{f.kind} {f.field}: {f.detail}" for f in r[:FINDINGS_SHOWN])
                                             for r in self.rejections),
                            error=self.error)


def request_body(config: SummarizerConfig, messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """The chat-completions body: ``model``, ``messages`` (system + user, string content),
    ``response_format`` ``json_schema`` (name ``progress_record``, ``strict: true``),
    ``max_tokens``, ``temperature: 0``. Valid for OpenAI and the servers that follow its
    API (vLLM, SGLang, llama.cpp, LiteLLM)."""
    return {"model": config.model, "messages": [dict(m) for m in messages],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": CANDIDATE_SCHEMA}},
            "max_tokens": config.output_tokens, "temperature": 0}


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError) or (
        isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in RETRY_STATUSES)


def request_candidate(client: httpx.Client, config: SummarizerConfig,
                      messages: Sequence[Mapping[str, str]]) -> Any:
    """POST one chat completion and return its message content parsed as JSON (any JSON
    value; the audit judges it). Transport errors, timeouts and 429/5xx are tried
    ``transport_attempts`` times (tenacity, 0.2 s apart).

    Raises:
        SummarizerError: still failing after the attempts, another HTTP error status, or
            a body without ``choices[0].message.content`` (a refusal included).
        ValueError: the content is not JSON (json.JSONDecodeError).
    """
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}

    @retry(retry=retry_if_exception(_retryable), stop=stop_after_attempt(max(1, config.transport_attempts)),
           wait=wait_fixed(0.2), reraise=True)
    def post() -> httpx.Response:
        response = client.post(config.url, json=request_body(config, messages), headers=headers,
                               timeout=config.timeout_seconds)
        response.raise_for_status()
        return response

    try:
        response = post()
    except httpx.HTTPStatusError as exc:
        raise SummarizerError(f"summarizer answered HTTP {exc.response.status_code}") from None
    except httpx.TransportError as exc:
        raise SummarizerError(f"summarizer unreachable: {type(exc).__name__}: {exc}") from None
    try:
        message = response.json()["choices"][0]["message"]
        content = message["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise SummarizerError("summarizer's answer is not a chat completion") from None
    if not isinstance(content, str):
        raise SummarizerError(f"summarizer returned no content (refusal: {message.get('refusal')!r})")
    return json.loads(content)


def summarize_record(client: httpx.Client, config: SummarizerConfig, *, deterministic: Mapping[str, Any],
                     events: Sequence[Event], contract: Contract,
                     folded_seqs: Iterable[int] | None = None, budget_tokens: int | None = None) -> SummaryOutcome:
    """Ask for a candidate record and audit it (listing 2).

    The evidence of the folded events (:func:`app.domain.audit.evidence_items`) goes in
    bounded chunks (:func:`app.domain.audit.summarizer_chunks`, each request within
    ``config.input_tokens``), the first with ``deterministic`` as the record so far, each
    later one with the model's previous answer. The final answer is audited against
    ``events`` and ``contract``; with findings, the last chunk is sent again with them, at
    most ``config.retries`` times. ``budget_tokens``: the pass's record budget, told to the
    summarizer (the pass itself enforces it). A candidate that is not JSON or not of the schema is a
    rejected candidate like any other. Returns the admitted candidate or
    ``deterministic``; raises nothing (errors are logged and reported in the outcome)."""
    events = list(events)
    folded = tuple(sorted({e.seq for e in events} if folded_seqs is None else set(folded_seqs)))
    basis = (contract.contract_version, folded, max((e.seq for e in events), default=0))
    fallback = dict(deterministic)
    items = evidence_items(events, folded)
    try:
        chunks = summarizer_chunks(deterministic, items, max_input_tokens=config.input_tokens,
                                   max_chunks=config.max_chunks)
    except ValueError as exc:
        return SummaryOutcome(fallback, "deterministic", 0, error=str(exc), basis=basis)
    omitted = len(items) - sum(len(c) for c in chunks)
    record: Any = dict(deterministic)
    requests = 0
    rejections: list[tuple[Finding, ...]] = []
    try:
        for part, chunk in enumerate(chunks, start=1):
            findings: tuple[Finding, ...] = ()
            for _ in range(config.retries + 1):
                messages = chunk_messages(record, chunk, part=part, parts=len(chunks), omitted=omitted,
                                          findings=findings, budget_tokens=budget_tokens)
                requests += 1
                try:
                    answer = request_candidate(client, config, messages)
                except ValueError as exc:
                    findings = (Finding("schema", "record", f"the answer is not JSON: {exc}"),)
                else:
                    last = part == len(chunks)
                    findings = tuple(audit_candidate(answer, events=events, contract=contract, folded_seqs=folded)) \
                        if last else tuple(f for f in audit_candidate(answer, events=events, contract=contract,
                                                                      folded_seqs=folded) if f.kind == "schema")
                    if not findings:
                        record = answer
                        break
                metrics.AUDIT_REJECTIONS.labels(findings[0].kind).inc()
                rejections.append(findings)
            else:
                return SummaryOutcome(fallback, "deterministic", requests, tuple(rejections), basis=basis)
    except SummarizerError as exc:
        log.warning("summarizer: %s; the deterministic record is used", exc)
        return SummaryOutcome(fallback, "deterministic", requests, tuple(rejections), error=str(exc), basis=basis)
    return SummaryOutcome(record, "model", requests, tuple(rejections), basis=basis)


# --- the background hook -------------------------------------------------------------------

def outcome_size(session_id: str, outcome: SummaryOutcome) -> int:
    """Estimated bytes of a stored outcome: its record's JSON, its findings' texts, its
    error and folded seqs, plus ENTRY_OVERHEAD per finding and for the entry."""
    n = len(session_id) + len(json.dumps(outcome.record, ensure_ascii=False)) + len(outcome.error or "")
    n += sum(len(f.kind) + len(f.field) + len(f.detail) + ENTRY_OVERHEAD for r in outcome.rejections for f in r)
    return n + 8 * len(outcome.basis[1]) + ENTRY_OVERHEAD


class CandidateStore:
    """The latest :class:`SummaryOutcome` per session: least recently used dropped first, at
    most ``max_bytes`` by :func:`outcome_size` (``CTXD_SUMMARY_OUTCOME_BYTES``); thread safe."""

    def __init__(self, max_bytes: int = 16 * 1024 * 1024) -> None:
        self._items: ByteLRU[str, SummaryOutcome] = ByteLRU(max_bytes, outcome_size)

    def put(self, session_id: str, outcome: SummaryOutcome) -> None:
        self._items.put(session_id, outcome)

    def get(self, session_id: str, *, contract_version: int | None = None,
            folded_seqs: Iterable[int] | None = None) -> SummaryOutcome | None:
        """The stored outcome, if its basis matches the given contract version and folded
        seqs (each checked when given)."""
        outcome = self._items.get(session_id)
        if outcome is None:
            return None
        if contract_version is not None and outcome.basis[0] != contract_version:
            return None
        if folded_seqs is not None and outcome.basis[1] != tuple(sorted(set(folded_seqs))):
            return None
        return outcome

    def source(self, session_id: str) -> RecordSource | None:
        """The stored outcome for the session's next pass as the planner takes it (None
        without one, or for an outcome not computed for a planned pass)."""
        outcome = self.get(session_id)
        return outcome.record_source() if outcome is not None and outcome.planner_version > 0 else None


@dataclass(frozen=True)
class PlannedPass:
    """The pass the next GET of a session would run, planned after a POST: the events and
    contract it was planned from, the seqs it folds and the planner version
    (``app.services.requests.planned_pass``)."""

    events: Sequence[Event]
    contract: Contract
    folded_seqs: tuple[int, ...]
    planner_version: int
    budget_tokens: int | None = None  # the record budget of the pass (the profile's tokens)


#: What identifies a pass's fold across the POST hook and the GET: (contract version, folded seqs).
FoldKey = tuple[int, tuple[int, ...]]


@dataclass(frozen=True)
class Waited:
    """What a GET that runs a pass waited for a summarizer job of its fold
    (:meth:`SummaryJobs.wait`): ``seconds`` waited; ``ran_out``: the bound passed with the
    job still in flight."""

    seconds: float
    ran_out: bool


#: A job registered when its POST was answered but not started within this many seconds is
#: taken as lost (a background task that never ran: the client went away before the response).
UNSTARTED_SECONDS: float = 10.0


@dataclass
class _Job:
    fold: FoldKey | None = None  # None while the job still plans its pass
    registered: float = field(default_factory=time.monotonic)
    running: bool = False

    def live(self) -> bool:
        return self.running or time.monotonic() - self.registered < UNSTARTED_SECONDS


class SummaryJobs:
    """The summarizer jobs in flight in this worker, one per session (``app.state.ctxd.summary_jobs``;
    thread safe). A job is registered when the POST hook starts, learns its fold key once it
    has planned the pass, and is released when it ends (outcome stored, failure, or its
    requests' timeouts): :meth:`wait` always returns by then or at its bound. Another worker's
    jobs are not seen here: its GET uses the deterministic record of a pass."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Job] = {}
        self._changed = threading.Condition()

    def __len__(self) -> int:
        """Jobs in flight."""
        with self._changed:
            return len(self._jobs)

    def start(self, session_id: str) -> bool:
        """Register a job for the session (the POST route does, before its response, so the
        agent's next GET sees it); False when one is in flight (the caller skips)."""
        with self._changed:
            job = self._jobs.get(session_id)
            if job is not None and job.live():
                return False
            self._jobs[session_id] = _Job()
            return True

    def running(self, session_id: str) -> None:
        """The session's registered job has started."""
        with self._changed:
            job = self._jobs.setdefault(session_id, _Job())
            job.running = True

    def planned(self, session_id: str, fold: FoldKey) -> None:
        """The session's job now summarizes the pass of ``fold``."""
        with self._changed:
            job = self._jobs.get(session_id)
            if job is not None:
                job.fold = fold
                self._changed.notify_all()

    def finish(self, session_id: str) -> None:
        """The session's job ended (its outcome, if any, is stored): its waiters return."""
        with self._changed:
            self._jobs.pop(session_id, None)
            self._changed.notify_all()

    def in_flight(self, session_id: str, fold: FoldKey) -> bool:
        """Whether a job that may be for ``fold`` is in flight: one of that fold, or one
        still planning."""
        with self._changed:
            job = self._jobs.get(session_id)
            return job is not None and job.live() and job.fold in (None, fold)

    def wait(self, session_id: str, fold: FoldKey, timeout_seconds: float) -> Waited | None:
        """Block the calling thread (never the event loop: GET /request runs in the thread
        pool, holding no database transaction) until no job of ``fold`` is in flight for the
        session, at most ``timeout_seconds``. Returns None when none was in flight (no wait),
        else what was waited."""
        if timeout_seconds <= 0 or not self.in_flight(session_id, fold):
            return None
        began = time.monotonic()
        deadline = began + timeout_seconds
        with self._changed:
            while (job := self._jobs.get(session_id)) is not None and job.live() and job.fold in (None, fold):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return Waited(round(time.monotonic() - began, 3), ran_out=True)
                self._changed.wait(remaining)
        return Waited(round(time.monotonic() - began, 3), ran_out=False)


def summarize_pass_after_post(plan_pass: Callable[[], PlannedPass | None], client: httpx.Client,
                              config: SummarizerConfig, store: CandidateStore, session_id: str,
                              jobs: SummaryJobs, *, registered: bool = False) -> SummaryOutcome | None:
    """The POST hook (run after the response, never inside a GET; issue 10 item 6): when
    the next GET would run a compaction pass (``plan_pass``: its fold, or None), ask the
    summarizer for a candidate of exactly that record, starting from the host record of
    those folded seqs, audit it against that pass's inventory (listing 2: the whole log,
    the folded seqs' protected fields), and store the outcome with the pass's basis and
    planner version; the GET that runs the pass uses it when its fold matches exactly, and
    waits for this job while it is in flight (``jobs``, :meth:`SummaryJobs.wait`).
    One run per session at a time (a POST while one runs is skipped; ``registered``: the
    caller registered this job already, :meth:`SummaryJobs.start`). Returns the outcome
    (None when no pass is due, skipped, or the session is gone); never raises."""
    if not registered and not jobs.start(session_id):
        return None
    jobs.running(session_id)
    try:
        planned = plan_pass()
        if planned is None:
            return None
        jobs.planned(session_id, (planned.contract.contract_version, tuple(planned.folded_seqs)))
        deterministic = host_record(planned.events, planned.contract, folded_seqs=planned.folded_seqs)
        outcome = summarize_record(client, config, deterministic=deterministic, events=planned.events,
                                   contract=planned.contract, folded_seqs=planned.folded_seqs,
                                   budget_tokens=planned.budget_tokens)
        outcome = replace(outcome, planner_version=planned.planner_version)
        store.put(session_id, outcome)
        return outcome
    except Exception:  # an optional refinement: never fails anything
        log.exception("summarizing the next pass of session %s failed; the deterministic record is used", session_id)
        return None
    finally:
        jobs.finish(session_id)
