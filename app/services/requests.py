"""Use case: assemble the next model request (DESIGN.md section 3, GET path)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session as OrmSession

from app.domain.assembly import Assembly, assemble_window
from app.domain.errors import SessionNotFound, UnsupportedFormat
from app.observability import metrics
from app.store import repository as repo
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import Profile, ProfileRegistry
from app.wire import openai as openai_wire

FORMATS = ("openai",)


@dataclass(frozen=True)
class AssembledRequest:
    request: dict[str, Any]
    manifest: dict[str, Any]
    assembly: Assembly


def request_bytes(body: dict[str, Any]) -> bytes:
    """The canonical bytes of a request body (what byte-identity is checked on)."""
    return orjson.dumps(body)


def serialize(assembly: Assembly, profile: Profile, fmt: str) -> dict[str, Any]:
    if fmt == "openai":
        return openai_wire.serialize(assembly.conversation, model=profile.model, max_tokens=profile.output_reserve)
    raise UnsupportedFormat(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}", supported=list(FORMATS))


def assemble_request(db: OrmSession, profiles: ProfileRegistry, meters: MeterRegistry, session_id: str, *,
                     fmt: str = "openai") -> AssembledRequest:
    """Assemble, count, persist the manifest and return the wire body.

    Returns the body for ``fmt`` and the manifest (tokens by zone and role, budget, items
    with why and representation, elided items with handles and token counts).

    Raises:
        SessionNotFound (404), UnsupportedFormat (422), PinnedOverBudget (422): the root,
        trunk and next step alone exceed ``input_limit`` (eq. 1).
    """
    if fmt not in FORMATS:
        raise UnsupportedFormat(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}", supported=list(FORMATS))
    row = repo.get_session_row(db, session_id)
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session_id=session_id)
    session = repo.session_from_row(row)
    profile = profiles.get(session.profile)
    meter = meters.get(profile)
    events = repo.load_events(db, session_id)
    assembly = assemble_window(session, events, budget=profile.budget, meter=meter,
                               item_cap_tokens=profile.item_cap_tokens, previous_cut_seq=row.cut_seq,
                               render_reasoning=profile.render_reasoning)
    body = serialize(assembly, profile, fmt)
    digest = hashlib.sha256(request_bytes(body)).hexdigest()
    m = assembly.measurement
    elided_tokens = sum(int(e.get("tokens", 0)) for e in assembly.elided)
    capped_tokens = sum(int(i.get("elided_tokens", 0)) for i in assembly.items)
    manifest: dict[str, Any] = {
        "session_id": session_id,
        "profile": profile.name,
        "format": fmt,
        "last_seq": row.last_seq,
        "request_sha256": digest,
        "tokens": {"total": m.total, "by_zone": dict(m.by_zone), "by_role": dict(m.by_role)},
        "budget": assembly.budget.as_dict() | {"low_watermark": assembly.budget.eviction_target,
                                                "role_limits": assembly.budget.role_limits()},
        "layout": {"root": "messages[0] + tools", "trunk": "messages[1]", "leaf": "messages[2:]",
                   "cut_seq": assembly.cut_seq, "evicted_now": assembly.evicted_now},
        "items": list(assembly.items),
        "elided": list(assembly.elided),
        "elided_tokens": elided_tokens + capped_tokens,
        "layout_warnings": list(assembly.warnings),
    }
    manifest["id"] = repo.add_manifest(db, session_id=session_id, fmt=fmt, last_seq=row.last_seq, request_sha256=digest,
                                       tokens_total=m.total, manifest=manifest)
    repo.advance_cut(db, session_id, assembly.cut_seq)
    for role, tokens in m.by_role.items():
        metrics.ASSEMBLED_TOKENS.labels(profile.name, role).inc(tokens)
    metrics.REQUEST_TOKENS.labels(profile.name).observe(m.total)
    if elided_tokens:
        metrics.ELIDED_TOKENS.labels(profile.name, "evicted").inc(elided_tokens)
    if capped_tokens:
        metrics.ELIDED_TOKENS.labels(profile.name, "item_cap").inc(capped_tokens)
    return AssembledRequest(request=body, manifest=manifest, assembly=assembly)
