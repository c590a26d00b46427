"""Synthetic sessions counted by a unit-token profile: seed 000's notebooks 4.1-4.4.

The seed's napkin math is reproduced by running ctxd's own domain code - the Budget of
eq. 1, the window policy's layout and eviction (:func:`app.domain.assembly.assemble_window`),
and prefix-reuse prediction (:func:`app.domain.prefix.predict_reuse` with a
``vllm_blocks`` cache model of block size 1) - on synthetic sessions whose every item
has an exact token size under :class:`UnitMeter`.

Unit-token profile
------------------
A *unit token* is a whitespace-separated word starting with ``§`` (``§obs3.17``); the
meter counts unit tokens and nothing else, so every synthetic item has exactly the size
it was generated with, and whatever text ctxd itself adds (the trunk's contract
headings, elision notes, ``exit_code`` headers, chat framing) costs 0 tokens: no framing
tokens, headroom M = 0. Token ids are the unit tokens interned in order of first
appearance, so equal text gives equal ids and a rewritten item diverges at its first
token. Cache block size 1 makes the predicted cached tokens the exact common prefix
(capped at ``n - 1`` by the vLLM rule, which never binds here).

Models of mechanisms ctxd does not have yet (labelled where they are defined)
-------------------------------------------------------------------------------
* **Compaction trigger** (eq. 3, hysteresis between T_hi and T_lo): ctxd's Budget has
  the target (``low_watermark``) but evicts only past ``input_limit``. :func:`notebook_4_3`
  models the trigger: after each addition, a request at or above T_hi is sent and then a
  pass runs; the pass evicts the oldest turn groups with ctxd's own eviction (an
  ``assemble_window`` whose input limit is T_lo) and rewrites the trunk (the progress
  record's next version, same size).
* **Selection of an 8,000-token leaf** (notebooks 4.1, 4.2, 4.4): the leaf is the
  selected observation of the current call, replaced on each call.
* **Invalidation representations** (seed 000 table 9; ctxd has no invalidation yet):
  :func:`remove_excerpt`, :func:`tombstone_excerpt`, :func:`append_notice` edit a
  :class:`Conversation` in place, at the end of the leaf, respectively.

Each ``notebook_*`` function returns a frozen dataclass of the computed figures; the
tests compare them with the seed's numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from app.domain.assembly import Assembly, assemble_window
from app.domain.budget import Budget
from app.domain.cuts import windowed_head_tail
from app.domain.layout import Conversation, LeafMessage
from app.domain.ports import Measurement
from app.domain.prefix import CacheModel, PrefixState, predict_reuse
from app.domain.types import Contract, Event, MessageEvent, Session, ToolCall, ToolResultEvent
from ctxd_tools.eval.measures import DEFAULT_PRICES, Prices, cost_usd

__all__ = [
    "SeedParams",
    "UnitMeter",
    "append_notice",
    "notebook_4_1",
    "notebook_4_2",
    "notebook_4_3",
    "notebook_4_4",
    "remove_excerpt",
    "tombstone_excerpt",
    "units",
]

UNIT = re.compile(r"§[^\s\"\\]+")
BIG = 10**9  # a window "large enough to admit" any synthetic request; an item cap nothing reaches


@lru_cache(maxsize=256)
def units(label: str, n: int) -> str:
    """``n`` distinct unit tokens labelled ``label`` (exactly ``n`` tokens under UnitMeter)."""
    return " ".join(f"§{label}.{i}" for i in range(n))


class UnitMeter:
    """TokenMeter of the unit-token profile (module docstring): exact sizes, no framing."""

    control_strings: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._texts: dict[str, list[int]] = {}  # memo: synthetic texts repeat across calls

    def _intern(self, text: str) -> list[int]:
        out = self._texts.get(text)
        if out is None:
            ids = self._ids
            out = []
            for tok in UNIT.findall(text):
                i = ids.get(tok)
                if i is None:
                    i = ids[tok] = len(ids)
                out.append(i)
            self._texts[text] = out
        return out

    def count_text(self, text: str) -> int:
        return len(self._intern(text))

    def head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        toks = UNIT.findall(text)
        if len(toks) <= head_tokens + tail_tokens:
            return text, "", 0
        return " ".join(toks[:head_tokens]), " ".join(toks[len(toks) - tail_tokens:]), len(toks) - head_tokens - tail_tokens

    def cut_ends(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str] | None:
        return windowed_head_tail(text, head_tokens, tail_tokens, self.head_tail)

    def prefetch(self, messages: Sequence[LeafMessage], *, handoff: bool = True) -> None:
        """Nothing to start ahead (see TokenMeter.prefetch)."""

    def measure(self, conversation: Conversation) -> Measurement:
        system = self._intern(conversation.system)
        tools = self._intern(json.dumps(list(conversation.tools), sort_keys=True, ensure_ascii=False))
        trunk = self._intern(conversation.trunk)
        leaf: list[int] = []
        for m in conversation.leaf:
            leaf += self._intern(m.content)
            for c in m.tool_calls:
                leaf += self._intern(c.arguments)
        ids = [*system, *tools, *trunk, *leaf]
        by_zone = {"root": len(system) + len(tools), "trunk": len(trunk), "leaf": len(leaf)}
        by_role = {"system": len(system), "tools": len(tools), "task_state": len(trunk), "observations": len(leaf)}
        return Measurement(total=len(ids), by_zone=by_zone, by_role=by_role, ids=tuple(ids))


# --------------------------------------------------------------------------- the scenario


@dataclass(frozen=True)
class SeedParams:
    """Seed 000's repair-agent baseline (notebook 4.1) and the later notebooks' sizes (tokens)."""

    window: int = 128_000  # W
    output_reserve: int = 8_000  # O
    headroom: int = 0  # M
    system: int = 3_000
    tools: int = 12_000
    task_state: int = 24_000
    tool_result: int = 4_000  # per-turn append under naive appending
    leaf: int = 8_000  # the selected leaf
    turns: int = 30
    t_hi: int = 92_000
    t_lo: int = 47_000
    excerpt: int = 850  # the r17 source excerpt at the start of the trunk
    tombstone: int = 24
    notice: int = 128
    prices: Prices = field(default_factory=lambda: DEFAULT_PRICES)

    @property
    def budget(self) -> Budget:
        """Eq. 1: ``input_limit = W - O - M`` = 120,000 tokens."""
        return Budget(window=self.window, output_reserve=self.output_reserve, headroom=self.headroom)

    @property
    def root(self) -> int:
        return self.system + self.tools


def _handle(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def seed_session(p: SeedParams, *, trunk: str | None = None, first_system_token: str | None = None,
                 version: int = 0) -> Session:
    """The root (system + tools) and the trunk (the task state as the contract's goal:
    the progress record of ``version``), sized by ``p``. ``first_system_token`` replaces
    the system's first unit token (a volatile per-call field at the very front)."""
    system = units("sys", p.system)
    if first_system_token is not None:
        system = f"§{first_system_token} " + units("sys", p.system)[len("§sys.0 "):]
    tool = {"type": "function", "function": {"name": "repo", "description": units("tool", p.tools),
                                             "parameters": {"type": "object", "properties": {}}}}
    goal = trunk if trunk is not None else units(f"state.v{version}", p.task_state)
    return Session(id="synthetic", profile="unit", contract=Contract(goal=goal, constraints=(), contract_version=1),
                   system=system, tools=(tool,))


