"""The context policies an evaluation compares, behind one interface.

A :class:`Policy` starts a :class:`PolicyRun` per trajectory; the replay posts the
recorded events to it in order and asks it for the request wherever the real agent called
its model. Every run counts with the same profile meter (tokenizer + chat template) and
predicts prefix reuse with the same cache model, so the numbers compare directly.

* ``append``: the whole transcript as the agent sent it
  (:func:`ctxd_tools.miniswe.transcript_messages`: the tool messages' recorded
  ``content``, observation wrapper and 10k-character cuts included, and the assistant
  reasoning the reasoner traces resent), rendered with the profile's chat template and
  tools and counted exactly on the profile's tokenizer and segment cache, prefix reuse by
  :func:`app.domain.prefix.predict_reuse` across consecutive calls. The reference of eq. 9.
* ``window``: the walking-skeleton policy, through the service functions the API uses
  (:func:`app.services.sessions.create_session`, ``ingest_events``,
  :func:`app.services.requests.assemble_request`) with the events exactly as recorded.
* ``select``: ctxd's default pipeline (``GET /request``'s default) through the same service
  path, fed the events with inferred read bindings and artifact writes
  (``trajectory_events(infer_bindings=True)``): compaction passes at the profile's
  watermarks fold older turn groups into the trunk's progress record (issue 10).
* ``select-tombstone`` / ``select-notice``: ``select`` with one representation rule for
  every superseded observation (session ``metadata.invalidation``), to measure the token
  and cache effect of tombstones against appended notices.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from app.domain.compaction.record import call_text, render_record
from app.domain.layout import Conversation, LeafMessage, LeafToolCall, canonical_tools
from app.domain.manifest import InvalidationReport, Item
from app.domain.prefix import CacheModel, PrefixState, predict_reuse
from ctxd_tools import miniswe

if TYPE_CHECKING:
    from app.tokenizers.hf import HFChatMeter

__all__ = ["POLICIES", "AppendPolicy", "EvalContext", "Policy", "PolicyRun", "RequestView", "ServicePolicy",
           "get_policy"]


def _new_memo() -> Any:
    from app.services.memo import AssemblyMemo

    return AssemblyMemo()


def _new_shell_states() -> Any:
    from ctxd_tools.bench import server_shell_states

    return server_shell_states()


@dataclass
class EvalContext:
    """What every policy run shares inside one process: the profile registry, one
    MeterRegistry (tokenizers and the segment cache), and a SQLAlchemy session factory
    on the evaluation's database."""

    profiles: Any  # app.tokenizers.profiles.ProfileRegistry
    meters: Any  # app.tokenizers.loading.MeterRegistry
    session_factory: Any  # sqlalchemy.orm.sessionmaker
    profile: str
    memo: Any = field(default_factory=_new_memo)  # AssemblyMemo: one per process, as on a server
    shell_states: Any = field(default_factory=_new_shell_states)  # ShellStates: kept between POSTs, as on a server

    def unit_of_work(self) -> Any:
        """One transaction, committed on success (the API's unit of work)."""
        from app.store.db import unit_of_work

        return unit_of_work(self.session_factory)


@dataclass(frozen=True)
class RequestView:
    """What the evaluation sees of one request (tokens of the profile's tokenizer).

    ``messages`` and ``tools`` are the OpenAI chat-completions body; ``total``,
    ``by_zone`` (root, trunk, leaf) and ``by_role`` (system, tools, task_state,
    observations) are exact counts of the rendered request; ``cached`` is the cache
    model's predicted cached tokens; ``handle_texts`` resolves the handles a text names
    into their payloads (the checked read, ``GET /v1/handles``); ``error`` is set when the
    policy could not build a request (e.g. the pinned content alone over ``input_limit``).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    total: int
    by_zone: dict[str, int]
    by_role: dict[str, int]
    cached: int
    input_limit: int
    handle_texts: Callable[[str], list[str]] = field(default=lambda text: [], repr=False)
    error: str | None = None
    compaction_pass: bool = False  # this request ran a compaction pass (select) or an eviction (window)
    #: a pass of select ended above T_lo: why (watermarks.OVER_TARGET_REASONS), else None (issue 10 item 3)
    pass_over_target: str | None = None
    trunk_text: str = ""  # the trunk (contract + progress record) when a record is in it
    items: dict[str, Item] | None = None  # call_id -> manifest item of its result (service policies)
    invalidation: InvalidationReport | None = None  # the manifest's invalidation summary (service policies)
    scratchpad: dict[str, Any] = field(default_factory=dict)  # CallRecord's issue-16 fields (select-scratchpad)


class PolicyRun(Protocol):
    def post(self, events: Sequence[dict[str, Any]]) -> None:
        """Ingest one batch of recorded events."""

    def request(self, call: miniswe.ModelCall) -> RequestView:
        """The request this policy sends at model call ``call``."""


class Policy(Protocol):
    @property
    def name(self) -> str:
        """The policy's name in reports."""

    @property
    def infer_bindings(self) -> bool:
        """Which events the replay posts to it (with inferred read bindings or as recorded)."""

    def start(self, traj: miniswe.Trajectory, ctx: EvalContext) -> PolicyRun:
        """A run over one trajectory."""


