"""Use case: what the inspector page (``/ui``, issue 15) shows of a session, read only.

One function per page, each returning plain JSON-like values (the templates escape and
lay them out; nothing here is HTML):

* :func:`sessions_page`: the caller's tenant's sessions (``GET /v1/sessions``'s listing).
* :func:`session_page`: one session: its calls (one per persisted manifest: tokens by role
  against ``input_limit`` and the watermarks T_hi / T_lo, whether a compaction pass ran,
  predicted cached tokens, and where and why the prefix broke, seed 000 section 4.4.3),
  the timeline of its events with the calls between them, the selected request's zones
  (root | trunk | leaf, tokens and items), its elided, folded and historical items with
  their handles, the progress record (``GET .../record``, seed 000 table 7) and the
  invalidation graph (app/domain/invalidation.py: which change withdrew which
  observations, seed 000 section 4.7).

Another tenant's session is SessionNotFound, word for word as an absent one (as in the API).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.domain.errors import ManifestNotFound
from app.domain.invalidation import HISTORICAL, build_graph
from app.domain.scratchpad import current_documents, latest_plan
from app.domain.tenancy import Principal
from app.domain.types import (
    ArtifactWriteEvent,
    ChildConclusionEvent,
    ConclusionEvent,
    DocumentEvent,
    Event,
    HypothesisEvent,
    MessageEvent,
    ObligationEvent,
    PlanEvent,
    StepEvent,
    ToolResultEvent,
)
from app.services import requests as request_service
from app.services import sessions as session_service
from app.services import tenancy as tenancy_service
from app.services.memo import AssemblyMemo
from app.store import repository as repo
from app.store.db import core_read, read_only
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry

CALLS_SHOWN = 200  # the newest calls (manifests) the page charts
EVENTS_SHOWN = 200  # events per timeline page
EXCERPT_CHARS = 240  # characters of an event's text on the timeline
ROLES = ("system", "tools", "task_state", "observations")
ZONE_NAMES = ("root", "trunk", "leaf")


def sessions_page(factory: sessionmaker[OrmSession], principal: Principal, *, cursor: str | None = None,
                  limit: int = 50, profiles: ProfileRegistry | None = None) -> dict[str, Any]:
    """The tenant's sessions, newest first: ``{"sessions": [{id, profile, model, title, goal,
    last_seq, created_at}], "next_cursor"}`` (``goal``: its first line). Raises InvalidParameter (422) for a cursor this service
    did not make."""
    with read_only(factory) as db:
        return tenancy_service.list_sessions(db, principal, limit=limit, cursor=cursor, profiles=profiles)


def divergence_text(divergence: Mapping[str, Any] | None) -> str | None:
    """The prefix break of one request in words: ``first divergence at token N in the
    <zone> (event seq S) because <reason>``; None when the request extends the previous one."""
    if not divergence:
        return None
    seq = divergence.get("seq")
    where = f" (event seq {seq})" if seq is not None else ""
    return (f"first divergence at token {divergence['token_offset']:,} in the {divergence['zone']}{where} "
            f"because {divergence['reason']}")


def call_row(number: int, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """One call of the chart from its stored manifest: ``number`` (1-based, oldest first),
    ``id``, ``format``, ``last_seq``, ``total`` tokens, ``by_role`` and ``by_zone``
    (tokens), ``input_limit`` (eq. 1), ``t_hi`` / ``t_lo`` (eq. 3; None when the manifest
    has no select report: ``t_lo`` is then the budget's eviction target), ``pass`` (a
    compaction pass ran; ``record``: the trunk's record, its ``tokens`` and ``fold_seq``), ``cached`` (predicted cached tokens), ``extends`` (the request
    extends the previous one), ``divergence`` (its JSON) and ``broke`` (in words)."""
    budget = manifest.get("budget") or {}
    compaction = manifest.get("compaction") or {}
    watermarks = compaction.get("watermarks") or {}
    cache = manifest.get("cache") or {}
    tokens = manifest.get("tokens") or {}
    divergence = cache.get("first_divergence")
    return {
        "number": number, "id": manifest.get("id"), "format": manifest.get("format"),
        "last_seq": manifest.get("last_seq"), "total": int(tokens.get("total", 0)),
        "by_role": {r: int((tokens.get("by_role") or {}).get(r, 0)) for r in ROLES},
        "by_zone": {z: int((tokens.get("by_zone") or {}).get(z, 0)) for z in ZONE_NAMES},
        "input_limit": int(budget.get("input_limit", 0)),
        "t_hi": watermarks.get("t_hi"), "t_lo": watermarks.get("t_lo", budget.get("t_lo")),
        "pass": bool(compaction.get("pass")), "passes": compaction.get("passes"), "record": compaction.get("record"),
        "cached": cache.get("predicted_cached_tokens"), "previous_tokens": cache.get("previous_tokens"),
        "extends": bool(cache.get("extends_previous")), "divergence": divergence,
        "broke": divergence_text(divergence),
    }


def _excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def event_row(event: Event) -> dict[str, Any]:
    """One line of the timeline: ``seq``, ``event_id``, ``kind``, ``label`` (role, call id,
    artifact, key), ``text`` (an excerpt of the event's text), ``handle`` (the payload
    behind it, when stored whole) and ``at`` (ISO 8601, when known)."""
    label: str = event.kind
    text, handle = "", None
    if isinstance(event, MessageEvent):
        label = event.role
        calls = "; ".join(f"{c.name}({c.arguments})" for c in event.tool_calls)
        text = event.content + (f"\n[calls] {calls}" if calls else "")
        handle = event.handle
    elif isinstance(event, ToolResultEvent):
        label = f"result of {event.call_id}" + (f" (exit {event.exit_code})" if event.exit_code is not None else "")
        text, handle = event.payload, event.handle
    elif isinstance(event, ArtifactWriteEvent):
        label, text = "write", f"{event.artifact}@r{event.revision}"
    elif isinstance(event, StepEvent):
        text = event.text
    elif isinstance(event, (HypothesisEvent, ObligationEvent)):
        label, text = f"{event.kind} {event.key} ({event.status})", event.text
    elif isinstance(event, PlanEvent):
        label, text, handle = f"plan version {event.version}", event.text, event.handle
    elif isinstance(event, DocumentEvent):
        label, text, handle = f"document [{event.key}] from {event.source}", event.text, event.handle
    elif isinstance(event, ChildConclusionEvent):
        label, text, handle = f"conclusion of child {event.child} (its seq {event.child_seq})", event.text, event.handle
    elif isinstance(event, ConclusionEvent):
        label, text, handle = f"conclusion (parent seq {event.parent_seq})", event.text, event.handle
    at = getattr(event, "at", None)
    return {"seq": event.seq, "event_id": event.event_id, "kind": event.kind, "label": label,
            "text": _excerpt(text), "handle": handle,
            "at": datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds") if at is not None else None}


def timeline(events: Sequence[Event], calls: Sequence[Mapping[str, Any]], *,
             before_seq: int | None = None, limit: int = EVENTS_SHOWN) -> dict[str, Any]:
    """The newest ``limit`` events with seq below ``before_seq`` (all: None), oldest first,
    each call placed after the last event it saw: ``{"rows": [{"event": ...} | {"call":
    ...}], "older_before": seq to page on, or None}``."""
    shown = [e for e in events if before_seq is None or e.seq < before_seq][-limit:]
    by_seq: dict[int, list[Mapping[str, Any]]] = {}
    for call in calls:
        by_seq.setdefault(int(call["last_seq"]), []).append(call)
    rows: list[dict[str, Any]] = []
    for event in shown:
        rows.append({"event": event_row(event)})
        rows.extend({"call": c} for c in by_seq.get(event.seq, ()))
    first = shown[0].seq if shown else None
    older = first if first is not None and any(e.seq < first for e in events) else None
    return {"rows": rows, "older_before": older}


def invalidation_table(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The invalidation graph as rows, one per change that withdrew observations (seed 000
    section 4.7.1): ``change`` (``path@rN``), ``cause`` (write or external), ``seq`` and
    ``event_id`` of the change, and ``withdrawn``: the observations it made historical
    (``seq``, ``call_id``, ``handle``, ``read``: what they had read, ``path@rN``)."""
    graph = build_graph(events)
    rows: list[dict[str, Any]] = []
    for artifact in sorted(graph.changes):
        for change in graph.changes[artifact]:
            marked = graph.marked_by(change)
            withdrawn: list[dict[str, Any]] = []
            for seq in marked:
                node = graph.observations[seq]
                reads = [f"{b.artifact}@r{b.revision}" + (f" lines {b.range}" if b.range else "")
                         for b in node.bindings if b.artifact == change.artifact]
                withdrawn.append({"seq": seq, "call_id": node.call_id, "handle": node.handle, "read": reads})
            rows.append({"change": change.label, "cause": change.cause, "seq": change.seq,
                         "event_id": change.event_id, "withdrawn": withdrawn})
    rows.sort(key=lambda r: r["seq"])
    return rows


