"""PLAN purely (DESIGN.md section 3): from what a GET loaded to the body, the manifest, the
new layout state and the new prefix state. No I/O: the tokenizer and the wire format
come in as ports, memos as explicit values.

Sources: seed 000 eq. 1 (budget) and section 4.4.3 (prefix reuse ends at the first
changed token); seed 003 (assembly manifest).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from app.domain.assembly import Assembly, assemble_window, warm_window
from app.domain.budget import Budget
from app.domain.compaction.fold import Fold
from app.domain.errors import DomainError
from app.domain.layout import begins_with
from app.domain.manifest import (
    CacheReport,
    Divergence,
    Item,
    LayoutReport,
    Manifest,
    Representation,
    TokenCounts,
    budget_json,
)
from app.domain.ports import TokenMeter, WireFormat
from app.domain.prefix import CacheModel, ReuseReport, body_sha256, predict_reuse
from app.domain.prefix_layout import explain_divergence, layout_digest
from app.domain.session_memo import SessionMemo
from app.domain.state import LayoutState, PreviousRequest, RememberedIds, SessionState
from app.domain.supersession import InvalidationOptions
from app.domain.tenancy import DEFAULT_TENANT
from app.domain.types import Event, Session

_CUT_OR_ELIDED = (Representation.ELIDED, Representation.HEAD_TAIL)
_TOKENS = attrgetter("tokens")
_ELIDED_TOKENS = attrgetter("elided_tokens")

PLANNER_VERSION = 3  # stored with every manifest; bump when the same inputs would plan differently


@dataclass(frozen=True)
class Policy:
    """The request policy's parameters, from the session's profile: the budget (eq. 1),
    the per-item cap on a tool result (tokens), whether reasoning is rendered, and
    ``fold``: select's compaction (watermarks, protected-field check; issue 10), None for
    the window policy (eviction only)."""

    profile: str
    budget: Budget
    item_cap_tokens: int
    render_reasoning: bool = False
    fold: Fold | None = None

    @property
    def name(self) -> str:
        return "window" if self.fold is None else "select"


@dataclass(frozen=True)
class RequestPlan:
    """The outcome of planning one GET.

    ``body`` and ``body_bytes``: the wire request. ``manifest``: without ``id`` (given
    when saved). ``layout``: the layout state to persist; the loaded one itself when
    nothing moved (``layout_changed`` False). ``previous``: what to keep of this request
    for the next one in the same format; ``remembered``: the same with the ids, for the
    worker's memo. ``derived_payloads``: payloads the request names that must be stored
    (the elision index), ``{handle: bytes}``; ``tenant_id``: the session's tenant, whose
    those payloads are (the loaded :class:`SessionState`'s).
    """

    body: Mapping[str, Any]
    body_bytes: bytes
    manifest: Manifest
    loaded_layout: LayoutState
    layout: LayoutState
    previous: PreviousRequest
    remembered: RememberedIds
    reuse: ReuseReport
    assembly: Assembly
    tenant_id: str = DEFAULT_TENANT

    @property
    def layout_changed(self) -> bool:
        return self.layout != self.loaded_layout

    @property
    def derived_payloads(self) -> Mapping[str, bytes]:
        return self.assembly.derived_payloads


def warm_request(events: Sequence[Event], *, policy: Policy, meter: TokenMeter, memo: SessionMemo,
                 payload_tokens: Mapping[str, int] | None = None) -> None:
    """Take the first steps of the next :func:`plan_request` of these ``events`` under
    ``policy`` ahead of it (:func:`app.domain.assembly.warm_window`): its memos in ``memo``
    (the session's leaf cache) and the new messages' tokenizing started. Changes no result
    of any later plan, only what it finds done."""
    warm_window(events, budget=policy.budget, meter=meter, item_cap_tokens=policy.item_cap_tokens,
                render_reasoning=policy.render_reasoning, leaf_cache=memo, payload_tokens=payload_tokens)


def plan_request(
    state: SessionState,
    events: Sequence[Event],
    *,
    policy: Policy,
    wire: WireFormat,
    cache_model: CacheModel,
    meter: TokenMeter,
    previous: PreviousRequest | None = None,
    remembered: RememberedIds | None = None,
    memo: SessionMemo | None = None,
    payload_tokens: Mapping[str, int] | None = None,
    pass_due: bool | None = None,
) -> RequestPlan:
    """Plan the next request of ``state.session`` in ``wire``'s format.

    ``events``: the session's events up to ``state.last_seq``, in seq order.
    ``previous``: the stored state of the last request served in this format (None for the
    first). ``remembered``: the ids of a request this worker served; used (for an exact
    common prefix and to hash only new blocks) only when its state equals ``previous``'s,
    else the previous request is rebuilt from the events and checked against that state,
    so the cache report is the same whichever worker served the previous request.
    ``memo``: the session's leaf cache (see :func:`assemble_window`), kept across calls.
    ``payload_tokens``: exact token counts of tool outputs known so far (handle -> tokens,
    stored after their POST): manifest figures only, the body never depends on them.
    ``pass_due``: a trunk rewrite (a compaction pass) is due within a few calls (issue 10's
    watermarks): the in-place tombstones of new changes wait for it, an appended notice
    naming ``path@rN`` showing meanwhile (issue 11; seed 000 table 9). None (the default):
    forecast from select's watermarks (:mod:`app.domain.compaction.forecast`; never due
    under window). What waits is part of the layout state (``deferred``, ``shown_upto``),
    as is the cut.

    The plan is a function of its inputs: two calls with equal inputs give equal bodies
    and manifests; a plan from the layout state another plan produced on the same events
    gives the same body (the cut is a fixed point), which is what lets a GET persist a
    layout decision without changing what an identical second GET returns.

    Raises:
        PinnedOverBudget: root + trunk + next step alone exceed ``input_limit`` (eq. 1).
        NewestGroupOverBudget: the newest turn group cannot fit even bounded as a whole.
    """
    trusted = remembered if remembered is not None and remembered.matches(previous) else None
    if trusted is None and previous is not None:  # first, so that the meter's last encoding is this request's
        trusted = _rebuild_previous(state, events, previous, policy=policy, wire=wire, cache_model=cache_model,
                                    meter=meter, memo=memo, payload_tokens=payload_tokens)
    assembly = assemble_window(state.session, events, budget=policy.budget, meter=meter,
                               item_cap_tokens=policy.item_cap_tokens, previous_cut_seq=state.layout.cut_seq,
                               render_reasoning=policy.render_reasoning, leaf_cache=memo,
                               payload_tokens=payload_tokens, fold=policy.fold,
                               invalidation=invalidation_options(state.session, state.layout.deferred,
                                                                 state.layout.shown_upto, pass_due=pass_due))
    body, body_bytes = wire.serialize(assembly.conversation, assembly.measurement)
    body_digest = body_sha256(body_bytes, remembered.body if remembered is not None else None)
    m = assembly.measurement
    decided = assembly.invalidation
    new_layout = state.layout.advanced(cut_seq=assembly.cut_seq, deferred=decided.deferred,
                                       shown_upto=decided.shown_upto, folded=assembly.evicted_now > 0)
    digest, breakpoints = _identify(assembly, state.last_seq, wire=wire, memo=memo)
    reuse, cache = _cache_report(assembly, digest, breakpoints, trusted, previous, cache_model)
    items, elided = assembly.items, assembly.elided
    cut_tokens, cut_known = _cut_items(items, memo)
    manifest = Manifest(
        session_id=state.session.id, profile=policy.profile, format=wire.name, last_seq=state.last_seq,
        request_sha256=body_digest.hexdigest,
        tokens=TokenCounts(m.total, dict(m.by_zone), dict(m.by_role)),
        budget=budget_json(policy.budget), cache=cache,
        layout=LayoutReport(root=wire.zones["root"], trunk=wire.zones["trunk"], leaf=wire.zones["leaf"],
                            cut_seq=assembly.cut_seq, version=new_layout.version, evicted_now=assembly.evicted_now,
                            elision_index=tuple(sorted(assembly.derived_payloads))),
        items=items, elided=elided, ranges=assembly.ranges,
        elided_tokens=sum(filter(None, map(_TOKENS, elided))) + sum(r.tokens for r in assembly.ranges) + cut_tokens,
        # False while some elided or cut output's token count is not known yet (it is counted
        # once after its POST): elided_tokens then sums the known ones
        elided_tokens_exact=cut_known and _counts_known(elided) and all(r.tokens_known for r in assembly.ranges),
        layout_warnings=(*assembly.warnings, *wire.layout_warnings(assembly.conversation)),
        compaction=compaction_report(assembly, policy, new_layout),
        invalidation=assembly.invalidation,
    )
    return RequestPlan(
        body=body, body_bytes=body_bytes, manifest=manifest, loaded_layout=state.layout, layout=new_layout,
        previous=PreviousRequest(length=m.total, fingerprint=reuse.state.fingerprint, last_seq=state.last_seq,
                                 cut_seq=assembly.cut_seq, deferred=new_layout.deferred,
                                 shown_upto=new_layout.shown_upto),
        remembered=RememberedIds(state=reuse.state, packed=reuse.packed, chain=reuse.chain, layout=digest,
                                 body=body_digest),
        reuse=reuse, assembly=assembly, tenant_id=state.tenant_id,
    )


def _cache_report(assembly: Assembly, digest: Mapping[str, Any], breakpoints: tuple[int, ...],
                  trusted: RememberedIds | None, previous: PreviousRequest | None,
                  cache_model: CacheModel) -> tuple[ReuseReport, CacheReport]:
    """The request's prefix reuse against the previous request (``trusted``: its ids, when
    known or rebuilt) and the manifest's cache report of it."""
    m = assembly.measurement
    prev_state = trusted.state if trusted is not None and trusted.state.block_size == cache_model.block_size else None
    reuse = predict_reuse(prev_state, m.ids or (), cache_model, breakpoints=breakpoints,
                          prev_ids=trusted.packed if trusted is not None and prev_state else None,
                          prev_chain=trusted.chain if trusted is not None and prev_state else None)
    divergence = None
    if reuse.first_divergence_offset is not None and trusted is not None:
        divergence = _with_invalidation(Divergence(**explain_divergence(trusted.layout, digest,
                                                                        reuse.first_divergence_offset)), assembly)
    cache = CacheReport(
        model=cache_model.kind, block_size=cache_model.block_size,
        predicted_cached_tokens=reuse.predicted_cached_tokens, uncached_tokens=m.total - reuse.predicted_cached_tokens,
        # a previous request that could be neither recognised nor rebuilt (e.g. the tokenizer changed): nothing known
        previous_tokens=previous.length if previous is not None else 0,
        common_prefix_tokens=reuse.common_prefix_tokens,
        common_prefix_exact=reuse.common_prefix_exact and (previous is None or prev_state is not None),
        extends_previous=prev_state is not None and reuse.first_divergence_offset is None,
        breakpoints=breakpoints, first_divergence=divergence,
    )
    return reuse, cache


