"""The POST path's plan: what a batch of posted events appends to a
session, as a pure function of the session state the batch needs (:class:`IngestState`,
read once by app/services/sessions.py) and the batch (:class:`PostedEvent`, validated by
the API's schemas). :func:`plan_ingest` returns an :class:`IngestPlan`: the event rows to
append in seq order, the per-event results, the artifacts' new revisions, the payloads,
tool calls and search texts, or raises a domain error; the caller writes it in one go.

Rules (README "Events"): a repeated ``event_id`` with the same body is a duplicate that
returns the original seq, with another body a conflict; payloads are content-addressed
(their sha256 is their handle) and bounded; secrets are redacted in what enters requests
(``find_secrets``; the raw bytes stay whole behind the handle); a tool result answers an
earlier, unanswered call; its binding and ``conditions["reads"]`` get the server's
revisions (:func:`app.domain.invalidation.resolve_read`); a declared shell tool's call may
have its writes and reads inferred (:class:`ShellInference`, placed right before the
result); a plan gets the next version; a conclusion of a child session is returned to its
parent (one ``child_conclusion`` event there).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from app.domain.errors import EventConflict, InvalidEvent, PayloadTooLarge
from app.domain.invalidation import EXTERNAL_KIND, UNKNOWN_KIND, resolve_read
from app.domain.layout import canonical_json
from app.domain.recall import searchable_texts
from app.domain.redaction import Finder, redact_json_text, redact_text


@dataclass(frozen=True)
class PostedEvent:
    """An event as the API's schema validated it: its id, its kind and its other fields
    (JSON values, in the schema's order; unset optional fields are None)."""

    event_id: str
    kind: str
    fields: Mapping[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PostedEvent:
        """From the schema's JSON dump (``{"event_id", "kind", ...}``)."""
        return cls(str(data["event_id"]), str(data["kind"]),
                   {k: v for k, v in data.items() if k not in ("event_id", "kind")})

    def as_json(self) -> dict[str, Any]:
        """The event as posted (what its idempotency fingerprint is taken of)."""
        return {"event_id": self.event_id, "kind": self.kind, **self.fields}

    def call_ids(self) -> list[str]:
        """The tool call ids it names: a message's calls, or the call a tool result answers."""
        if self.kind == "message":
            return [c["call_id"] for c in self.fields.get("tool_calls") or []]
        return [self.fields["call_id"]] if self.kind == "tool_result" else []


@dataclass(frozen=True)
class StoredEvent:
    """An event of the session already stored under an id the batch posts again."""

    body_sha256: str
    seq: int
    revision: int | None = None


@dataclass(frozen=True)
class IngestState:
    """What a batch needs of its session, read at once under the session's row lock."""

    session_id: str
    last_seq: int
    parent_id: str | None = None
    #: the parent's last seq (locked) when the batch brings a new conclusion
    parent_last_seq: int | None = None
    #: the stored events of the batch's event ids
    existing: Mapping[str, StoredEvent] = field(default_factory=dict)
    #: of the batch's call ids, those declared earlier: call id -> the seq of its result, or None
    calls: Mapping[str, int | None] = field(default_factory=dict)
    #: the session's artifacts: (current revision, content hash known for it or None)
    artifacts: Mapping[str, tuple[int, str | None]] = field(default_factory=dict)
    #: plan versions stored so far (None when the batch brings no new plan)
    plan_versions: int | None = None


class ShellInference(Protocol):
    """The bindings inferred from a declared shell tool's commands (app/services/shell_inference.py)."""

    def message(self, body: Mapping[str, Any]) -> None:
        """Run the shell calls of a new message event (its stored body)."""

    def result(self, body: dict[str, Any], payload: str, *, described: bool,
               revision_of: Callable[[str], int]) -> list[dict[str, Any]] | None:
        """For a new tool result (its body before its binding is resolved, ``payload`` its
        raw text; ``revision_of``: an artifact's current revision): None when nothing is
        inferred, else the bodies of the ``artifact_write`` events to append before it
        (``{"artifact", "content_hash"?}``); the body gets the inferred binding and reads."""


@dataclass(frozen=True)
class NewEvent:
    """An event row to append (to the batch's session, or a conclusion's to its parent)."""

    session_id: str
    seq: int
    event_id: str
    kind: str
    body: dict[str, Any]
    body_sha256: str


@dataclass(frozen=True)
class EventOutcome:
    """One posted event's answer."""

    event_id: str
    seq: int
    status: str  # "created" | "duplicate"
    revision: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "seq": self.seq, "status": self.status, "revision": self.revision}


@dataclass(frozen=True)
class ParentConclusion:
    """A child's conclusion returned to its parent: the parent's new last seq and the
    payload (its text) the parent owns."""

    parent_id: str
    last_seq: int
    handle: str
    data: bytes = field(repr=False)
    texts: tuple[tuple[int, str, str], ...] = ()


@dataclass
class IngestPlan:
    """What :func:`plan_ingest` decided; written by app/store/ingest.py ``save_ingest``."""

    session_id: str
    last_seq: int
    #: event rows to append, in the order they are added (the session's in seq order)
    events: list[NewEvent] = field(default_factory=list)
    results: list[EventOutcome] = field(default_factory=list)
    #: artifacts changed by the batch: their new (revision, content hash or None)
    artifacts: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    #: the batch's payloads by handle, owned by the session
    payloads: dict[str, bytes] = field(default_factory=dict)
    #: what the batch adds to the session's stored bytes (its payloads, as if not deduplicated)
    added_bytes: int = 0
    #: new tool calls: (call id, call seq, result seq or None)
    new_calls: list[tuple[str, int, int | None]] = field(default_factory=list)
    #: results of calls declared in an earlier batch: (call id, result seq)
    answers: list[tuple[str, int]] = field(default_factory=list)
    #: (seq, field, text) to index for search
    texts: list[tuple[int, str, str]] = field(default_factory=list)
    #: handles of the tool outputs the batch stored (the text requests render)
    new_outputs: list[str] = field(default_factory=list)
    #: the new tool results' texts by the handle they render
    rendered_texts: dict[str, str] = field(default_factory=dict)
    #: events created by kind, and the kinds of secrets redacted (metrics, once committed)
    appended: dict[str, int] = field(default_factory=dict)
    redacted: list[str] = field(default_factory=list)
    parents: list[ParentConclusion] = field(default_factory=list)

    def session_events(self) -> list[NewEvent]:
        """The rows appended to the batch's own session, in seq order."""
        return [e for e in self.events if e.session_id == self.session_id]


def fingerprint(event: Mapping[str, Any]) -> str:
    """The sha256 of an event's canonical JSON."""
    return hashlib.sha256(canonical_json(event).encode("utf-8")).hexdigest()


# Optional fields added to the event schema after events were first stored:
# the fingerprints stored before them were taken without them.
_ADDED_LATER: dict[str, tuple[str, ...]] = {"binding": ("ttl_seconds", "fetched_at")}


def canonical_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """What an event's idempotency fingerprint is taken of: the event with its unset
    (None-valued) optional fields dropped, at the event's level and its binding's, so that
    an omitted optional field and an explicit null are the same event and an optional
    field added to the schema later does not change the form of events that do not use
    it. Free-form objects (``conditions``, tool-call arguments) are kept as sent."""
    out = {k: v for k, v in event.items() if v is not None}
    if isinstance(out.get("binding"), dict):
        out["binding"] = {k: v for k, v in out["binding"].items() if v is not None}
    return out


def legacy_form(event: Mapping[str, Any]) -> dict[str, Any]:
    """The form fingerprinted before :func:`canonical_event` (events stored then): every
    field of the validated event, None included, except the optional fields added since
    when unset."""
    out = dict(event)
    for key, added in _ADDED_LATER.items():
        nested = out.get(key)
        if isinstance(nested, dict):
            out[key] = {k: v for k, v in nested.items() if not (k in added and v is None)}
    return out


def redact_message(body: dict[str, Any], find: Finder) -> tuple[str, ...]:
    """Redact, in place, the message fields of an event body that enter requests (content,
    reasoning, each tool call's arguments); returns the kinds redacted (empty: unchanged)."""
    kinds: list[str] = []
    for name in ("content", "reasoning"):
        value = body.get(name)
        if isinstance(value, str) and value:
            done = redact_text(value, find)
            if done.changed:
                body[name] = done.text
                kinds += done.kinds
    for call in body.get("tool_calls") or []:
        arguments = call.get("arguments")
        if isinstance(arguments, str) and arguments:
            done = redact_json_text(arguments, find)
            if done.changed:
                call["arguments"] = done.text
                kinds += done.kinds
    return tuple(kinds)


@dataclass
class _Batch:
    """The working state of one :func:`plan_ingest`."""

    state: IngestState
    plan: IngestPlan
    infer: ShellInference | None
    find: Finder | None
    now: Callable[[], float]
    max_payload_bytes: int | None
    seq: int
    calls: set[str]
    answered: set[str]
    new_calls: dict[str, list[Any]] = field(default_factory=dict)  # call id -> [call seq, result seq | None]
    seen: dict[str, tuple[str, int, int | None]] = field(default_factory=dict)  # id -> (digest, seq, revision)
    artifacts: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    plans: int | None = None
    parent_seq: int | None = None
    client_wrote: bool = False  # the batch posted artifact writes since its previous tool result

    def payload(self, data: bytes) -> str:
        handle = hashlib.sha256(data).hexdigest()
        self.plan.payloads[handle] = data
        return handle

    def checked(self, data: bytes, where: Mapping[str, Any], name: str) -> bytes:
        """``data`` if within the payload limit; else PayloadTooLarge naming the event."""
        limit = self.max_payload_bytes
        if limit is not None and len(data) > limit:
            raise PayloadTooLarge(f"event {where['index']} ({where['event_id']!r}): {name} of {len(data):,} bytes "
                                  f"exceeds the limit of {limit:,} bytes (setting CTXD_MAX_PAYLOAD_BYTES)",
                                  **where, field=name, size_bytes=len(data), max_bytes=limit)
        return data

    def artifact(self, name: str) -> tuple[int, str | None]:
        return self.artifacts.get(name) or self.state.artifacts.get(name) or (0, None)

    def bump(self, name: str, content_hash: str | None) -> int:
        """The artifact's next revision, with the hash known for it (None: unknown)."""
        revision = self.artifact(name)[0] + 1
        self.artifacts[name] = (revision, content_hash)
        return revision

    def count(self, kind: str) -> None:
        self.plan.appended[kind] = self.plan.appended.get(kind, 0) + 1


def plan_ingest(state: IngestState, events: Sequence[PostedEvent], *, infer: ShellInference | None = None,
                find_secrets: Finder | None = None, now: Callable[[], float] = lambda: datetime.now().timestamp(),
                max_payload_bytes: int | None = None) -> IngestPlan:
    """The plan of appending ``events`` to the session ``state`` describes (module
    docstring). ``infer``: the session's shell inference (None: none declared);
    ``find_secrets``: the secret finder redaction uses (None: no redaction); ``now``: the
    time an ``external`` binding without ``fetched_at`` gets (epoch seconds);
    ``max_payload_bytes`` bounds each new payload.

    Raises:
        EventConflict: an event_id reused with a different body (409).
        InvalidEvent: a tool_result whose call_id names no earlier tool call of the session,
            a second result for one call, or a reused call id; a hypothesis whose
            ``depends_on`` names a seq that is not an earlier event of the session; a
            conclusion posted to a session without a parent; a read the binding's rules
            refuse (422).
        PayloadTooLarge: a new event's payload over ``max_payload_bytes`` (413).
    """
    batch = _Batch(state=state, plan=IngestPlan(state.session_id, state.last_seq), infer=infer, find=find_secrets,
                   now=now, max_payload_bytes=max_payload_bytes, seq=state.last_seq, calls=set(state.calls),
                   answered={c for c, result_seq in state.calls.items() if result_seq is not None},
                   plans=state.plan_versions, parent_seq=state.parent_last_seq)
    for index, event in enumerate(events):
        _plan_event(batch, index, event)
    plan = batch.plan
    plan.last_seq = batch.seq
    plan.new_calls = [(call_id, c, r) for call_id, (c, r) in batch.new_calls.items()]
    plan.artifacts = batch.artifacts
    return plan


def _plan_event(batch: _Batch, index: int, event: PostedEvent) -> None:
    """One posted event: a duplicate's answer, or the rows it appends."""
    event_id, kind = event.event_id, event.kind
    posted = event.as_json()
    digest = fingerprint(canonical_event(posted))
    where = {"index": index, "event_id": event_id}
    existing = batch.state.existing.get(event_id)
    if existing is not None or event_id in batch.seen:
        prior_digest, prior_seq, prior_revision = (existing.body_sha256, existing.seq, existing.revision) \
            if existing is not None else batch.seen[event_id]
        # an event stored before the canonical form was its fingerprint carries the legacy one
        if prior_digest != digest and (existing is None or prior_digest != fingerprint(legacy_form(posted))):
            raise EventConflict(f"event_id {event_id!r} was already used with a different body", **where)
        batch.plan.results.append(EventOutcome(event_id, prior_seq, "duplicate",
                                               prior_revision if kind == "artifact_write" else None))
        return
    body = copy.deepcopy(dict(event.fields))
    revision = None
    rendered: str | None = None  # a tool result's text as requests render it (its redacted view)
    if kind == "message":
        _message(batch, body, where)
    elif kind == "tool_result":
        rendered = _tool_result(batch, body, where)
    elif kind == "artifact_write":
        revision = body["revision"] = batch.bump(body["artifact"], body.get("content_hash"))
        batch.client_wrote = True
    elif kind in ("plan", "document", "conclusion"):
        _text_event(batch, kind, body, where)
    elif kind == "hypothesis":
        # seqs are dense (1..last_seq), so an existing earlier event is 1 <= s <= seq
        unknown = sorted({s for s in body.get("depends_on") or [] if not 1 <= s <= batch.seq})
        if unknown:
            raise InvalidEvent(f"event {index} ({event_id!r}): depends_on {unknown} names no earlier event of this "
                               f"session (earlier seqs are 1..{batch.seq})", depends_on=unknown, **where)
    batch.seq += 1
    seq = batch.seq
    plan = batch.plan
    plan.events.append(NewEvent(plan.session_id, seq, event_id, kind, body, digest))
    if rendered is not None:
        plan.rendered_texts[body.get("view") or body["handle"]] = rendered
    plan.texts.extend((seq, name, text) for name, text in searchable_texts(kind, body, rendered))
    batch.seen[event_id] = (digest, seq, revision)
    plan.results.append(EventOutcome(event_id, seq, "created", revision))
    batch.count(kind)


def _message(batch: _Batch, body: dict[str, Any], where: Mapping[str, Any]) -> None:
    """A new message: its canonical JSON behind a handle, redacted, its tool calls declared."""
    reused = [c["call_id"] for c in body.get("tool_calls") or [] if c["call_id"] in batch.calls]
    if reused:
        raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): tool call id(s) {reused} already used "
                           "in this session", **where)
    canonical = {"role": body["role"], "content": body.get("content", ""), "reasoning": body.get("reasoning"),
                 "tool_calls": body.get("tool_calls") or []}
    if body.get("thinking"):  # kept behind the handle too (absent otherwise: earlier handles unchanged)
        body["thinking"] = canonical["thinking"] = [{k: v for k, v in b.items() if v is not None}
                                                    for b in body["thinking"]]
    data = batch.checked(canonical_json(canonical).encode("utf-8"), where, "message")
    body["handle"] = batch.payload(data)
    batch.plan.added_bytes += len(data)
    if batch.find is not None and (kinds := redact_message(body, batch.find)):
        body["redactions"] = list(kinds)
        batch.plan.redacted += kinds
    for call in body.get("tool_calls") or []:
        batch.calls.add(call["call_id"])
        batch.new_calls[call["call_id"]] = [batch.seq + 1, None]
    if batch.infer is not None:
        batch.infer.message(body)