def turn_events(label: str, tokens: int, seq: int) -> list[Event]:
    """One turn group: an assistant tool call (0 tokens) and its ``tokens``-token result."""
    call_id = f"call_{label}"
    return [
        MessageEvent(seq=seq, event_id=f"{label}-a", role="assistant", content="", handle=_handle(f"{label}-a"),
                     tool_calls=(ToolCall(call_id, "bash", '{"command": "run"}'),)),
        ToolResultEvent(seq=seq + 1, event_id=f"{label}-r", call_id=call_id, payload=units(label, tokens),
                        handle=_handle(f"{label}-r")),
    ]


def _assemble(p: SeedParams, session: Session, events: Sequence[Event], meter: UnitMeter, budget: Budget,
              cut: int = 0) -> Assembly:
    return assemble_window(session, events, budget=budget, meter=meter, item_cap_tokens=BIG, previous_cut_seq=cut)


# --------------------------------------------------------------------------- notebook 4.1


@dataclass(frozen=True)
class Notebook41:
    input_limit: int
    observation_budget: int
    turns_that_fit: int
    max_observation_for_all_turns: int
    append_sizes: tuple[int, ...]
    overflow_turn: int | None
    append_input_tokens: int
    select_sizes: tuple[int, ...]
    select_input_tokens: int

    @property
    def ratio(self) -> float:
        return self.append_input_tokens / self.select_input_tokens