def observation_states(events: Sequence[Event]) -> dict[str, int]:
    """How many observations are in each state (current, historical, unknown, ...)."""
    out: dict[str, int] = {}
    for state in build_graph(events).observation_states().values():
        out[state.state] = out.get(state.state, 0) + 1
    return dict(sorted(out.items()))


def scratchpad(events: Sequence[Event], session: Mapping[str, Any],
               record: Mapping[str, Any] | None) -> dict[str, Any]:
    """Plans, children and documents of a session (issue 16 item 4): ``plan`` (None, or
    ``version``, ``seq``, ``text``, ``handle``, ``in_record``: the latest version is at or
    before the progress record's fold_seq, so a pass wrote it into the record; ``earlier``:
    the earlier versions' ``version``, ``seq``, ``handle``), ``parent`` (id or None),
    ``children`` (``id``, ``conclusion``: ``seq``, ``text`` excerpt, ``handle`` of the last
    returned conclusion, or None) and ``documents`` (``key``, ``source``, ``seq``, ``handle``,
    ``replaced_by``: the seq of the current document of its key, None while current)."""
    plans = sorted((e for e in events if isinstance(e, PlanEvent)), key=lambda e: e.seq)
    latest = latest_plan(plans)
    fold_seq = ((record or {}).get("record") or {}).get("fold_seq")
    plan = None if latest is None else {
        "version": latest.version, "seq": latest.seq, "text": latest.text, "handle": latest.handle,
        "in_record": fold_seq is not None and latest.seq <= int(fold_seq),
        "earlier": [{"version": p.version, "seq": p.seq, "handle": p.handle} for p in plans if p is not latest]}
    returned = {e.child: e for e in events if isinstance(e, ChildConclusionEvent)}
    children = [{"id": c, "conclusion": None if c not in returned else {
        "seq": returned[c].seq, "text": _excerpt(returned[c].text), "handle": returned[c].handle}}
        for c in session.get("children") or ()]
    docs = current_documents(events)
    documents = []
    for d in sorted((*docs.current, *docs.replaced), key=lambda e: e.seq):
        by = docs.replaced_by(d)
        documents.append({"key": d.key, "source": d.source, "seq": d.seq, "handle": d.handle,
                          "replaced_by": by.seq if by is not None and by is not d else None})
    return {"plan": plan, "parent": session.get("parent"), "children": children, "documents": documents}