def _counts_known(items: Sequence[Item]) -> bool:
    """Whether every cut or elided item of ``items`` has its token count known."""
    return all(i.tokens_known is not False for i in items if i.representation in _CUT_OR_ELIDED)


#: key of the session memo's entry (:func:`_cut_items`): the last request's items, the sum
#: of their elided tokens and whether their cut items' counts are all known
_CUT_ITEMS = ("planner", "cut items")


def _cut_items(items: tuple[Item, ...], memo: SessionMemo | None) -> tuple[int, bool]:
    """The tokens head + tail cuts left out of the window's ``items`` (the known counts) and
    whether every cut or elided item's count is known. ``memo`` (the session's leaf cache)
    keeps them for the last request's items, so a window whose items begin with those
    (equal items; the usual case) adds up only the new ones. The same figures either way."""
    held = memo.cut_items if memo is not None else None
    done, tokens, known = 0, 0, True
    if held is not None and begins_with(items, held[0]):
        done, tokens, known = len(held[0]), held[1], held[2]
    new = items[done:]
    tokens += sum(map(_ELIDED_TOKENS, new))
    known = known and _counts_known(new)
    if memo is not None:
        memo.cut_items = (items, tokens, known)
    return tokens, known


def compaction_report(assembly: Assembly, policy: Policy, layout: LayoutState) -> dict[str, Any]:
    """The manifest's ``compaction`` (issue 10): the policy, whether this request ran a pass
    (the cut moved: groups folded, or evicted under window), how many groups it folded,
    the session's passes so far, and under select the watermarks and the record's fold
    point, tokens, budget and contract version."""
    out: dict[str, Any] = {"policy": policy.name, "pass": assembly.evicted_now > 0,
                           "groups_folded_now": assembly.evicted_now, "passes": layout.passes}
    if policy.fold is not None:
        out["watermarks"] = policy.fold.watermarks.as_dict()
        if assembly.evicted_now > 0:  # issue 10 item 3: where the pass left the request, and why if above T_lo
            out["after_pass"] = {"tokens": assembly.measurement.total, "t_lo": policy.fold.watermarks.t_lo,
                                 "over": assembly.over_target}
        if assembly.held is not None:  # over T_hi, the pass held back: it would free too little (no progress)
            out["held"] = dict(assembly.held)
        if assembly.forecast is not None:
            out["forecast"] = assembly.forecast.as_dict()
        record = assembly.record
        if record is not None:
            source = dict(record.source) if record.source is not None else {"source": "deterministic"}
            source.pop("candidate", None)  # the record endpoint has it; the manifest says which and why
            out["record"] = {"fold_seq": record.fold_seq, "tokens": record.tokens, "budget": record.budget,
                             "folded_events": len(record.folded_seqs), "collapsed_groups": record.collapsed,
                             "user_text": record.user_text.as_dict(),
                             "contract_version": record.contract_version, "source": source}
    return out
