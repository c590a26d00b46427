"""Use cases on sessions and their event log (DESIGN.md section 3, POST path)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as OrmSession

from app.domain.errors import ControlTokenInText, SessionNotFound, UnknownProfile
from app.domain.ingest import IngestPlan, IngestState, PostedEvent, plan_ingest
from app.domain.tenancy import DEFAULT_TENANT
from app.domain.text import first_control_string, split_lines
from app.observability import metrics
from app.services import redaction
from app.services.memo import AssemblyMemo
from app.services.shell_inference import Inference, ShellStates
from app.store import repository as repo
from app.store.db import after_commit
from app.store.ingest import load_ingest_state, save_ingest
from app.store.tables import ArtifactRow, EventRow, SessionRow, iso_utc, utcnow
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
    repo.set_session_fields(require_session_row(db, session_id), title=title)
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


def ingest_events(db: OrmSession, session_id: str, events: Sequence[PostedEvent | Mapping[str, Any]], *,
                  max_payload_bytes: int | None = None, redact: bool = True,
                  shell_states: ShellStates | None = None, memo: AssemblyMemo | None = None) -> dict[str, Any]:
    """Append a batch of events in one transaction (all or nothing; the caller commits):
    LOAD what the batch needs of the session under its row lock (:func:`load_ingest`), PLAN
    purely (:func:`app.domain.ingest.plan_ingest`: the rules of idempotency, seqs, payloads,
    redaction, tool calls and bindings), SAVE the plan in one go
    (app/store/ingest.py ``save_ingest``).

    Each event is a :class:`~app.domain.ingest.PostedEvent` (or its JSON: the schema's
    dump, with ``event_id`` and ``kind``). ``max_payload_bytes`` bounds each new payload: a
    tool result's payload (UTF-8 bytes) and a message's canonical JSON (content, reasoning,
    tool calls).

    ``redact`` (issue 12 item 5, app/services/redaction.py): secrets are redacted once,
    here, in what enters requests: a message's content, reasoning and tool-call arguments
    (stored redacted in the event; arguments stay valid JSON) and a tool output (its
    redacted text stored as a payload of its own, ``view``); the event records the kinds
    (``redactions``), which the manifest item reports as a transform. The raw bytes stay
    whole behind the event's handle. Contract, system text and tools are never redacted.

    ``shell_states``: the process's shell inference states (``AppState.shell_states``,
    app/services/shell_inference.py); None: a batch that infers rebuilds its session's.

    ``memo``: the worker's assembly memo (``AppState.memo``): once the transaction has
    committed, the batch's new events are appended to the session's memoized events
    (:meth:`~app.services.memo.AssemblyMemo.extend`), so the next GET of this worker reads
    no event rows.

    Returns ``{"session_id", "last_seq", "results": [{event_id, seq, status, revision?}],
    "new_tool_outputs": [handles of the tool results created by this batch]}``.

    Raises:
        SessionNotFound: no such session (404).
        EventConflict, InvalidEvent, PayloadTooLarge: as :func:`app.domain.ingest.plan_ingest`
            (409, 422, 413).
    """
    posted = [e if isinstance(e, PostedEvent) else PostedEvent.from_json(e) for e in events]
    loaded = load_ingest(db, session_id, posted, shell_states)
    plan = plan_ingest(loaded.state, posted, infer=loaded.inference,
                       find_secrets=redaction.find_secrets if redact else None,
                       now=lambda: utcnow().timestamp(), max_payload_bytes=max_payload_bytes)
    stored = save_ingest(db, loaded.row, plan, parent=loaded.parent)
    _after_ingest_commit(db, loaded, plan, stored, memo)
    return {"session_id": session_id, "last_seq": plan.last_seq, "results": [r.as_json() for r in plan.results],
            "new_tool_outputs": plan.new_outputs}


@dataclass(frozen=True)
class LoadedIngest:
    """What one batch read: the session's row (locked), its parent's (locked when the batch
    brings a new conclusion), the state the plan needs, and the session's shell inference."""

    row: SessionRow
    state: IngestState
    parent: SessionRow | None = None
    inference: Inference | None = None


def load_ingest(db: OrmSession, session_id: str, events: Sequence[PostedEvent],
                shell_states: ShellStates | None = None) -> LoadedIngest:
    """LOAD of a batch: the session's row under its lock (the parent's after it, when a new
    conclusion comes: a parent never locks a child, so no cycle), then what the plan needs
    of the session (app/store/ingest.py ``load_ingest_state``) and its shell inference
    state. Raises SessionNotFound (404; the parent's cannot be gone while deleting a parent
    with children is refused)."""
    row = require_session_row(db, session_id, lock=True)
    state, parent = load_ingest_state(db, row, events,
                                      lock_parent=lambda parent_id: require_session_row(db, parent_id, lock=True))
    new = [e for e in events if e.event_id not in state.existing]
    return LoadedIngest(row=row, state=state, parent=parent, inference=Inference.load(db, row, new, shell_states))


def _after_ingest_commit(db: OrmSession, loaded: LoadedIngest, plan: IngestPlan, stored: Sequence[EventRow],
                         memo: AssemblyMemo | None) -> None:
    """Once the batch has committed (never for a rolled-back one): the shell inference
    state kept for the session's new last seq, the metrics of the events appended and the
    secrets redacted, and the new events appended to the worker's memo."""
    if loaded.inference is not None and (keep := loaded.inference.committed(plan.last_seq)) is not None:
        after_commit(db, keep)
    appended, redacted = plan.appended, plan.redacted
    if appended or redacted:
        after_commit(db, lambda: _count_ingested(appended, redacted))
    if memo is not None and stored:
        committed = repo.appended_events(stored, plan.rendered_texts)
        session_id = loaded.row.id

        def remember() -> None:
            memo.extend(session_id, committed)
        after_commit(db, remember)


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