# --------------------------------------------------------------------------- append


def transcript_conversation(messages: Sequence[dict[str, Any]]) -> Conversation:
    """An OpenAI-format transcript (system, task, then the agent's turns) as a
    :class:`Conversation`: root = system message + the bash tool, trunk = the task
    message, leaf = the rest with contents exactly as recorded."""
    leaf: list[LeafMessage] = []
    names: dict[str, str] = {}
    for m in messages[2:]:
        role = m["role"]
        if role == "assistant":
            calls = tuple(LeafToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                          for c in m.get("tool_calls") or ())
            names.update((c.call_id, c.name) for c in calls)
            leaf.append(LeafMessage(role="assistant", content=m.get("content") or "", tool_calls=calls,
                                    reasoning=m.get("reasoning_content")))
        elif role == "tool":
            call_id = m["tool_call_id"]
            leaf.append(LeafMessage(role="tool", content=m["content"], call_id=call_id, name=names.get(call_id, "bash")))
        else:
            leaf.append(LeafMessage(role=role, content=m["content"]))
    return Conversation(system=messages[0]["content"], tools=canonical_tools(miniswe.tool_declarations()),
                        trunk=messages[1]["content"], leaf=tuple(leaf))


# meter -> its sibling rendering reasoning (as_sent_meter); weak: it goes with its meter
_AS_SENT: WeakKeyDictionary[HFChatMeter, HFChatMeter] = WeakKeyDictionary()


def as_sent_meter(meter: Any) -> Any:
    """The profile's meter, rendering assistant reasoning the way the agent sent it: the
    DeepSeek reasoner traces resent ``reasoning_content``, which the Qwen3 template
    renders. For a Hugging Face meter that does not render reasoning, a sibling meter on
    the same tokenizer and segment cache that does; any other meter as it is."""
    from app.tokenizers.hf import HFChatMeter

    if isinstance(meter, HFChatMeter) and not meter.render_reasoning:
        sibling = _AS_SENT.get(meter)
        if sibling is None:
            sibling = HFChatMeter(meter.tokenizer, encoder=meter.encoder, render_reasoning=True,
                                  render_cache=meter.render_cache, template_kwargs=meter.template_kwargs)
            _AS_SENT[meter] = sibling  # one per process, like the meter itself
        return sibling
    return meter


class _AppendRun:
    def __init__(self, traj: miniswe.Trajectory, ctx: EvalContext) -> None:
        from app.services.requests import cache_model_for

        self.traj = traj
        self.profile = ctx.profiles.get(ctx.profile)
        self.meter = as_sent_meter(ctx.meters.get(self.profile))
        self.model: CacheModel = cache_model_for(self.profile, "openai")
        self.prev_state: PrefixState | None = None
        self.prev_ids: Sequence[int] | None = None

    def post(self, events: Sequence[dict[str, Any]]) -> None:
        return None  # the transcript is read from the trajectory itself

    def request(self, call: miniswe.ModelCall) -> RequestView:
        messages = miniswe.transcript_messages(self.traj, call.index)
        conversation = transcript_conversation(messages)
        m = self.meter.measure(conversation)
        ids = m.ids or ()
        report = predict_reuse(self.prev_state, ids, self.model, prev_ids=self.prev_ids)
        self.prev_state, self.prev_ids = report.state, ids
        return RequestView(messages=messages, tools=list(conversation.tools), total=m.total,
                           by_zone=dict(m.by_zone), by_role=dict(m.by_role), cached=report.predicted_cached_tokens,
                           input_limit=self.profile.budget.input_limit)


@dataclass(frozen=True)
class AppendPolicy:
    """The whole transcript as the agent sent it (the eq. 9 reference)."""

    name: str = "append"
    infer_bindings: bool = False

    def start(self, traj: miniswe.Trajectory, ctx: EvalContext) -> PolicyRun:
        return _AppendRun(traj, ctx)