def invalidation_options(session: Session, deferred: Sequence[int] = (), shown_upto: int = 0, *,
                         pass_due: bool | None = False) -> InvalidationOptions:
    """What invalidation depends on besides the events: the session's representation rule
    (``metadata.invalidation``: auto, tombstone or notice; validated at create), the
    deferral of the layout state (``deferred``, ``shown_upto``) and ``pass_due``."""
    return InvalidationOptions(mode=str(session.metadata.get("invalidation", "auto")), pass_due=pass_due,
                               deferred=frozenset(deferred), shown_upto=shown_upto)


def _with_invalidation(divergence: Divergence, assembly: Assembly) -> Divergence:
    """``divergence`` with the reason invalidation gives when the leaf message it names
    is a tool result now shown as a tombstone (seed 000 table 9: the in-place replacement
    changes earlier tokens once) or now followed by an appended notice."""
    if divergence.zone != "leaf" or divergence.seq is None:
        return divergence
    item = next((i for i in assembly.items if i.seq == divergence.seq), None)
    if item is None or item.kind != "tool_result":
        return divergence
    if item.representation is Representation.TOMBSTONE:
        reason = ("invalidation: a historical observation replaced in place by a tombstone naming the write that "
                  "superseded it (seed 000 table 9)")
    elif _notice_follows(assembly, divergence.seq):
        reason = "invalidation: a notice naming a write appended after this tool result's turn (seed 000 table 9)"
    else:
        return divergence
    return Divergence(zone=divergence.zone, seq=divergence.seq, token_offset=divergence.token_offset, reason=reason)


