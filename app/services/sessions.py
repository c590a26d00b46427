"""Use cases on sessions and their event log (DESIGN.md section 3, POST path)."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

from app.domain.errors import (
    ControlTokenInText,
    EventConflict,
    InvalidEvent,
    PayloadTooLarge,
    SessionNotFound,
    UnknownProfile,
)
from app.domain.invalidation import EXTERNAL_KIND, UNKNOWN_KIND, resolve_read
from app.domain.layout import canonical_json
from app.domain.recall import searchable_texts
from app.domain.tenancy import DEFAULT_TENANT
from app.domain.text import first_control_string, split_lines
from app.observability import metrics
from app.services import redaction
from app.services.memo import AssemblyMemo
from app.services.shell_inference import Inference, ShellStates
from app.store import repository as repo
from app.store import search as search_store
from app.store.db import after_commit
from app.store.tables import ArtifactRow, EventRow, SessionRow, iso_utc, utcnow
from app.store.tenancy import own_payload, own_payloads
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry


def create_session(db: OrmSession, profiles: ProfileRegistry, *, profile: str, contract: dict[str, Any], system: str,
                   tools: list[dict[str, Any]], metadata: dict[str, Any], meters: MeterRegistry | None = None,
                   model: str | None = None, tenant_id: str = DEFAULT_TENANT, parent_id: str | None = None,
                   title: str | None = None) -> str:
    """Create a session of tenant ``tenant_id``; returns its id (32 hex chars). ``model`` is the ``model`` of the
    session's request bodies (every format); None follows the profile's model. ``title``: a short human label
    (validated by the API: at most 200 characters, no control character); no request depends on it.

    With ``meters``, the text rendered verbatim (contract goal and constraints, which are
    protected fields; system; every string of the tool declarations) is checked against
    the profile's control strings (TokenMeter.control_strings): it cannot be neutralised
    without changing it, so one that spells a control token is refused.

    Raises:
        UnknownProfile: ``profile`` is not configured (HTTP 422).
        ControlTokenInText: protected text spells a control token of the profile (HTTP 422;
            ``loc`` names the field, e.g. ``["contract", "constraints", 0, "text"]``).
    """
    profiles.get(profile)
    if meters is not None:
        protected = {"contract": {"goal": contract.get("goal", ""), "constraints": contract.get("constraints", [])},
                     "system": system, "tools": tools}
        check_protected_text(profiles, meters, profile, protected)
    session_id = uuid.uuid4().hex
    repo.add_session(db, session_id=session_id, profile=profile, contract=contract, system=system, tools=tools,
                     metadata=metadata, model=model, tenant_id=tenant_id, parent_id=parent_id, title=title)
    return session_id


def set_title(db: OrmSession, session_id: str, title: str | None, profiles: ProfileRegistry) -> dict[str, Any]:
    """Set the session's title (None clears it) and return the session as ``GET
    /v1/sessions/{id}`` shows it. No request depends on the title: the layout, the memo and
    the manifests are untouched. Raises SessionNotFound (404)."""
    row = require_session_row(db, session_id)
    row.title = title
    db.flush()
    return describe_session(db, session_id, profiles)


#: Most characters of a session's goal line in the sessions list (GET /v1/sessions, the inspector).
GOAL_LINE_CHARS = 120


def goal_line(contract: Any, limit: int = GOAL_LINE_CHARS) -> str:
    """The first line of the contract's goal that holds some text, stripped, at most ``limit``
    characters (a longer one is cut to ``limit - 1`` and ends with '…'); "" when none."""
    goal = contract.get("goal") if isinstance(contract, dict) else None
    if not isinstance(goal, str):
        return ""
    line = next((part.strip() for part in goal.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


def check_protected_text(profiles: ProfileRegistry, meters: MeterRegistry, profile: str,
                         protected: dict[str, Any]) -> None:
    """Refuse operator text rendered verbatim (``protected``: field -> text or nested
    values) that spells a control string of ``profile`` (TokenMeter.control_strings).

    Raises ControlTokenInText (422; ``loc`` names the field, e.g. ``["system"]``)."""
    found = first_control_string(protected, meters.get(profiles.get(profile)).control_strings)
    if found is not None:
        loc, control = found
        raise ControlTokenInText(
            f"{'.'.join(map(str, loc))} spells {control!r}, a control token of profile {profile!r}; this text "
            "is rendered verbatim, so it cannot be neutralised: reword it, or quote it in a user message "
            "(where it is neutralised)", loc=list(loc),
            control_string=control, profile=profile)


def require_session_row(db: OrmSession, session_id: str, *, lock: bool = False) -> SessionRow:
    """The session's row (``lock``: taken for update). Raises SessionNotFound (404)."""
    row = repo.get_session_row(db, session_id, lock=lock)
    if row is None:
        raise SessionNotFound(f"no session {session_id!r}", session_id=session_id)
    return row