# --------------------------------------------------------------------------- service path

_HEX = re.compile(r"(?<![0-9a-f])[0-9a-f]{12,64}(?![0-9a-f])")


class _ServiceRun:
    def __init__(self, traj: miniswe.Trajectory, ctx: EvalContext, invalidation: str = "auto", *,
                 policy: str = "select", setting: SweepSetting | None = None, due_calls: int | None = None) -> None:
        from app.api.schemas import SessionCreate
        from app.services import sessions as session_service

        self.ctx = ctx
        self.policy = policy
        self.due_calls = due_calls
        limit = ctx.profiles.get(ctx.profile).budget.input_limit
        self.watermarks = setting.watermarks(limit) if setting is not None else None
        # the policy decides whether results carry bindings (the adapter's): the server infers none
        create = miniswe.session_create_body(traj, profile=ctx.profile, infer_bindings=True)
        if invalidation != "auto":
            create["metadata"] = {**create.get("metadata", {}), "invalidation": invalidation}
        body = SessionCreate.model_validate(create)
        with ctx.unit_of_work() as db:
            self.session_id = session_service.create_session(
                db, ctx.profiles, profile=body.profile or ctx.profile, contract=body.contract.model_dump(),
                system=body.system, tools=[t.model_dump(exclude_none=True) for t in body.tools],
                metadata=body.metadata)
        self.input_limit = ctx.profiles.get(ctx.profile).budget.input_limit
        self._handles: dict[str, str | None] = {}

    def post(self, events: Sequence[dict[str, Any]]) -> None:
        from app.api.schemas import EventBatch
        from app.services import sessions as session_service

        batch = EventBatch.model_validate({"events": list(events)})
        with self.ctx.unit_of_work() as db:
            session_service.ingest_events(db, self.session_id, [e.model_dump(mode="json") for e in batch.events],
                                          shell_states=self.ctx.shell_states)

    def handle_texts(self, text: str) -> list[str]:
        """Payloads of the handles ``text`` names (12 to 64 hex chars), via read_handle."""
        from app.domain.errors import HandleNotFound
        from app.services import sessions as session_service

        out: list[str] = []
        wanted = [h for h in dict.fromkeys(_HEX.findall(text)) if h not in self._handles]
        if wanted:
            with self.ctx.unit_of_work() as db:
                for h in wanted:
                    try:
                        _, data, _ = session_service.read_handle(db, h)
                        self._handles[h] = data.decode("utf-8", errors="replace")
                    except HandleNotFound:
                        self._handles[h] = None
        for h in dict.fromkeys(_HEX.findall(text)):
            payload = self._handles.get(h)
            if payload is not None:
                out.append(payload)
        return out

    def request(self, call: miniswe.ModelCall) -> RequestView:
        from app.domain.errors import PinnedOverBudget
        from app.services.requests import assemble_request

        try:
            out = assemble_request(self.ctx.session_factory, self.ctx.profiles, self.ctx.meters, self.session_id,
                                   fmt="openai", memo=self.ctx.memo, policy=self.policy, watermarks=self.watermarks,
                                   due_calls=self.due_calls)
        except PinnedOverBudget as exc:
            return RequestView(messages=[], tools=[], total=0, by_zone={}, by_role={}, cached=0,
                               input_limit=self.input_limit, error=str(exc))
        manifest = out.manifest
        tokens = manifest.tokens
        record = out.assembly.record
        items = {str(i.call_id): i for i in manifest.items if i.kind == "tool_result"}
        return RequestView(messages=list(out.request["messages"]), tools=list(out.request.get("tools") or []),
                           total=tokens.total, by_zone=dict(tokens.by_zone), by_role=dict(tokens.by_role),
                           cached=manifest.cache.predicted_cached_tokens,
                           input_limit=int(manifest.budget["input_limit"]), handle_texts=self.handle_texts,
                           compaction_pass=out.assembly.evicted_now > 0, pass_over_target=out.assembly.over_target,
                           trunk_text=render_record(record, with_contract=False) if record is not None else "",
                           items=items, invalidation=manifest.invalidation)