def _tool_result(batch: _Batch, body: dict[str, Any], where: Mapping[str, Any]) -> str:
    """A new tool result: the answer of its call (after the writes inferred for it), its
    payload (and redacted view) behind handles, its reads bound. Returns the text rendered."""
    index, event_id = where["index"], where["event_id"]
    call_id = body["call_id"]
    if call_id not in batch.calls:
        raise InvalidEvent(f"event {index} ({event_id!r}): call_id {call_id!r} names no earlier tool call of this "
                           "session", call_id=call_id, **where)
    if call_id in batch.answered:
        raise InvalidEvent(f"event {index} ({event_id!r}): call_id {call_id!r} already has a result",
                           call_id=call_id, **where)
    batch.answered.add(call_id)
    inferred = batch.infer.result(body, body["payload"], described=batch.client_wrote,
                                  revision_of=lambda artifact: batch.artifact(artifact)[0]) \
        if batch.infer is not None else None
    _inferred_writes(batch, call_id, inferred or [])
    if call_id in batch.new_calls:
        batch.new_calls[call_id][1] = batch.seq + 1
    else:
        batch.plan.answers.append((call_id, batch.seq + 1))
    data = batch.checked(body.pop("payload").encode("utf-8"), where, "payload")
    body["handle"] = batch.payload(data)
    batch.plan.added_bytes += len(data)
    text = data.decode("utf-8")
    done = redact_text(text, batch.find) if batch.find is not None else None
    rendered = done.text if done is not None and done.changed else text
    if done is not None:
        batch.plan.redacted += done.kinds
    if done is not None and done.changed:
        body["view"] = batch.payload(done.text.encode("utf-8"))
        body["redactions"] = list(done.kinds)
    batch.plan.new_outputs.append(body.get("view") or body["handle"])  # the text that is rendered is counted
    _bind_reads(batch, body, where)
    batch.client_wrote = False
    return rendered