def session_model(row: SessionRow, profiles: ProfileRegistry) -> str | None:
    """The ``model`` of the session's request bodies: its own (set at create), else its
    profile's; None when neither is known (the profile is no longer configured)."""
    if row.model:
        return row.model
    try:
        return profiles.get(row.profile).model
    except UnknownProfile:
        return None


def describe_session(db: OrmSession, session_id: str, profiles: ProfileRegistry) -> dict[str, Any]:
    """The session as ``GET /v1/sessions/{id}`` shows it, ``model`` included
    (:func:`session_model`). Raises SessionNotFound (404)."""
    row = require_session_row(db, session_id)
    artifacts = {a.artifact: a.revision for a in db.execute(select(ArtifactRow).where(
        ArtifactRow.session_id == session_id, ArtifactRow.revision > 0)).scalars()}  # a row at 0 only holds a hash
    return {
        "id": row.id, "profile": row.profile, "model": session_model(row, profiles), "contract": row.contract, "system": row.system, "tools": row.tools,
        "metadata": row.meta or {}, "events": repo.event_count(db, session_id), "last_seq": row.last_seq,
        "artifacts": artifacts, "created_at": iso_utc(row.created_at), "title": row.title,
        "parent": row.parent_id, "children": repo.child_ids(db, session_id),
    }


def _fingerprint(event: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(event).encode("utf-8")).hexdigest()


# Optional fields added to the event schema after events were first stored (issue 11):
# the fingerprints stored before them were taken without them.
_ADDED_LATER: dict[str, tuple[str, ...]] = {"binding": ("ttl_seconds", "fetched_at")}


def _canonical_event(event: dict[str, Any]) -> dict[str, Any]:
    """What an event's idempotency fingerprint is taken of: the event with its unset
    (None-valued) optional fields dropped, at the event's level and its binding's, so that
    an omitted optional field and an explicit null are the same event and an optional
    field added to the schema later does not change the form of events that do not use
    it. Free-form objects (``conditions``, tool-call arguments) are kept as sent."""
    out = {k: v for k, v in event.items() if v is not None}
    if isinstance(out.get("binding"), dict):
        out["binding"] = {k: v for k, v in out["binding"].items() if v is not None}
    return out


def _legacy_form(event: dict[str, Any]) -> dict[str, Any]:
    """The form fingerprinted before :func:`_canonical_event` (events stored then): every
    field of the validated event, None included, except the optional fields added since
    when unset."""
    out = dict(event)
    for key, added in _ADDED_LATER.items():
        nested = out.get(key)
        if isinstance(nested, dict):
            out[key] = {k: v for k, v in nested.items() if not (k in added and v is None)}
    return out


def _checked_payload(data: bytes, max_bytes: int | None, *, index: int, event_id: str, field: str) -> bytes:
    """``data`` if it is within ``max_bytes``; else PayloadTooLarge naming the event."""
    if max_bytes is not None and len(data) > max_bytes:
        raise PayloadTooLarge(f"event {index} ({event_id!r}): {field} of {len(data):,} bytes exceeds the limit of "
                              f"{max_bytes:,} bytes (setting CTXD_MAX_PAYLOAD_BYTES)", index=index, event_id=event_id,
                              field=field, size_bytes=len(data), max_bytes=max_bytes)
    return data