def request_view(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The selected request's parts from its manifest: ``zones`` (per zone: ``name``,
    ``tokens``, ``where`` in the wire body, ``entries``: its items), ``elided`` (items left out, with
    their handles), ``ranges`` (older events together, with their index handle), ``folded``
    (events the trunk's progress record holds, listed one by one), ``historical`` (observations a write
    superseded: tombstones, notices), ``warnings`` and the ``invalidation`` report."""
    items = list(manifest.get("items") or ())
    left_out = list(manifest.get("elided") or ())
    layout = manifest.get("layout") or {}
    by_zone = (manifest.get("tokens") or {}).get("by_zone") or {}
    zones = [{"name": z, "tokens": int(by_zone.get(z, 0)), "where": layout.get(z, ""),
              "entries": [i for i in items if i.get("zone") == z and i.get("representation") != "folded"]}
             for z in ZONE_NAMES]
    return {
        "zones": zones,
        "elided": [i for i in left_out if i.get("representation") != "folded"],
        "ranges": list(manifest.get("ranges") or ()),
        "folded": [i for i in (*items, *left_out) if i.get("representation") == "folded"],
        "historical": [i for i in items if i.get("state") == HISTORICAL or i.get("representation") == "tombstone"],
        "dropped": [i for i in items if i.get("zone") is None and i.get("representation") not in ("folded",)],
        "warnings": list(manifest.get("layout_warnings") or ()),
        "invalidation": manifest.get("invalidation"),
        "elision_index": list(layout.get("elision_index") or ()),
        "cut_seq": layout.get("cut_seq"),
    }


def session_page(factory: sessionmaker[OrmSession], profiles: ProfileRegistry, meters: MeterRegistry,
                 memo: AssemblyMemo, session_id: str, principal: Principal, *, manifest_id: int | None = None,
                 events_before: int | None = None, calls_shown: int = CALLS_SHOWN) -> dict[str, Any]:
    """Everything the session page shows (module docstring), from stored state only (no
    request is assembled): ``session`` (GET /v1/sessions/{id}), ``calls`` (the newest
    ``calls_shown``, oldest first: :func:`call_row`) of ``calls_total``, ``latest`` (the newest call),
    ``last_break`` (the newest call whose prefix broke), ``selected`` (the call shown in
    detail: ``manifest_id``, default the newest) with ``request`` (:func:`request_view`),
    ``timeline``, ``record`` (GET .../record) and ``invalidation`` (rows and states).

    Raises:
        SessionNotFound (404): absent, or another tenant's. ManifestNotFound (404):
        ``manifest_id`` is not one of this session's.
    """
    with read_only(factory) as db:
        tenancy_service.require_session(db, session_id, principal)
        session = session_service.describe_session(db, session_id, profiles)
        summaries = repo.list_manifests(db, session_id, limit=calls_shown)
        newest = sorted(s.id for s in summaries)
        # calls are numbered from the session's first, however many the page shows
        first_number = repo.count_manifests(db, session_id, before_id=newest[0]) if newest else 0
        manifests = repo.load_manifests(db, session_id, [*newest, *([manifest_id] if manifest_id else [])])
    if manifest_id is not None and manifest_id not in manifests:
        raise ManifestNotFound(f"no manifest {manifest_id} in session {session_id!r}", session_id=session_id,
                               manifest_id=manifest_id)
    calls = [call_row(first_number + n, manifests[i]) for n, i in enumerate(newest, start=1) if i in manifests]
    with core_read(factory) as conn:
        loaded = request_service.load(conn, memo, session_id, "openai")
    record = request_service.get_record(factory, profiles, meters, session_id, memo=memo)
    chosen = manifest_id if manifest_id is not None else (newest[-1] if newest else None)
    selected = None
    if chosen is not None:
        row = next((c for c in calls if c["id"] == chosen), None) or call_row(0, manifests[chosen])
        selected = {"call": row, "request": request_view(manifests[chosen])}
    return {
        "session": session,
        "profile": session["profile"],
        "calls": calls,
        "calls_total": first_number + len(newest),
        "latest": calls[-1] if calls else None,
        "last_break": next((c for c in reversed(calls) if c["divergence"]), None),
        "selected": selected,
        "timeline": timeline(loaded.events, calls, before_seq=events_before),
        "record": record,
        "scratchpad": scratchpad(loaded.events, session, record),
        "invalidation": {"rows": invalidation_table(loaded.events), "states": observation_states(loaded.events)},
    }


def handle_page(factory: sessionmaker[OrmSession], session_id: str, handle: str, principal: Principal, *,
                lines: str | None = None, max_bytes: int = 1024 * 1024) -> dict[str, Any]:
    """A payload of the session as text for the page: ``handle`` (full), ``size`` (bytes
    of the whole payload), ``text`` (UTF-8, invalid bytes replaced; at most ``max_bytes``
    bytes, ``lines`` ``a:b`` 1-based inclusive as in the API) and ``truncated``.

    Raises:
        SessionNotFound / HandleNotFound (404): not this tenant's session, or no payload of
        this session under ``handle``. InvalidParameter (422) / RangeNotSatisfiable (416):
        a bad ``lines``.
    """
    with read_only(factory) as db:
        tenancy_service.require_session(db, session_id, principal)
        full = tenancy_service.resolve_handle(db, handle, principal, session_id=session_id)
        full, data, size = session_service.read_handle(db, full, lines=lines)
    return {"handle": full, "size": size, "text": data[:max_bytes].decode("utf-8", "replace"),
            "truncated": len(data) > max_bytes, "lines": lines}