def notebook_4_1(p: SeedParams = SeedParams()) -> Notebook41:
    """How much of the window is evidence: naive appending vs selection over 30 turns.

    Appending: each turn adds a 4,000-token tool result and the request is the whole
    transcript (the window policy under a window large enough to admit it, so nothing is
    evicted); it overflows at the first turn whose request exceeds ``input_limit``.
    Selection (modelled: the selected 8,000-token leaf replaces the previous one): every
    request is root + trunk + leaf."""
    meter = UnitMeter()
    budget = p.budget
    unbounded = Budget(window=BIG, output_reserve=p.output_reserve, headroom=p.headroom)
    session = seed_session(p)
    events: list[Event] = []
    append_sizes, select_sizes = [], []
    for t in range(1, p.turns + 1):
        events += turn_events(f"obs{t}", p.tool_result, seq=2 * t - 1)
        append_sizes.append(_assemble(p, session, events, meter, unbounded).measurement.total)
        a = _assemble(p, session, turn_events(f"leaf{t}", p.leaf, seq=1), meter, budget)
        assert a.evicted_now == 0
        select_sizes.append(a.measurement.total)
    overflow = next((t for t, n in enumerate(append_sizes, 1) if n > budget.input_limit), None)
    observation_budget = budget.input_limit - p.root - p.task_state
    return Notebook41(
        input_limit=budget.input_limit,
        observation_budget=observation_budget,
        turns_that_fit=observation_budget // p.tool_result,
        max_observation_for_all_turns=observation_budget // p.turns,
        append_sizes=tuple(append_sizes),
        overflow_turn=overflow,
        append_input_tokens=sum(append_sizes),
        select_sizes=tuple(select_sizes),
        select_input_tokens=sum(select_sizes),
    )


# --------------------------------------------------------------------------- notebook 4.3


@dataclass(frozen=True)
class Notebook43:
    additions_per_cycle_eq3: int
    pass_turns: tuple[int, ...]  # turns (1-based) whose call triggered a compaction pass
    sizes: tuple[int, ...]  # request tokens of each turn's call
    peak: int
    overshoot: int

    @property
    def passes(self) -> int:
        return len(self.pass_turns)

    @property
    def additions_per_cycle(self) -> tuple[int, ...]:
        """Additions between consecutive passes (the first cycle counted from the start)."""
        starts = (0, *self.pass_turns[:-1])
        return tuple(b - a for a, b in zip(starts, self.pass_turns))


def compaction_cycle_turns(t_hi: int, t_lo: int, append: int) -> int:
    """Eq. 3: ``N = ceil((T_hi - T_lo) / a)`` additions between compaction passes.
    Raises ValueError unless ``0 < T_lo < T_hi`` and ``a > 0``."""
    if not 0 < t_lo < t_hi or append <= 0:
        raise ValueError("eq. 3 needs 0 < T_lo < T_hi and a > 0 tokens")
    return math.ceil((t_hi - t_lo) / append)