def ingest_events(db: OrmSession, session_id: str, events: list[dict[str, Any]], *,
                  max_payload_bytes: int | None = None, redact: bool = True,
                  shell_states: ShellStates | None = None, memo: AssemblyMemo | None = None) -> dict[str, Any]:
    """Append a batch of events in one transaction (all or nothing; the caller commits).

    Each event is a validated dict with ``event_id`` and ``kind``. A repeated ``event_id``
    with the same body is a no-op returning the original seq; with another body it is a
    conflict. Payloads go to content-addressed storage; the log keeps their handles.
    ``max_payload_bytes`` bounds each new payload: a tool result's payload (UTF-8 bytes)
    and a message's canonical JSON (content, reasoning, tool calls).

    ``redact`` (issue 12 item 5, app/services/redaction.py): secrets are redacted once,
    here, in what enters requests: a message's content, reasoning and tool-call arguments
    (stored redacted in the event; arguments stay valid JSON) and a tool output (its
    redacted text stored as a payload of its own, ``view``); the event records the kinds
    (``redactions``), which the manifest item reports as a transform. The raw bytes stay
    whole behind the event's handle. Contract, system text and tools are never redacted.

    ``shell_states``: the process's shell inference states (``app.state.ctxd.shell_states``,
    app/services/shell_inference.py); None: a batch that infers rebuilds its session's.

    ``memo``: the worker's assembly memo (``app.state.ctxd.memo``): once the transaction has
    committed, the batch's new events are appended to the session's memoized events
    (:meth:`~app.services.memo.AssemblyMemo.extend`), so the next GET of this worker reads
    no event rows.

    Returns ``{"session_id", "last_seq", "results": [{event_id, seq, status, revision?}],
    "new_tool_outputs": [handles of the tool results created by this batch]}``.

    Raises:
        SessionNotFound: no such session (404).
        EventConflict: an event_id reused with a different body (409).
        InvalidEvent: a tool_result whose call_id names no earlier tool call of the session,
            a second result for one call, or a reused call id; a hypothesis whose
            ``depends_on`` names a seq that is not an earlier event of the session (422).
        PayloadTooLarge: a new event's payload over ``max_payload_bytes`` (413).
    """
    row = require_session_row(db, session_id, lock=True)
    existing = repo.existing_events(db, session_id, [e["event_id"] for e in events])
    # only this batch's call ids: declared or answered earlier in the session (O(batch))
    batch_ids = [c["call_id"] for e in events if e["kind"] == "message" for c in e.get("tool_calls") or []]
    batch_ids += [e["call_id"] for e in events if e["kind"] == "tool_result"]
    known = repo.tool_calls(db, session_id, batch_ids)
    calls = set(known)
    answered = {call_id for call_id, result_seq in known.items() if result_seq is not None}
    new_calls: dict[str, list[Any]] = {}  # call id -> [call seq, result seq | None], inserted at the end
    answers: list[tuple[str, int]] = []  # (call id declared in an earlier batch, result seq)
    new_outputs: list[str] = []  # handles of the tool outputs this batch stored
    texts: list[tuple[int, str, str]] = []  # (seq, field, text) to index for search (issue 14 item 3)
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    appended: dict[str, int] = {}  # events created by kind, and the kinds of secrets redacted: counted
    redacted: list[str] = []       # in the metrics once the batch is committed (never a rolled-back one)
    results: list[dict[str, Any]] = []
    stored: list[EventRow] = []  # this session's new event rows, in seq order
    rendered_texts: dict[str, str] = {}  # the new tool results' texts by the handle they render
    seq = row.last_seq
    plans: int | None = None  # plan versions stored so far (read once, at the batch's first plan)
    inference = Inference(db, row, shell_states)  # bindings inferred from declared shell tools' commands (issue 11)
    client_wrote = False  # the batch posted artifact writes since its previous tool result
    payloads: dict[str, bytes] = {}  # the batch's payloads by handle, stored together at the end
    added_bytes = 0  # what the batch adds to the session's stored_bytes (its payloads, as if not deduplicated)

    def payload(data: bytes) -> str:
        handle = repo.sha256_hex(data)
        payloads[handle] = data
        return handle
    for index, event in enumerate(events):
        event_id, kind = event["event_id"], event["kind"]
        digest = _fingerprint(_canonical_event(event))
        where = {"index": index, "event_id": event_id}
        if event_id in existing or event_id in seen:
            prior_digest, prior = (existing[event_id].body_sha256, {"seq": existing[event_id].seq, "revision": existing[event_id].body.get("revision")}) \
                if event_id in existing else seen[event_id]
            # an event stored before the canonical form was its fingerprint carries the legacy one
            if prior_digest != digest and (event_id not in existing or prior_digest != _fingerprint(_legacy_form(event))):
                raise EventConflict(f"event_id {event_id!r} was already used with a different body", **where)
            results.append({"event_id": event_id, "seq": prior["seq"], "status": "duplicate",
                            "revision": prior.get("revision") if kind == "artifact_write" else None})
            continue
        body = {k: v for k, v in event.items() if k not in ("event_id", "kind")}
        revision = None
        rendered: str | None = None  # a tool result's text as requests render it (its redacted view)
        if kind == "message":
            reused = [c["call_id"] for c in body.get("tool_calls") or [] if c["call_id"] in calls]
            if reused:
                raise InvalidEvent(f"event {index} ({event_id!r}): tool call id(s) {reused} already used in this session", **where)
            canonical = {"role": body["role"], "content": body.get("content", ""), "reasoning": body.get("reasoning"),
                         "tool_calls": body.get("tool_calls") or []}
            if body.get("thinking"):  # kept behind the handle too (absent otherwise: earlier handles unchanged)
                body["thinking"] = canonical["thinking"] = [{k: v for k, v in b.items() if v is not None}
                                                            for b in body["thinking"]]
            data = _checked_payload(canonical_json(canonical).encode("utf-8"), max_payload_bytes, field="message",
                                    **where)
            body["handle"] = payload(data)
            added_bytes += len(data)
            if redact and (kinds := redaction.redact_event(body)):
                body["redactions"] = list(kinds)
                redacted += kinds
            for call in body.get("tool_calls") or []:
                calls.add(call["call_id"])
                new_calls[call["call_id"]] = [seq + 1, None]
            inference.message(body)
        elif kind == "tool_result":
            call_id = body["call_id"]
            if call_id not in calls:
                raise InvalidEvent(f"event {index} ({event_id!r}): call_id {call_id!r} names no earlier tool call of this session", call_id=call_id, **where)
            if call_id in answered:
                raise InvalidEvent(f"event {index} ({event_id!r}): call_id {call_id!r} already has a result", call_id=call_id, **where)
            answered.add(call_id)
            inferred = inference.result(body, body["payload"], described=client_wrote)
            writes = inferred[1] if inferred is not None else []
            result_seq = seq + len(writes) + 1
            for j, write in enumerate(writes):
                # the call's writes, right before its result (as app/adapters/miniswe.py places them)
                seq += 1
                write["revision"] = repo.bump_artifact(db, session_id, write["artifact"], write.get("content_hash"))
                write["inferred_from"] = call_id
                write_id = f"infer:{result_seq}:{j}"
                stored.append(repo.append_event(
                    db, session_id=session_id, seq=seq, event_id=write_id, kind="artifact_write", body=write,
                    body_sha256=_fingerprint({"event_id": write_id, "kind": "artifact_write", **write})))
                texts.extend((seq, field, text) for field, text in searchable_texts("artifact_write", write))
                appended["artifact_write"] = appended.get("artifact_write", 0) + 1
            if call_id in new_calls:
                new_calls[call_id][1] = seq + 1
            else:
                answers.append((call_id, seq + 1))
            data = _checked_payload(body.pop("payload").encode("utf-8"), max_payload_bytes, field="payload", **where)
            body["handle"] = payload(data)
            added_bytes += len(data)
            done = redaction.redact_payload(data.decode("utf-8")) if redact else None
            rendered = done.text if done is not None and done.changed else data.decode("utf-8")
            if done is not None:
                redacted += done.kinds
            if done is not None and done.changed:
                body["view"] = payload(done.text.encode("utf-8"))
                body["redactions"] = list(done.kinds)
            new_outputs.append(body.get("view") or body["handle"])  # the text that is rendered is counted
            _bind_reads(db, session_id, body, where)
            client_wrote = False
        elif kind == "artifact_write":
            revision = repo.bump_artifact(db, session_id, body["artifact"], body.get("content_hash"))
            body["revision"] = revision
            client_wrote = True
        elif kind in ("plan", "document", "conclusion"):
            # issue 16: the text is kept whole behind a handle too (the record and the
            # manifest name it when the text leaves the request)
            data = _checked_payload(body["text"].encode("utf-8"), max_payload_bytes, field="text", **where)
            body["handle"] = payload(data)
            added_bytes += len(data)
            done = redaction.redact_payload(body["text"]) if redact else None
            if done is not None:
                redacted += done.kinds
            if done is not None and done.changed:  # as a message: redacted in requests, whole behind the handle
                body["text"] = done.text
                body["redactions"] = list(done.kinds)
            if kind == "plan":
                plans = repo.plan_versions(db, session_id) if plans is None else plans
                plans += 1
                body["version"] = plans
            elif kind == "conclusion":
                if row.parent_id is None:
                    raise InvalidEvent(f"event {index} ({event_id!r}): a conclusion is posted to a child session "
                                       "(POST /v1/sessions/{id}/children); this session has no parent", **where)
                body["parent_seq"] = _return_conclusion(db, row.parent_id, child=session_id, child_seq=seq + 1,
                                                        text=body["text"], data=data)
                appended["child_conclusion"] = appended.get("child_conclusion", 0) + 1
        elif kind == "hypothesis":
            # seqs are dense (1..last_seq), so an existing earlier event is 1 <= s <= seq
            unknown = sorted({s for s in body.get("depends_on") or [] if not 1 <= s <= seq})
            if unknown:
                raise InvalidEvent(f"event {index} ({event_id!r}): depends_on {unknown} names no earlier event of this "
                                   f"session (earlier seqs are 1..{seq})", depends_on=unknown, **where)
        seq += 1
        stored.append(repo.append_event(db, session_id=session_id, seq=seq, event_id=event_id, kind=kind, body=body,
                                        body_sha256=digest))
        if rendered is not None:
            rendered_texts[repo.text_handle(body)] = rendered
        texts.extend((seq, field, text) for field, text in searchable_texts(kind, body, rendered))
        seen[event_id] = (digest, {"seq": seq, "revision": revision})
        results.append({"event_id": event_id, "seq": seq, "status": "created", "revision": revision})
        appended[kind] = appended.get(kind, 0) + 1
    inference.finish(seq)
    repo.add_tool_calls(db, session_id, [(call_id, c, r) for call_id, (c, r) in new_calls.items()])
    repo.answer_tool_calls(db, session_id, answers)
    own_payloads(db, payloads, session_id=session_id, tenant_id=row.tenant_id)
    if added_bytes:
        row.stored_bytes = (row.stored_bytes or 0) + added_bytes
    row.last_seq = seq
    db.flush()
    search_store.add_event_texts(db, session_id, texts)
    if appended or redacted:
        after_commit(db, lambda: _count_ingested(appended, redacted))
    if memo is not None and stored:
        committed = repo.appended_events(stored, rendered_texts)

        def remember() -> None:
            memo.extend(session_id, committed)
        after_commit(db, remember)
    return {"session_id": session_id, "last_seq": seq, "results": results, "new_tool_outputs": new_outputs}