def _inferred_writes(batch: _Batch, call_id: str, writes: list[dict[str, Any]]) -> None:
    """The call's inferred writes, right before its result (as ctxd_tools/miniswe.py places them)."""
    result_seq = batch.seq + len(writes) + 1
    plan = batch.plan
    for j, write in enumerate(writes):
        batch.seq += 1
        write["revision"] = batch.bump(write["artifact"], write.get("content_hash"))
        write["inferred_from"] = call_id
        write_id = f"infer:{result_seq}:{j}"
        plan.events.append(NewEvent(plan.session_id, batch.seq, write_id, "artifact_write", write,
                                    fingerprint({"event_id": write_id, "kind": "artifact_write", **write})))
        plan.texts.extend((batch.seq, name, text) for name, text in searchable_texts("artifact_write", write))
        batch.count("artifact_write")


def _text_event(batch: _Batch, kind: str, body: dict[str, Any], where: Mapping[str, Any]) -> None:
    """A plan, document or conclusion: the text kept whole behind a handle too (the record
    and the manifest name it when the text leaves the request), redacted as a message's;
    a plan gets its version, a conclusion goes back to the parent."""
    data = batch.checked(body["text"].encode("utf-8"), where, "text")
    body["handle"] = batch.payload(data)
    batch.plan.added_bytes += len(data)
    done = redact_text(body["text"], batch.find) if batch.find is not None else None
    if done is not None:
        batch.plan.redacted += done.kinds
    if done is not None and done.changed:  # as a message: redacted in requests, whole behind the handle
        body["text"] = done.text
        body["redactions"] = list(done.kinds)
    if kind == "plan":
        batch.plans = (batch.plans or 0) + 1
        body["version"] = batch.plans
    elif kind == "conclusion":
        parent_id = batch.state.parent_id
        if parent_id is None or batch.parent_seq is None:
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): a conclusion is posted to a child "
                               "session (POST /v1/sessions/{id}/children); this session has no parent", **where)
        body["parent_seq"] = _return_conclusion(batch, parent_id, child_seq=batch.seq + 1, text=body["text"],
                                                data=data)
        batch.count("child_conclusion")


