"""PLAN purely (DESIGN.md section 3): from what a GET loaded to the body, the manifest, the
new layout state and the new prefix state. No I/O: the tokenizer and the wire format
come in as ports, memos as explicit values.

Sources: seed 000 eq. 1 (budget) and section 4.4.3 (prefix reuse ends at the first
changed token); seed 003 (assembly manifest).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.assembly import Assembly, assemble_window
from app.domain.budget import Budget
from app.domain.errors import DomainError
from app.domain.manifest import (
    CacheReport,
    Divergence,
    LayoutReport,
    Manifest,
    Representation,
    TokenCounts,
    budget_json,
)
from app.domain.ports import TokenMeter, WireFormat
from app.domain.prefix import CacheModel, ReuseReport, predict_reuse
from app.domain.prefix_layout import explain_divergence, layout_digest
from app.domain.state import LayoutState, PreviousRequest, RememberedIds, SessionState
from app.domain.types import Event


_CUT_OR_ELIDED = (Representation.ELIDED, Representation.HEAD_TAIL)

PLANNER_VERSION = 2  # stored with every manifest; bump when the same inputs would plan differently


@dataclass(frozen=True)
class Policy:
    """The window policy's parameters, from the session's profile: the budget (eq. 1),
    the per-item cap on a tool result (tokens) and whether reasoning is rendered."""

    profile: str
    budget: Budget
    item_cap_tokens: int
    render_reasoning: bool = False


@dataclass(frozen=True)
class RequestPlan:
    """The outcome of planning one GET.

    ``body`` and ``body_bytes``: the wire request. ``manifest``: without ``id`` (given
    when saved). ``layout``: the layout state to persist; the loaded one itself when
    nothing moved (``layout_changed`` False). ``previous``: what to keep of this request
    for the next one in the same format; ``remembered``: the same with the ids, for the
    worker's memo. ``derived_payloads``: payloads the request names that must be stored
    (the elision index), ``{handle: bytes}``.
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

    @property
    def layout_changed(self) -> bool:
        return self.layout != self.loaded_layout

    @property
    def derived_payloads(self) -> Mapping[str, bytes]:
        return self.assembly.derived_payloads


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
    memo: MutableMapping[Any, Any] | None = None,
    payload_tokens: Mapping[str, int] | None = None,
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
                               payload_tokens=payload_tokens)
    body, body_bytes = wire.serialize(assembly.conversation, assembly.measurement)
    m = assembly.measurement
    new_layout = state.layout.with_cut(assembly.cut_seq)
    digest, breakpoints = _identify(assembly, state.last_seq, wire=wire, memo=memo)
    prev_state = trusted.state if trusted is not None and trusted.state.block_size == cache_model.block_size else None
    reuse = predict_reuse(prev_state, m.ids or (), cache_model, breakpoints=breakpoints,
                          prev_ids=trusted.packed if prev_state else None, prev_chain=trusted.chain if prev_state else None)
    divergence = None
    if reuse.first_divergence_offset is not None and trusted is not None:
        divergence = Divergence(**explain_divergence(trusted.layout, digest, reuse.first_divergence_offset))
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
    items, elided = assembly.items, assembly.elided
    manifest = Manifest(
        session_id=state.session.id, profile=policy.profile, format=wire.name, last_seq=state.last_seq,
        request_sha256=hashlib.sha256(body_bytes).hexdigest(),
        tokens=TokenCounts(m.total, dict(m.by_zone), dict(m.by_role)),
        budget=budget_json(policy.budget), cache=cache,
        layout=LayoutReport(root=wire.zones["root"], trunk=wire.zones["trunk"], leaf=wire.zones["leaf"],
                            cut_seq=assembly.cut_seq, version=new_layout.version, evicted_now=assembly.evicted_now,
                            elision_index=tuple(sorted(assembly.derived_payloads))),
        items=items, elided=elided, ranges=assembly.ranges,
        elided_tokens=sum(i.tokens or 0 for i in elided) + sum(r.tokens for r in assembly.ranges)
        + sum(i.elided_tokens for i in items),
        # False while some elided or cut output's token count is not known yet (it is counted
        # once after its POST): elided_tokens then sums the known ones
        elided_tokens_exact=all(i.tokens_known is not False for i in (*elided, *items)
                                if i.representation in _CUT_OR_ELIDED)
        and all(r.tokens_known for r in assembly.ranges),
        layout_warnings=(*assembly.warnings, *wire.layout_warnings(assembly.conversation)),
    )
    return RequestPlan(
        body=body, body_bytes=body_bytes, manifest=manifest, loaded_layout=state.layout, layout=new_layout,
        previous=PreviousRequest(length=m.total, fingerprint=reuse.state.fingerprint, last_seq=state.last_seq,
                                 cut_seq=assembly.cut_seq),
        remembered=RememberedIds(state=reuse.state, packed=reuse.packed, chain=reuse.chain, layout=digest),
        reuse=reuse, assembly=assembly,
    )



def _identify(assembly: Assembly, last_seq: int, *, wire: WireFormat,
              memo: MutableMapping[Any, Any] | None) -> tuple[dict[str, Any], tuple[int, ...]]:
    """The request's layout digest (with ``last_seq``: with the cut, what rebuilds it) and
    its cache breakpoints (token offsets: the ends of the root, the trunk and the request,
    for a format that marks them)."""
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
                      memo: MutableMapping[Any, Any] | None,
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
        assembly = assemble_window(state.session, earlier, budget=policy.budget, meter=meter,
                                   item_cap_tokens=policy.item_cap_tokens, previous_cut_seq=previous.cut_seq,
                                   render_reasoning=policy.render_reasoning, leaf_cache=memo,
                                   payload_tokens=payload_tokens)
    except DomainError:
        return None
    if assembly.measurement.total != previous.length or assembly.cut_seq != previous.cut_seq:
        return None
    digest, breakpoints = _identify(assembly, previous.last_seq, wire=wire, memo=memo)
    rebuilt = predict_reuse(None, assembly.measurement.ids or (), cache_model, breakpoints=breakpoints)
    candidate = RememberedIds(state=rebuilt.state, packed=rebuilt.packed, chain=rebuilt.chain, layout=digest)
    return candidate if candidate.matches(previous) else None