def _return_conclusion(db: OrmSession, parent_id: str, *, child: str, child_seq: int, text: str, data: bytes) -> int:
    """Append a child's conclusion to its parent session (issue 16 item 2): one
    ``child_conclusion`` event {child, child_seq, text, handle}, the text stored behind a
    handle owned by the parent (its tenant: a child is always its parent's tenant's). The
    parent's row is locked after the child's (a parent never locks a child: no cycle).
    Returns the parent's new seq. Raises SessionNotFound if the parent is gone (cannot
    happen while deleting a parent with children is refused)."""
    parent = require_session_row(db, parent_id, lock=True)
    seq = parent.last_seq + 1
    handle = own_payload(db, data, session_id=parent.id, tenant_id=parent.tenant_id)
    parent.stored_bytes = (parent.stored_bytes or 0) + len(data)
    body = {"child": child, "child_seq": child_seq, "text": text, "handle": handle}
    event_id = f"child:{child}:{child_seq}"  # the server's; unique per child event, within 200 chars
    repo.append_event(db, session_id=parent.id, seq=seq, event_id=event_id, kind="child_conclusion", body=body,
                      body_sha256=_fingerprint(body))
    search_store.add_event_texts(db, parent.id, [(seq, f, t) for f, t in searchable_texts("child_conclusion", body)])
    parent.last_seq = seq
    return seq