def _return_conclusion(batch: _Batch, parent_id: str, *, child_seq: int, text: str, data: bytes) -> int:
    """A child's conclusion for its parent: one ``child_conclusion`` event
    {child, child_seq, text, handle}, the text stored behind a handle the parent owns.
    Returns the parent's new seq."""
    assert batch.parent_seq is not None
    batch.parent_seq += 1
    seq = batch.parent_seq
    child = batch.state.session_id
    handle = hashlib.sha256(data).hexdigest()
    body = {"child": child, "child_seq": child_seq, "text": text, "handle": handle}
    event_id = f"child:{child}:{child_seq}"  # the server's; unique per child event, within 200 chars
    batch.plan.events.append(NewEvent(parent_id, seq, event_id, "child_conclusion", body, fingerprint(body)))
    texts = tuple((seq, name, t) for name, t in searchable_texts("child_conclusion", body))
    batch.plan.parents.append(ParentConclusion(parent_id, seq, handle, data, texts))
    return seq


def _bind_reads(batch: _Batch, body: dict[str, Any], where: Mapping[str, Any]) -> None:
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
        artifact, revision, content_hash = checked_read(entry, where)
        current, recorded = batch.artifact(artifact)
        try:
            resolved = resolve_read(artifact, current, recorded, revision=revision, content_hash=content_hash,
                                    range=entry["range"] if isinstance(entry.get("range"), str) else None)
        except InvalidEvent as exc:
            raise InvalidEvent(f"event {where['index']} ({where['event_id']!r}): {exc}", **where,
                               **exc.extra) from None
        if resolved.external:
            batch.bump(artifact, resolved.known_hash)
            entry["external_change"] = True
        elif resolved.known_hash is not None and resolved.known_hash != recorded:
            batch.artifacts[artifact] = (current, resolved.known_hash)
        entry["revision"] = resolved.revision
        if entry.get("kind") == EXTERNAL_KIND and entry.get("fetched_at") is None:
            entry["fetched_at"] = batch.now()
        elif isinstance(entry.get("fetched_at"), str):
            entry["fetched_at"] = datetime.fromisoformat(entry["fetched_at"]).timestamp()


def checked_read(entry: Mapping[str, Any], where: Mapping[str, Any]) -> tuple[str, int | None, str | None]:
    """(artifact, revision, content hash) of a binding or ``reads`` entry; InvalidEvent (422)
    for what the binding's schema would refuse (a ``reads`` entry is free-form: the API's
    schema checks a client's with this, the plan an inferred one)."""
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
    return artifact, revision, content_hash