def _notice_follows(assembly: Assembly, seq: int) -> bool:
    """Whether the leaf message of ``seq`` carries an appended invalidation notice."""
    message = next((m for m in assembly.conversation.leaf if m.seq == seq and m.role == "tool"), None)
    return message is not None and "[ctxd notice:" in message.content.rsplit("<<<end-ctxd-data>>>", 1)[-1]


def _identify(assembly: Assembly, last_seq: int, *, wire: WireFormat,
              memo: SessionMemo | None = None) -> tuple[dict[str, Any], tuple[int, ...]]:
    """The request's layout digest (with ``last_seq``: with the cut, what rebuilds it) and
    its cache breakpoints (token offsets: the ends of the root, the trunk and the request,
    for a format that marks them). ``memo``: the session's leaf cache (see
    :func:`~app.domain.prefix_layout.layout_digest`)."""
    m = assembly.measurement
    digest = layout_digest(assembly.conversation, by_zone=m.by_zone, cut_seq=assembly.cut_seq, memo=memo)
    digest["last_seq"] = last_seq
    breakpoints: tuple[int, ...] = ()
    if wire.cache_breakpoints:
        ends = (digest["root_end"], digest["trunk_end"], m.total)
        breakpoints = tuple(sorted({b for b in ends if 0 < b <= m.total}))
    return digest, breakpoints


def _rebuild_previous(state: SessionState, events: Sequence[Event], previous: PreviousRequest, *, policy: Policy,
                      wire: WireFormat, cache_model: CacheModel, meter: TokenMeter,
                      memo: SessionMemo | None,
                      payload_tokens: Mapping[str, int] | None = None) -> RememberedIds | None:
    """The previous request's ids when this worker does not hold them (another worker
    served it, or this one restarted): planned again from what produced it, the events up
    to its ``last_seq`` laid out with its cut, and trusted only if they give exactly the
    stored fingerprint. None when they cannot be rebuilt (e.g. the tokenizer changed):
    nothing is then known of the previous request but its length."""
    if not 0 <= previous.last_seq <= state.last_seq:
        return None
    earlier = [e for e in events if e.seq <= previous.last_seq]
    try:
        # the layout state it left (cut, deferral) is a fixed point: planned with it, its
        # events give it again (pass_due then changes nothing: every change is decided)
        assembly = assemble_window(state.session, earlier, budget=policy.budget, meter=meter,
                                   item_cap_tokens=policy.item_cap_tokens, previous_cut_seq=previous.cut_seq,
                                   render_reasoning=policy.render_reasoning, leaf_cache=memo,
                                   payload_tokens=payload_tokens, fold=policy.fold,
                                   invalidation=invalidation_options(state.session, previous.deferred,
                                                                     previous.shown_upto))
    except DomainError:
        return None
    if assembly.measurement.total != previous.length or assembly.cut_seq != previous.cut_seq:
        return None
    digest, breakpoints = _identify(assembly, previous.last_seq, wire=wire, memo=memo)
    rebuilt = predict_reuse(None, assembly.measurement.ids or (), cache_model, breakpoints=breakpoints)
    candidate = RememberedIds(state=rebuilt.state, packed=rebuilt.packed, chain=rebuilt.chain, layout=digest)
    return candidate if candidate.matches(previous) else None