#: The metadata keys that govern how a session's events are ingested and served
#: (``shell_tools``: inferred bindings, app/adapters/shell_tools.py; ``invalidation``:
#: tombstone or notice, app/domain/planner.py): a child takes the parent's unless its create
#: body gives the key.
INHERITED_METADATA = ("shell_tools", "invalidation")


def create_child(db: OrmSession, profiles: ProfileRegistry, parent_id: str, *, goal: str, system: str | None,
                 tools: list[dict[str, Any]] | None, metadata: dict[str, Any], meters: MeterRegistry | None = None,
                 profile: str | None = None, model: str | None = None) -> str:
    """Create a child session of ``parent_id`` for a sub-agent (issue 16 item 2; seed 001
    "Sub-agents as context isolation"): the parent's tenant, the parent's constraints
    verbatim (ids, texts and ``contract_version``) with ``goal`` as the child's goal; the
    parent's system text, tools, profile and model unless given, and the parent's
    :data:`INHERITED_METADATA` keys under the keys ``metadata`` gives (other keys of the
    parent's metadata are its own). Returns the child's id.

    Raises:
        SessionNotFound: no such parent (404; the caller checked the tenant).
        UnknownProfile, ControlTokenInText: as :func:`create_session` (422).
    """
    parent = require_session_row(db, parent_id)
    contract = {"goal": goal, "constraints": list((parent.contract or {}).get("constraints") or []),
                "contract_version": int((parent.contract or {}).get("contract_version") or 1)}
    child = create_session(db, profiles, profile=profile or parent.profile, contract=contract,
                           system=parent.system if system is None else system,
                           tools=list(parent.tools or []) if tools is None else tools,
                           metadata={**{k: v for k, v in (parent.meta or {}).items() if k in INHERITED_METADATA},
                                     **metadata},
                           meters=meters, model=model if model is not None else parent.model,
                           tenant_id=parent.tenant_id, parent_id=parent.id)
    return child