@dataclass(frozen=True)
class ServicePolicy:
    """A policy served by ctxd itself: session, events and GET request through the
    service functions of the API, on the evaluation's database."""

    name: str
    infer_bindings: bool
    invalidation: str = "auto"  # how superseded observations are shown (session metadata.invalidation)
    setting: SweepSetting | None = None  # select with these watermarks instead of the profile's
    scratchpad: bool = False  # issue 16: post plan versions, documents and a child session's conclusion
    due_calls: int | None = None  # N of select's pass forecast (None: the default, DUE_CALLS)

    def start(self, traj: miniswe.Trajectory, ctx: EvalContext) -> PolicyRun:
        run = _ServiceRun(traj, ctx, self.invalidation, policy="window" if self.name == "window" else "select",
                          setting=self.setting, due_calls=self.due_calls)
        return _ScratchpadRun(run) if self.scratchpad else run


PLAN_EVERY = 5  # select-scratchpad: a plan version every 5 model calls
DOCUMENT_EVERY = 4  # ... and the latest file read as a retrieved document every 4 calls (one key: it replaces)
CHILD_AT, CONCLUDE_AT = 3, 6  # ... a child session created at call 3, concluding at call 6
DOCUMENT_CHARS = 2000
_PREFIXES = {"plan": "## Plan (version ", "document": "## Retrieved document [",
             "conclusion": "## Conclusion of sub-agent session "}


class _ScratchpadRun:
    """``select-scratchpad`` (issue 16): the select run, plus what an agent that keeps a plan,
    retrieves documents and delegates would post, built from the trajectory itself so every
    run is reproducible: every PLAN_EVERY calls a plan version (a checklist of the commands
    run so far, the latest ticked); every DOCUMENT_EVERY calls the latest tool output as a
    retrieved document (key ``latest-read``, so each replaces the previous one); a child
    session at call CHILD_AT that runs the trajectory's latest command and concludes at call
    CONCLUDE_AT. The record per call says what the request holds of them."""

    def __init__(self, run: _ServiceRun) -> None:
        self.run = run
        self.commands: list[str] = []
        self.last_output = ""
        self.versions = 0
        self.child: str | None = None
        self.children = 0

    def post(self, events: Sequence[dict[str, Any]]) -> None:
        for e in events:
            if e["kind"] == "message":
                self.commands += [call_text(c["arguments"]) if isinstance(c["arguments"], str) else str(c["arguments"]) for c in e.get("tool_calls") or ()]
            elif e["kind"] == "tool_result" and e["payload"].strip():
                self.last_output = e["payload"]
        self.run.post(events)

    def _post(self, session_id: str, events: list[dict[str, Any]]) -> None:
        from app.api.schemas import EventBatch
        from app.services import sessions as session_service

        batch = EventBatch.model_validate({"events": events})
        with self.run.ctx.unit_of_work() as db:
            session_service.ingest_events(db, session_id, [e.model_dump(mode="json") for e in batch.events],
                                          shell_states=self.run.ctx.shell_states)

    def request(self, call: miniswe.ModelCall) -> RequestView:
        from app.services import sessions as session_service

        events: list[dict[str, Any]] = []
        if call.index % PLAN_EVERY == 0 and self.commands:
            self.versions += 1
            done = [" ".join(c.split())[:100] for c in self.commands[-8:]]
            text = "\n".join(f"- [x] {c}" for c in done[:-1]) + f"\n- [ ] after: {done[-1]}\n- [ ] run the tests"
            events.append({"event_id": f"plan-{self.versions}", "kind": "plan", "text": text.lstrip("\n")})
        if call.index % DOCUMENT_EVERY == 1 and self.last_output.strip():
            events.append({"event_id": f"doc-{call.index}", "kind": "document", "key": "latest-read",
                           "source": f"trace output before call {call.index}",
                           "text": self.last_output[:DOCUMENT_CHARS]})
        if events:
            self._post(self.run.session_id, events)
        if call.index == CHILD_AT:
            with self.run.ctx.unit_of_work() as db:
                self.child = session_service.create_child(db, self.run.ctx.profiles, self.run.session_id,
                                                          goal="Check the latest command's output.", system=None,
                                                          tools=None, metadata={})
            self.children += 1
            command = self.commands[-1] if self.commands else "true"
            self._post(self.child, [
                {"event_id": "c-a", "kind": "message", "role": "assistant", "content": "Checking.",
                 "tool_calls": [{"call_id": "c1", "name": "bash", "arguments": {"command": command}}]},
                {"event_id": "c-r", "kind": "tool_result", "call_id": "c1", "payload": self.last_output or "(none)",
                 "exit_code": 0}])
        if call.index == CONCLUDE_AT and self.child is not None:
            self._post(self.child, [{"event_id": "c-done", "kind": "conclusion",
                                     "text": f"Checked `{' '.join(self.commands[-1].split())[:80] if self.commands else ''}`: "
                                             f"{len(self.last_output.splitlines())} lines of output, nothing to fix."}])
        view = self.run.request(call)
        if view.error is not None:
            return view
        meter = self.run.ctx.meters.get(self.run.ctx.profiles.get(self.run.ctx.profile))
        found: dict[str, list[int]] = {k: [] for k in _PREFIXES}
        for m in view.messages[2:]:
            content = m.get("content") or ""
            for kind, prefix in _PREFIXES.items():
                if m.get("role") == "user" and content.startswith(prefix):
                    found[kind].append(int(meter.count_text(content)))
        trunk = view.messages[1].get("content") or "" if len(view.messages) > 1 else ""
        return replace(view, scratchpad={
            "plans": len(found["plan"]), "plan_tokens": sum(found["plan"]), "plan_in_record": "\n## Plan (version" in trunk,
            "documents": len(found["document"]), "document_tokens": sum(found["document"]),
            "children": self.children, "conclusions": len(found["conclusion"]),
            "conclusion_tokens": sum(found["conclusion"])})


