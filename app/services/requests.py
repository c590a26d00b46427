"""Use case: assemble the next model request (DESIGN.md section 3, GET path)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session as OrmSession

from app.domain.assembly import Assembly, assemble_window
from app.domain.errors import ManifestNotFound, ServerFault, UnsupportedFormat
from app.domain.prefix import CacheModel, PrefixState, ReuseReport, predict_reuse
from app.domain.prefix_layout import explain_divergence, layout_digest
from app.domain.types import ToolResultEvent
from app.observability import metrics
from app.services.memo import AssemblyMemo, memo_of
from app.services.sessions import require_session_row
from app.store import repository as repo
from app.store.tenancy import own_payload
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import Profile, ProfileRegistry
from app.wire import anthropic as anthropic_wire
from app.wire import openai as openai_wire
from app.wire import tokens as tokens_wire

FORMATS = ("openai", "anthropic", "tokens")


@dataclass(frozen=True)
class AssembledRequest:
    request: dict[str, Any]
    manifest: dict[str, Any]
    assembly: Assembly
    reuse: ReuseReport | None = None


def request_bytes(body: dict[str, Any]) -> bytes:
    """The canonical bytes of a request body (what byte-identity is checked on): orjson's
    compact JSON, or the same compact form from ``json`` for what orjson refuses (an
    integer beyond 64 bits in a tool call's parsed arguments, the Anthropic ``input``)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def prompt_cache_key(session_id: str) -> str:
    """A stable, opaque per-session key for OpenAI's ``prompt_cache_key``."""
    return "ctxd-" + hashlib.sha256(session_id.encode()).hexdigest()[:24]


def serialize(assembly: Assembly, profile: Profile, fmt: str, *, session_id: str, model: str | None = None) -> dict[str, Any]:
    """The wire body for ``fmt`` (openai, anthropic, tokens); its ``model`` is ``model`` (the
    session's own) or else the profile's. Raises UnsupportedFormat.

    openai: the profile's ``chat_template_kwargs`` ride along (only when it declares some),
    and a meter that counted other messages than the plain serialization (mistral-tekken:
    ``Measurement.extra["openai_messages"]``) has those served, so the body is what was counted."""
    conversation = assembly.conversation
    model = model or profile.model
    if fmt == "openai":
        body = openai_wire.serialize(conversation, model=model, max_tokens=profile.output_reserve,
                                     prompt_cache_key=prompt_cache_key(session_id),
                                     chat_template_kwargs=profile.chat_template_kwargs)
        counted = assembly.measurement.extra.get("openai_messages")
        if isinstance(counted, list):
            body["messages"] = counted
        return body
    if fmt == "anthropic":
        return anthropic_wire.serialize(conversation, model=model, max_tokens=profile.output_reserve)
    if fmt == "tokens":
        m = assembly.measurement
        text = m.extra.get("text") if isinstance(m.extra.get("text"), str) else None
        return tokens_wire.serialize(m.ids or (), text, model=model, max_tokens=profile.output_reserve)
    raise UnsupportedFormat(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}", supported=list(FORMATS))


def cache_model_for(profile: Profile, fmt: str) -> CacheModel:
    """The profile's cache model; Anthropic bodies are cached only at their breakpoints."""
    if fmt == "anthropic":
        return CacheModel.anthropic(int(profile.cache.get("min_tokens", 1024)))
    return CacheModel.from_profile(profile.cache)


def _prefix_reuse(db: OrmSession, memo: AssemblyMemo, session_id: str, fmt: str, profile: Profile,
                  assembly: Assembly) -> tuple[ReuseReport, dict[str, Any]]:
    m = assembly.measurement
    ids = m.ids or ()
    layout = layout_digest(assembly.conversation, by_zone=m.by_zone, cut_seq=assembly.cut_seq)
    model = cache_model_for(profile, fmt)
    breakpoints: tuple[int, ...] = ()
    if fmt == "anthropic":
        breakpoints = tuple(sorted({b for b in (layout["root_end"], layout["trunk_end"], m.total) if 0 < b <= m.total}))
    previous = repo.get_prefix_state(db, session_id, fmt)
    prev_state = prev_layout = None
    if previous is not None:
        try:
            prev_state = PrefixState.from_json(previous[0])
            prev_layout = previous[1]
        except (ValueError, KeyError):
            prev_state = None
    prev_ids = prev_chain = None
    remembered = memo.previous_request(session_id, fmt)
    if prev_state is not None and remembered is not None and len(remembered[0]) // 4 == prev_state.length:
        prev_ids, prev_chain = remembered
    if prev_state is not None and prev_state.block_size != model.block_size:
        prev_state = None
    report = predict_reuse(prev_state, ids, model, breakpoints=breakpoints, prev_ids=prev_ids, prev_chain=prev_chain)
    info: dict[str, Any] = {
        "model": model.kind,
        "block_size": model.block_size,
        "predicted_cached_tokens": report.predicted_cached_tokens,
        "uncached_tokens": m.total - report.predicted_cached_tokens,
        "previous_tokens": report.previous_tokens,
        "common_prefix_tokens": report.common_prefix_tokens,
        "common_prefix_exact": report.common_prefix_exact,
        "extends_previous": prev_state is not None and report.first_divergence_offset is None,
    }
    if breakpoints:
        info["breakpoints"] = list(breakpoints)
    if report.first_divergence_offset is not None and prev_layout is not None:
        info["first_divergence"] = explain_divergence(prev_layout, layout, report.first_divergence_offset)
        metrics.TRUNK_REWRITES.labels(profile.name, info["first_divergence"]["zone"]).inc()
    repo.put_prefix_state(db, session_id, fmt, report.state.to_json(), layout)
    memo.remember_request(session_id, fmt, report.packed, report.chain)
    return report, info


#: GETs that look a missing payload count up in storage before giving up on it (the count is
#: computed after the output's POST; a failed or slow count must not cost a read per GET).
COUNT_LOOKUPS = 3


def _count_key(tokenizer_id: str, handle: str) -> tuple[str, str, str]:
    return ("payload_tokens", tokenizer_id, handle)


def remember_payload_tokens(meters: MeterRegistry, session_id: str, tokenizer_id: str, counts: dict[str, int]) -> None:
    """Keep counts just computed for a session's outputs in this worker's memo, so its next
    GETs need not read them back (another worker reads them from storage)."""
    stash = memo_of(meters).leaf_cache(session_id)
    for handle, count in counts.items():
        stash[_count_key(tokenizer_id, handle)] = count


def _known_payload_tokens(db: OrmSession, meter: Any, events: list[Any], stash: dict[Any, Any]) -> dict[str, int]:
    """Exact token counts of the session's tool outputs known so far (handle -> tokens, under
    the meter's tokenizer). Counts never change, so each is read from the payloads table
    once and kept in the session's memo (``stash``, its leaf cache); an output whose count
    is not stored yet is looked up again on at most ``COUNT_LOOKUPS`` GETs (one SELECT for
    all such outputs), so a GET reads only the few newest (issue 9, item 7)."""
    tokenizer_id = getattr(meter, "tokenizer_id", None)
    if tokenizer_id is None:
        return {}
    out: dict[str, int] = {}
    missing: list[str] = []
    for event in events:
        if isinstance(event, ToolResultEvent):
            count = stash.get(_count_key(tokenizer_id, event.handle))
            if count is not None:
                out[event.handle] = count
            elif stash.get(("payload_tokens_lookups", tokenizer_id, event.handle), 0) < COUNT_LOOKUPS:
                missing.append(event.handle)
    if missing:
        for handle, count in repo.payload_token_counts(db, missing, tokenizer_id).items():
            if count is not None:
                stash[_count_key(tokenizer_id, handle)] = out[handle] = count
        for handle in missing:
            key = ("payload_tokens_lookups", tokenizer_id, handle)
            stash[key] = stash.get(key, 0) + 1
    return out


def assemble_request(db: OrmSession, profiles: ProfileRegistry, meters: MeterRegistry, session_id: str, *,
                     fmt: str = "openai") -> AssembledRequest:
    """Assemble, count, predict prefix reuse, persist the manifest; return the wire body.

    Returns the body for ``fmt`` and the manifest: tokens by zone and role, budget, items
    with why and representation, elided items with handles and token counts, and
    ``cache`` (predicted cached tokens under the profile's cache model, previous request's
    tokens, and where and why the prefix diverged when it did; seed 000 section 4.4.3).

    Raises:
        SessionNotFound (404), UnsupportedFormat (422), PinnedOverBudget (422): the root,
        trunk and next step alone exceed ``input_limit`` (eq. 1); NewestGroupOverBudget
        (422): the newest turn group cannot fit even bounded; TemplateUnsupported /
        ServerFault (500): the profile's template cannot be counted by zone, or a storage
        invariant broke.
    """
    if fmt not in FORMATS:
        raise UnsupportedFormat(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}", supported=list(FORMATS))
    row = require_session_row(db, session_id)
    session = repo.session_from_row(row)
    profile = profiles.get(session.profile)
    meter = meters.get(profile)
    memo = memo_of(meters)
    events = memo.events(db, session_id, row.last_seq)
    leaf_cache = memo.leaf_cache(session_id)
    assembly = assemble_window(session, events, budget=profile.budget, meter=meter,
                               item_cap_tokens=profile.item_cap_tokens, previous_cut_seq=row.cut_seq,
                               render_reasoning=profile.render_reasoning, leaf_cache=leaf_cache,
                               payload_tokens=_known_payload_tokens(db, meter, events, leaf_cache))
    for handle, data in assembly.derived_payloads.items():
        stored = own_payload(db, data, session_id=session_id, tenant_id=row.tenant_id)
        if stored != handle:  # content-addressed: the note must name exactly what is stored
            raise ServerFault(f"elision index stored as {stored} but the trunk names {handle}", handle=handle)
    body = serialize(assembly, profile, fmt, session_id=session_id, model=row.model)
    digest = hashlib.sha256(request_bytes(body)).hexdigest()
    m = assembly.measurement
    reuse, cache_info = _prefix_reuse(db, memo, session_id, fmt, profile, assembly)
    elided_tokens = sum(int(e.get("tokens", 0)) for e in assembly.elided)
    capped_tokens = sum(int(i.get("elided_tokens", 0)) for i in assembly.items)
    budget = assembly.budget
    manifest: dict[str, Any] = {
        "session_id": session_id,
        "profile": profile.name,
        "format": fmt,
        "last_seq": row.last_seq,
        "request_sha256": digest,
        "tokens": {"total": m.total, "by_zone": dict(m.by_zone), "by_role": dict(m.by_role)},
        "budget": budget.as_dict() | {"low_watermark": budget.eviction_target, "role_limits": budget.role_limits()},
        "cache": cache_info,
        "layout": {"root": "messages[0] + tools", "trunk": "messages[1]", "leaf": "messages[2:]",
                   "cut_seq": assembly.cut_seq, "evicted_now": assembly.evicted_now,
                   "elision_index": sorted(assembly.derived_payloads)},
        "items": list(assembly.items),
        "elided": list(assembly.elided),
        "elided_tokens": elided_tokens + capped_tokens,
        # False while some elided or cut output's token count is not known yet (it is counted
        # once after its POST): elided_tokens then sums the known ones
        "elided_tokens_exact": all(i.get("tokens_known", True) for i in (*assembly.elided, *assembly.items)
                                   if i.get("representation") in ("elided", "head_tail")),
        "layout_warnings": list(assembly.warnings)
        + (anthropic_wire.layout_warnings(assembly.conversation) if fmt == "anthropic" else []),
    }
    if fmt == "anthropic":
        manifest["layout"] |= {"root": "tools + system", "trunk": "messages[0]", "leaf": "messages[1:]"}
    manifest["id"] = repo.add_manifest(db, session_id=session_id, fmt=fmt, last_seq=row.last_seq, request_sha256=digest,
                                       tokens_total=m.total, manifest=manifest)
    if assembly.cut_seq > row.cut_seq:
        repo.advance_cut(db, session_id, assembly.cut_seq)
    _observe(profile, fmt, assembly, reuse, elided_tokens, capped_tokens)
    return AssembledRequest(request=body, manifest=manifest, assembly=assembly, reuse=reuse)


def _manifest_summary(row: Any) -> dict[str, Any]:
    return {"id": row.id, "format": row.format, "last_seq": row.last_seq, "request_sha256": row.request_sha256,
            "tokens_total": row.tokens_total, "created_at": row.created_at.isoformat()}


def list_manifests(db: OrmSession, session_id: str, *, limit: int = 50, before_id: int | None = None) -> dict[str, Any]:
    """The session's persisted manifests, newest first: ``{"session_id", "manifests": [{id,
    format, last_seq, request_sha256, tokens_total, created_at}], "next_before_id"}``
    (``next_before_id`` pages on, None on the last page). Raises SessionNotFound (404)."""
    require_session_row(db, session_id)
    rows = repo.list_manifests(db, session_id, limit=limit + 1, before_id=before_id)
    page = rows[:limit]
    return {"session_id": session_id, "manifests": [_manifest_summary(r) for r in page],
            "next_before_id": page[-1].id if len(rows) > limit else None}


def get_manifest(db: OrmSession, session_id: str, manifest_id: int) -> dict[str, Any]:
    """One persisted manifest exactly as it was served with its request (the body itself is
    not stored: ``request_sha256`` identifies it). Raises SessionNotFound or
    ManifestNotFound (404)."""
    require_session_row(db, session_id)
    row = repo.get_manifest(db, session_id, manifest_id)
    if row is None:
        raise ManifestNotFound(f"no manifest {manifest_id} in session {session_id!r}", session_id=session_id,
                               manifest_id=manifest_id)
    return dict(row.manifest) | {"id": row.id}


def _observe(profile: Profile, fmt: str, assembly: Assembly, reuse: ReuseReport, elided: int, capped: int) -> None:
    m = assembly.measurement
    limit = assembly.budget.input_limit
    for role, tokens in m.by_role.items():
        metrics.ASSEMBLED_TOKENS.labels(profile.name, role).inc(tokens)
        metrics.BUDGET_OCCUPANCY.labels(profile.name, role).observe(tokens / limit)
    metrics.REQUEST_TOKENS.labels(profile.name).observe(m.total)
    metrics.PREDICTED_REUSED_TOKENS.labels(profile.name, fmt).inc(reuse.predicted_cached_tokens)
    metrics.REUSE_RATIO.labels(profile.name, fmt).observe(reuse.predicted_cached_tokens / m.total if m.total else 0.0)
    segments = m.extra.get("segments")
    if isinstance(segments, dict):
        for zone, counts in segments.items():
            for result in ("hits", "misses"):
                if counts[result]:
                    metrics.SEGMENT_CACHE.labels(profile.name, zone, result).inc(counts[result])
    if elided:
        metrics.ELIDED_TOKENS.labels(profile.name, "evicted").inc(elided)
    if capped:
        metrics.ELIDED_TOKENS.labels(profile.name, "item_cap").inc(capped)