def _count_ingested(appended: dict[str, int], redacted: Sequence[str]) -> None:
    for kind, n in appended.items():
        metrics.EVENTS_APPENDED.labels(kind).inc(n)
    redaction.count_redactions(redacted)


def _bind_reads(db: OrmSession, session_id: str, body: dict[str, Any], where: dict[str, Any]) -> None:
    """Give a tool result's binding and each ``conditions["reads"]`` entry the server's
    revision (:func:`app.domain.invalidation.resolve_read`): the current one when omitted;
    a whole read's content hash contradicting the one recorded for the current revision
    bumps the artifact (an external change; a range's hash is never compared);
    an ``external`` binding without ``fetched_at`` gets the event's time (epoch seconds).
    Raises InvalidEvent (422) for a revision from the future, and for a ``reads`` entry
    (free-form conditions) whose artifact, revision or content hash the binding's schema
    would refuse."""
    reads = (body.get("conditions") or {}).get("reads")
    entries = [body["binding"]] if body.get("binding") else []
    entries += [r for r in reads if isinstance(r, dict) and isinstance(r.get("artifact"), str)] \
        if isinstance(reads, list) else []
    for entry in entries:
        if entry.get("kind") == UNKNOWN_KIND:
            entry["revision"] = 0
            continue
        artifact = entry["artifact"]
        if not 1 <= len(artifact) <= 1024 or "\x00" in artifact:  # kept as SQL text with its revision
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): a read's artifact must be 1 to 1024 "
                               "characters without NUL", **where)
        revision = entry.get("revision")
        if revision is not None and (not isinstance(revision, int) or isinstance(revision, bool) or revision < 0):
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): a read's revision must be an "
                               f"integer >= 0, got {revision!r}", **where)
        content_hash = entry.get("content_hash")
        if content_hash is not None and (not isinstance(content_hash, str) or not 1 <= len(content_hash) <= 256
                                         or "\x00" in content_hash):
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): a read's content_hash must be a "
                               "string of 1 to 256 characters without NUL", **where)
        current, recorded = repo.artifact_state(db, session_id, artifact)
        try:
            resolved = resolve_read(artifact, current, recorded, revision=revision, content_hash=content_hash,
                                    range=entry["range"] if isinstance(entry.get("range"), str) else None)
        except InvalidEvent as exc:
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): {exc}", **where,
                               **exc.extra) from None
        if resolved.external:
            repo.bump_artifact(db, session_id, artifact, resolved.known_hash)
            entry["external_change"] = True
        elif resolved.known_hash is not None and resolved.known_hash != recorded:
            repo.record_artifact_hash(db, session_id, artifact, resolved.known_hash)
        entry["revision"] = resolved.revision
        if entry.get("kind") == EXTERNAL_KIND and entry.get("fetched_at") is None:
            entry["fetched_at"] = utcnow().timestamp()
        elif isinstance(entry.get("fetched_at"), str):
            entry["fetched_at"] = datetime.fromisoformat(entry["fetched_at"]).timestamp()