def notebook_4_3(p: SeedParams = SeedParams()) -> Notebook43:
    """Spacing compaction passes with hysteresis (eq. 3).

    Starts at T_lo (root + trunk + an 8,000-token leaf of two results); each turn adds a
    4,000-token result and calls the model at the measured length (checked against eq. 1's
    hard limit). MODEL of the compaction trigger (ctxd has none yet): a call at or above
    T_hi triggers a pass after it; the pass evicts the oldest whole turn groups with
    ctxd's own eviction until the request is at most T_lo and rewrites the trunk (the
    progress record's next version, same size)."""
    if not p.t_lo < p.t_hi <= p.window - p.output_reserve:
        raise ValueError("watermarks must satisfy T_lo < T_hi <= W - O")
    meter = UnitMeter()
    hard = p.budget
    to_target = Budget(window=p.t_lo + p.output_reserve, output_reserve=p.output_reserve, headroom=0)
    version = 0
    seq = 1
    events: list[Event] = []
    for i in range(p.leaf // p.tool_result):
        events += turn_events(f"init{i}", p.tool_result, seq)
        seq += 2
    cut = 0
    sizes, passes = [], []
    start = _assemble(p, seed_session(p, version=version), events, meter, hard, cut).measurement.total
    assert start == p.t_lo, start
    for t in range(1, p.turns + 1):
        events += turn_events(f"obs{t}", p.tool_result, seq)
        seq += 2
        a = _assemble(p, seed_session(p, version=version), events, meter, hard, cut)
        assert a.evicted_now == 0 and a.measurement.total <= hard.input_limit
        sizes.append(a.measurement.total)
        if a.measurement.total >= p.t_hi:
            passes.append(t)
            version += 1
            compacted = _assemble(p, seed_session(p, version=version), events, meter, to_target, cut)
            cut = compacted.cut_seq
    peak = max(sizes)
    return Notebook43(additions_per_cycle_eq3=compaction_cycle_turns(p.t_hi, p.t_lo, p.tool_result),
                      pass_turns=tuple(passes), sizes=tuple(sizes), peak=peak, overshoot=peak - p.t_hi)


# --------------------------------------------------------------------------- notebook 4.2


@dataclass(frozen=True)
class LayoutBill:
    input_tokens: int
    cached_tokens: int
    uncached_tokens: int
    cost_usd: float
    calls: int

    @property
    def reuse_ratio(self) -> float:
        return self.cached_tokens / self.input_tokens

    @property
    def cost_per_call(self) -> float:
        return self.cost_usd / self.calls


@dataclass(frozen=True)
class Notebook42:
    rewrite_calls: tuple[int, ...]  # 1-based calls whose trunk was rewritten
    stable: LayoutBill
    unstable: LayoutBill


def _bill(p: SeedParams, *, rewrite_calls: Sequence[int], volatile_front: bool) -> LayoutBill:
    meter = UnitMeter()
    model = CacheModel.vllm_blocks(1)
    prev: PrefixState | None = None
    prev_ids: Sequence[int] | None = None
    inp = cached = 0
    version = 0
    for k in range(1, p.turns + 1):
        if k in rewrite_calls:
            version += 1
        session = seed_session(p, version=version, first_system_token=f"req{k}" if volatile_front else None)
        a = _assemble(p, session, turn_events(f"leaf{k}", p.leaf, seq=1), meter, p.budget)
        ids = a.measurement.ids or ()
        report = predict_reuse(prev, ids, model, prev_ids=prev_ids)
        prev, prev_ids = report.state, ids
        inp += a.measurement.total
        cached += report.predicted_cached_tokens
    return LayoutBill(input_tokens=inp, cached_tokens=cached, uncached_tokens=inp - cached,
                      cost_usd=cost_usd(inp - cached, cached, p.prices), calls=p.turns)


def notebook_4_2(p: SeedParams = SeedParams()) -> Notebook42:
    """Pricing a layout across one trajectory: 30 calls of root 15,000 + trunk 24,000 +
    a selected 8,000-token leaf replaced on each call. The trunk is rewritten on the call
    after each compaction pass notebook 4.3 finds. Stable layout: root | trunk | leaf;
    unstable: the same with a per-call field as the very first token."""
    passes = notebook_4_3(p).pass_turns
    rewrites = tuple(t + 1 for t in passes if t + 1 <= p.turns)
    return Notebook42(rewrite_calls=rewrites, stable=_bill(p, rewrite_calls=rewrites, volatile_front=False),
                      unstable=_bill(p, rewrite_calls=rewrites, volatile_front=True))


# --------------------------------------------------------------------------- notebook 4.4
# MODEL of invalidation representations (seed 000 table 9): ctxd has no invalidation yet.


def remove_excerpt(conversation: Conversation, excerpt: str) -> Conversation:
    """Remove the outdated payload from the trunk (table 9, "remove")."""
    if excerpt not in conversation.trunk:
        raise ValueError("the excerpt is not in the trunk")
    return replace(conversation, trunk=conversation.trunk.replace(excerpt + " ", "", 1).replace(excerpt, "", 1))


def tombstone_excerpt(conversation: Conversation, excerpt: str, marker: str) -> Conversation:
    """Replace the outdated payload in place with a short marker (table 9, "replace")."""
    if excerpt not in conversation.trunk:
        raise ValueError("the excerpt is not in the trunk")
    return replace(conversation, trunk=conversation.trunk.replace(excerpt, marker, 1))


def append_notice(conversation: Conversation, notice: str) -> Conversation:
    """Append a superseding notice after the leaf (table 9, "append")."""
    return replace(conversation, leaf=(*conversation.leaf, LeafMessage(role="user", content=notice)))


@dataclass(frozen=True)
class Edit:
    resident_tokens: int
    cached_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.resident_tokens - self.cached_tokens


@dataclass(frozen=True)
class Notebook44:
    baseline: int
    removal: Edit
    tombstone: Edit
    notice: Edit
    marker: str
    notice_text: str


def notebook_4_4(p: SeedParams = SeedParams(), *, artifact: str = "src/pool.py") -> Notebook44:
    """Token accounting for invalidation: the 47,000-token selected request with an
    850-token r17 excerpt at the start of the trunk; the leaf held fixed. Each edit is
    measured and its reuse predicted against the baseline request. The marker and the
    notice name the write (``"{artifact} r18"``, see :func:`ctxd_tools.eval.measures.names_write`);
    their readable words are framing (0 tokens), their sizes their unit tokens."""
    meter = UnitMeter()
    model = CacheModel.vllm_blocks(1)
    excerpt = units("r17", p.excerpt)
    session = seed_session(p, trunk=excerpt + " " + units("state", p.task_state - p.excerpt))
    base = _assemble(p, session, turn_events("leaf", p.leaf, seq=1), meter, p.budget)
    base_ids = base.measurement.ids or ()
    base_state = predict_reuse(None, base_ids, model).state
    marker = f"[superseded: {artifact} r17 by {artifact} r18; read r18 before editing] " + units("tomb", p.tombstone)
    notice = (f"Notice: the excerpt of {artifact} r17 above is historical; {artifact} r18 replaced it. "
              + units("notice", p.notice))

    def edit(conversation: Conversation) -> Edit:
        m = meter.measure(conversation)
        r = predict_reuse(base_state, m.ids or (), model, prev_ids=base_ids)
        return Edit(resident_tokens=m.total, cached_tokens=r.predicted_cached_tokens)

    conv = base.conversation
    return Notebook44(baseline=base.measurement.total, removal=edit(remove_excerpt(conv, excerpt)),
                      tombstone=edit(tombstone_excerpt(conv, excerpt, marker)), notice=edit(append_notice(conv, notice)),
                      marker=marker, notice_text=notice)