@dataclass(frozen=True)
class SweepSetting:
    """One point of the watermark sweep (issue 10 item 2): ``T_hi`` and ``T_lo`` as
    fractions of ``input_limit``, K and the record budget (tokens). Named
    ``select[hi=0.35,lo=0.14,k=3,r=1500]`` in ``ctxd eval --policies``."""

    hi: float
    lo: float
    keep_groups: int
    record_tokens: int

    @property
    def name(self) -> str:
        return f"select[hi={self.hi:g},lo={self.lo:g},k={self.keep_groups},r={self.record_tokens}]"

    def watermarks(self, input_limit: int) -> Any:
        from app.domain.compaction.watermarks import Watermarks

        return Watermarks.of_limit(input_limit, hi=self.hi, lo=self.lo, keep_groups=self.keep_groups,
                                   record_tokens=self.record_tokens)

    @classmethod
    def parse(cls, name: str) -> SweepSetting:
        """``select[hi=..,lo=..,k=..,r=..]`` (any order; lo defaults to 0.4 * hi, k to 3, r
        to 1500). ValueError otherwise."""
        match = _SWEEP.fullmatch(name)
        if match is None:
            raise ValueError(f"not a sweep setting: {name!r}")
        values = dict(part.split("=", 1) for part in match.group(1).split(",") if part)
        unknown = set(values) - {"hi", "lo", "k", "r"}
        if unknown or "hi" not in values:
            raise ValueError(f"sweep setting {name!r}: give hi (and lo, k, r); unknown {sorted(unknown)}")
        hi = float(values["hi"])
        return cls(hi=hi, lo=float(values.get("lo", 0.4 * hi)), keep_groups=int(values.get("k", 3)),
                   record_tokens=int(values.get("r", 1500)))


_SWEEP = re.compile(r"select\[([a-z0-9=.,]*)\]")
_DUE = re.compile(r"select-due(\d+)")  # ``select-due5``: the profile's watermarks, pass forecast over N = 5 calls


POLICIES: dict[str, Policy] = {
    "append": AppendPolicy(),
    "window": ServicePolicy("window", infer_bindings=False),
    "select": ServicePolicy("select", infer_bindings=True),
    # select with one representation rule for every superseded observation (seed 000 table 9):
    # the tombstone-versus-notice token and cache effect is select-tombstone against select-notice
    "select-tombstone": ServicePolicy("select-tombstone", infer_bindings=True, invalidation="tombstone"),
    "select-notice": ServicePolicy("select-notice", infer_bindings=True, invalidation="notice"),
    # select with the agent's plan, retrieved documents and a sub-agent (issue 16), from the trace itself
    "select-scratchpad": ServicePolicy("select-scratchpad", infer_bindings=True, scratchpad=True),
}


def get_policy(name: str) -> Policy:
    """The policy called ``name``: one of :data:`POLICIES`, or a sweep setting
    ``select[hi=..,lo=..,k=..,r=..]`` (:class:`SweepSetting`). Raises ValueError naming the
    known ones."""
    due = _DUE.fullmatch(name)
    if due is not None:  # select with another N for the pass forecast (app/domain/compaction/forecast.py)
        return ServicePolicy(name, infer_bindings=True, due_calls=int(due.group(1)))
    if name.startswith("select["):
        setting = SweepSetting.parse(name)
        setting.watermarks(10**9)  # validates 0 < lo < hi
        return ServicePolicy(name, infer_bindings=True, setting=setting)
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