_COUNTING = threading.Lock()  # one background count at a time per process: it is CPU work of low priority


def count_payload_tokens(uow: Callable[[], AbstractContextManager[OrmSession]], profiles: ProfileRegistry, meters: Any,
                         session_id: str, handles: Sequence[str]) -> tuple[str, dict[str, int]]:
    """Count the tokens of payloads ``handles`` of a session with its profile's tokenizer and
    store each count beside its payload (``payloads.token_counts``), once per payload and
    tokenizer (issue 9, item 7). Run after the POST that stored them (a background task):
    counting a 2 MB output takes seconds, so it happens in no request. Two short
    transactions (read, then write); none is open while tokenizing.

    Returns (the tokenizer id, every count of ``handles``: handle -> tokens, stored before
    or computed now). Payloads already counted are not counted again; unknown handles and
    a session that is gone are skipped. Raises TokenizerUnavailable when the profile's
    tokenizer cannot be loaded."""
    if not handles:
        return "", {}
    with uow() as db:
        row = repo.get_session_row(db, session_id)
        if row is None:
            return "", {}
        meter = meters.get(profiles.get(row.profile))
        tokenizer_id = str(meter.tokenizer_id)
        stored = repo.payload_token_counts(db, handles, tokenizer_id)
        texts = repo.get_payload_texts(db, [h for h, n in stored.items() if n is None])
    counts: dict[str, int] = {}
    with _COUNTING:
        for handle, text in texts.items():
            counts[handle] = int(meter.count_text(text))
    if counts:
        with uow() as db:
            repo.store_token_counts(db, tokenizer_id, counts)
    return tokenizer_id, {h: n for h, n in stored.items() if n is not None} | counts


def read_handle(db: OrmSession, handle: str, *, offset: int | None = None, length: int | None = None,
                lines: str | None = None) -> tuple[str, bytes, int]:
    """The raw payload behind ``handle`` (sha256 hex or an unambiguous prefix of >= 8 hex
    chars), whole or sliced: ``offset``/``length`` in bytes, or ``lines`` "a:b" (1-based,
    inclusive; lines end at ``"\\n"`` only, as ``sed -n 'a,bp'`` and ``grep -n`` count them:
    ``\\r`` progress bars and form feeds stay inside their line). Returns (full handle,
    bytes, total size in bytes).

    Raises:
        HandleNotFound: unknown handle (404). InvalidRange: a slice outside the payload or
        malformed (416). InvalidEvent is not raised here.
    """
    from app.domain.errors import HandleNotFound, InvalidRange

    h = handle.lower()
    if not (8 <= len(h) <= 64) or any(c not in "0123456789abcdef" for c in h):
        raise HandleNotFound(f"{handle!r} is not a handle (8 to 64 hex chars of a payload's sha256)", handle=handle)
    try:
        found = repo.get_payload(db, h)
    except LookupError:
        raise HandleNotFound(f"handle prefix {handle!r} is ambiguous; give more characters", handle=handle) from None
    if found is None:
        raise HandleNotFound(f"no payload with handle {handle!r}", handle=handle)
    full, data = found
    size = len(data)
    if lines is not None:
        if offset is not None or length is not None:
            raise InvalidRange("give either lines or offset/length, not both")
        try:
            a_text, b_text = lines.split(":", 1)
            a, b = int(a_text), int(b_text)
        except ValueError:
            raise InvalidRange(f"lines must be 'a:b' (1-based, inclusive), got {lines!r}") from None
        all_lines = split_lines(data)
        if a < 1 or b < a:
            raise InvalidRange(f"lines {lines!r}: need 1 <= a <= b (1-based, inclusive)", lines=len(all_lines))
        if a > max(len(all_lines), 1):
            raise InvalidRange(f"lines {lines!r} start past the last line ({len(all_lines)})", lines=len(all_lines))
        # b past the end is clamped to the last line (like sed -n 'a,bp')
        return full, b"".join(all_lines[a - 1:b]), size
    if offset is not None or length is not None:
        start = offset or 0
        if start < 0 or (length is not None and length < 0) or start > size:
            raise InvalidRange(f"offset {start} / length {length} outside the payload's {size} bytes", size=size)
        end = size if length is None else min(size, start + length)
        return full, data[start:end], size
    return full, data, size
