"""Use case: assemble the next model request (DESIGN.md section 3, GET path).

LOAD once (one short snapshot read: the session with its layout state, the events the
memo lacks, the previous request's prefix state), PLAN purely
(:func:`app.domain.planner.plan_request`: no database, no lock held while rendering and
counting), SAVE once (one short write: the layout state by compare-and-set on its
version, the prefix state, the manifest). When another worker moved the layout state
between the load and the save, the GET plans again from the winner's state, at most
``MAX_PLAN_ATTEMPTS`` times, then answers :class:`~app.domain.errors.LayoutContention`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

import orjson
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.domain.assembly import Assembly, cached_turn_groups
from app.domain.compaction.fold import Fold, choose_record, fold_record, pinned_group
from app.domain.compaction.watermarks import Watermarks
from app.domain.compaction.written import RecordSource
from app.domain.errors import LayoutContention, ManifestNotFound, ServerFault, SessionNotFound, UnsupportedFormat
from app.domain.layout import Conversation
from app.domain.manifest import Manifest, ManifestSummary
from app.domain.planner import PLANNER_VERSION, Policy, RequestPlan, plan_request, warm_request
from app.domain.ports import Measurement
from app.domain.prefix import CacheModel, ReuseReport
from app.domain.recall import with_recall_tool
from app.domain.session_memo import SessionMemo
from app.domain.state import LayoutState, PreviousRequest, SessionState
from app.domain.types import Event, ToolResultEvent
from app.observability import metrics
from app.services.memo import AssemblyMemo
from app.services.sessions import require_session_row
from app.services.summarizer import FoldKey, PlannedPass, Waited
from app.store import repository as repo
from app.store.db import core_read, core_write
from app.store.tenancy import link_payloads, own_payloads
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import Profile, ProfileRegistry
from app.wire import anthropic as anthropic_wire
from app.wire import openai as openai_wire
from app.wire import tokens as tokens_wire

log = logging.getLogger("ctxd")

FORMATS = ("openai", "anthropic", "tokens")

#: Whether a trunk rewrite (a compaction pass) is due within a few calls, judged on what a
#: GET loaded: an override of the default signal (``app.state.ctxd.pass_due``; None, the default:
#: select's forecast from its watermarks, :mod:`app.domain.compaction.forecast`). A function
#: of the loaded state and events only, so every worker judges alike.
PassDue = Callable[[SessionState, Sequence[Event]], bool]
#: The summarizer's outcome for a session's next pass, computed after a POST
#: (:meth:`app.services.summarizer.CandidateStore.source`), or None.
CandidateLookup = Callable[[str], RecordSource | None]
#: Wait for this worker's summarizer job of a pass's fold while it is in flight, at most
#: ``CTXD_SUMMARIZER_WAIT_SECONDS`` (:meth:`app.services.summarizer.SummaryJobs.wait`):
#: ``(session id, fold key) -> what was waited``, None when nothing was in flight.
SummaryWait = Callable[[str, FoldKey], Waited | None]
MAX_PLAN_ATTEMPTS = 4  # plans per GET when other workers keep moving the layout state

_ZONES = {
    "openai": {"root": "messages[0] + tools", "trunk": "messages[1]", "leaf": "messages[2:]"},
    "anthropic": {"root": "tools + system", "trunk": "messages[0]", "leaf": "messages[1:]"},
    "tokens": {"root": "messages[0] + tools", "trunk": "messages[1]", "leaf": "messages[2:]"},
}


def request_bytes(body: Mapping[str, Any]) -> bytes:
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


def check_format(fmt: str) -> None:
    """Raises UnsupportedFormat (422) for a format other than openai, anthropic, tokens."""
    if fmt not in FORMATS:
        raise UnsupportedFormat(f"unknown format {fmt!r}; supported: {', '.join(FORMATS)}", supported=list(FORMATS))


@dataclass(frozen=True)
class Wire:
    """The :class:`~app.domain.ports.WireFormat` port for one format, profile and session."""

    name: str
    profile: Profile
    session_id: str
    model: str | None = None  # the session's own model for its bodies; None: the profile's
    #: the session's leaf cache (the openai body reuses the previous body's leaf JSON from it)
    memo: SessionMemo | None = field(default=None, compare=False, repr=False)

    @property
    def zones(self) -> Mapping[str, str]:
        return _ZONES[self.name]

    @property
    def cache_breakpoints(self) -> bool:
        return self.name == "anthropic"

    def serialize(self, conversation: Conversation, measurement: Measurement) -> tuple[Mapping[str, Any], bytes]:
        """The body names ``model`` (the session's own) or else the profile's model.
        openai: the profile's ``chat_template_kwargs`` ride along (only when it declares
        some), and a meter that counted other messages than the plain serialization
        (mistral-tekken: ``Measurement.extra["openai_messages"]``) has those served, so the
        body is what was counted."""
        profile = self.profile
        model = self.model or profile.model
        body: dict[str, Any]
        if self.name == "openai":
            body, encoded = openai_wire.serialize_bytes(conversation, model=model, max_tokens=profile.output_reserve,
                                                        prompt_cache_key=prompt_cache_key(self.session_id),
                                                        chat_template_kwargs=profile.chat_template_kwargs,
                                                        memo=self.memo)
            counted = measurement.extra.get("openai_messages")
            if isinstance(counted, list):
                body["messages"] = counted
            elif encoded is not None:
                return body, encoded
        elif self.name == "anthropic":
            body = anthropic_wire.serialize(conversation, model=model, max_tokens=profile.output_reserve)
        else:
            text = measurement.extra.get("text")
            body = tokens_wire.serialize(measurement.ids or (), text if isinstance(text, str) else None,
                                         model=model, max_tokens=profile.output_reserve)
        return body, request_bytes(body)

    def layout_warnings(self, conversation: Conversation) -> Sequence[str]:
        return anthropic_wire.layout_warnings(conversation) if self.name == "anthropic" else ()


def tokenizer_id(meters: MeterRegistry, profiles: ProfileRegistry, profile: str) -> str | None:
    """The id of the tokenizer that counts ``profile``'s requests (what payload token counts
    are stored under), or None for a meter without one."""
    return getattr(meters.get(profiles.get(profile)), "tokenizer_id", None)


def cache_model_for(profile: Profile, fmt: str) -> CacheModel:
    """The profile's cache model; Anthropic bodies are cached only at their breakpoints."""
    if fmt == "anthropic":
        return CacheModel.anthropic(int(profile.cache.get("min_tokens", 1024)))
    return CacheModel.from_profile(profile.cache)


POLICIES = ("select", "window")


def policy_for(profile: Profile, name: str = "select", watermarks: Watermarks | None = None,
               due_calls: int | None = None) -> Policy:
    """The request policy of ``profile``: ``select`` (compaction at the profile's
    watermarks, or ``watermarks``: the eval sweep; ``due_calls``: N of its pass forecast
    instead of the default, the eval's choice of N) or ``window`` (eviction only, the
    evaluation's baseline). ValueError for another name."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    fold = None
    if name == "select":
        fold = Fold(watermarks or profile.watermarks)
        if due_calls is not None:
            fold = replace(fold, due_calls=due_calls)
    return Policy(profile=profile.name, budget=profile.budget, item_cap_tokens=profile.item_cap_tokens,
                  render_reasoning=profile.render_reasoning, fold=fold)


@dataclass(frozen=True)
class AssembledRequest:
    """A served request: the wire body (and its bytes), the stored manifest (with its id)."""

    request: Mapping[str, Any]
    manifest: Manifest
    body_bytes: bytes = field(repr=False)
    assembly: Assembly = field(repr=False)
    reuse: ReuseReport = field(repr=False)
    attempts: int = 1
    manifest_bytes: bytes | None = field(default=None, repr=False)  # the manifest's JSON, when at hand
    #: seconds spent in each step of the GET, summed over its attempts: ``load`` (the read),
    #: ``plan`` (the pure plan: assembly, counting, the body, the manifest), ``save`` (the write)
    timings: Mapping[str, float] = field(default_factory=dict, repr=False)

    def server_timing(self) -> str:
        """The ``Server-Timing`` header value (W3C Server Timing: ``dur`` in milliseconds)
        of :attr:`timings`, e.g. ``load;dur=0.31, plan;dur=3.05, save;dur=0.62``."""
        return ", ".join(f"{name};dur={seconds * 1e3:.2f}" for name, seconds in self.timings.items())

    def response_bytes(self) -> bytes:
        """``{"request": <body>, "manifest": <manifest>}`` as JSON, the body and the manifest
        spliced in as already serialized (never re-encoded or re-validated)."""
        manifest = self.manifest_bytes if self.manifest_bytes is not None else orjson.dumps(self.manifest.to_json())
        return b'{"request":' + self.body_bytes + b',"manifest":' + manifest + b"}"


@dataclass(frozen=True)
class Loaded:
    """What one GET reads (one snapshot): the session state, its events, what is kept of
    the previous request in the asked format, and that request's manifest (the base of
    this one's stored delta)."""

    state: SessionState
    events: list[Event]
    previous: PreviousRequest | None
    base: repo.StoredManifest | None = None
    payload_tokens: Mapping[str, int] = field(default_factory=dict)
    record_source: RecordSource | None = None  # the summarizer's outcome the last pass used (persisted)


#: GETs that look a missing payload count up in storage before giving up on it (the count is
#: computed after the output's POST; a failed or slow count must not cost a read per GET).
COUNT_LOOKUPS = 3


def _count_key(tokenizer_id: str, handle: str) -> tuple[str, str]:
    return (tokenizer_id, handle)


def remember_payload_tokens(memo: AssemblyMemo, session_id: str, tokenizer_id: str, counts: Mapping[str, int]) -> None:
    """Keep counts just computed for a session's outputs in this worker's memo (the app's,
    ``app.state.ctxd.memo``), so its next GETs need not read them back (another worker reads them
    from storage)."""
    stash = memo.leaf_cache(session_id)
    for handle, count in counts.items():
        stash.payload_tokens[_count_key(tokenizer_id, handle)] = count


def _text_handle(event: ToolResultEvent, stash: SessionMemo) -> str:
    """The handle of the text an output renders: its redacted view's (issue 12; the count
    stored after the POST is the view's) or, unredacted, its own. Hashed once per output."""
    if not event.redactions:
        return event.handle
    found = stash.view_handles.get(event.handle)
    if found is None:
        found = stash.view_handles[event.handle] = hashlib.sha256(event.payload.encode("utf-8")).hexdigest()
    return found


def known_payload_tokens(db: repo.Db | None, tokenizer_id: str | None, events: Sequence[Event],
                         stash: SessionMemo) -> dict[str, int]:
    """Exact token counts of the session's tool outputs known so far (handle -> tokens,
    under the tokenizer ``tokenizer_id``; none without one). Counts never change, so each
    is read from the payloads table once and kept in the session's memo (``stash``, its
    leaf cache); an output whose count is not stored yet is looked up again on at most
    ``COUNT_LOOKUPS`` GETs (one SELECT for all such outputs), so a GET reads only the few
    newest (issue 9, item 7). Part of the GET's LOAD (the caller's snapshot).

    The memo also keeps how far it has scanned ``events`` (which only grow) with the
    counts found and the outputs still unknown, so a GET looks only at the new events
    and the unknown outputs. ``db`` None: the counts the memo holds, no lookup (and none
    of the lookups used up)."""
    if tokenizer_id is None:
        return {}
    # (events scanned, event handle -> count, outputs still unknown: (counted text's handle, event handle))
    scanned = stash.payload_scans.get(tokenizer_id)
    if scanned is not None and len(events) >= len(scanned[0]) and events[:len(scanned[0])] == scanned[0]:
        seen, found, unknown = list(scanned[0]), dict(scanned[1]), list(scanned[2])
    else:
        seen, found, unknown = [], {}, []
    for event in events[len(seen):]:
        if isinstance(event, ToolResultEvent) and event.handle not in found:
            unknown.append((_text_handle(event, stash), event.handle))
    seen.extend(events[len(seen):])
    missing: dict[str, str] = {}  # handle of the text counted -> the event's handle
    still: list[tuple[str, str]] = []
    for counted, handle in dict.fromkeys(unknown):
        count = stash.payload_tokens.get(_count_key(tokenizer_id, counted))
        if count is not None:
            found[handle] = count
            continue
        still.append((counted, handle))
        if db is not None and stash.count_lookups.get((tokenizer_id, counted), 0) < COUNT_LOOKUPS:
            missing[counted] = handle
    if missing and db is not None:
        for counted, count in repo.payload_token_counts(db, missing, tokenizer_id).items():
            if count is not None:
                stash.payload_tokens[_count_key(tokenizer_id, counted)] = found[missing[counted]] = count
        for handle in missing:
            key = (tokenizer_id, handle)
            stash.count_lookups[key] = stash.count_lookups.get(key, 0) + 1
    stash.payload_scans[tokenizer_id] = (seen, found, tuple(x for x in still if x[1] not in found))
    return dict(found)


def load(db: repo.Db, memo: AssemblyMemo, session_id: str, fmt: str, *,
         tokenizer_of: Callable[[str], str | None] = lambda profile: None) -> Loaded:
    """LOAD: the session and its layout state, the events (only those the memo lacks are
    read), the previous request's prefix state in ``fmt``, and the known token counts of
    the tool outputs under ``tokenizer_of(profile name)``'s tokenizer id. Raises
    SessionNotFound. Statements go to the Core connection of ``db`` (no ORM layers)."""
    db = repo.core(db)
    found = repo.load_session_state(db, session_id, fmt)
    if found is None:
        raise SessionNotFound(f"no session {session_id!r}", session_id=session_id)
    state, previous = found
    events = memo.events(session_id, state.last_seq,
                         lambda after: repo.load_events(db, session_id, after_seq=after, upto_seq=state.last_seq))
    base = None
    if previous is not None and previous.manifest_id is not None:
        base = memo.manifest(session_id, fmt)
        hit = base is not None and base.id == previous.manifest_id
        _child(metrics.ASSEMBLY_MEMO, "hit" if hit else "miss").inc()
        if not hit:  # served by another worker (or evicted, or a restart): read it
            base = repo.load_manifest(db, session_id, previous.manifest_id)
    counts = known_payload_tokens(db, tokenizer_of(state.session.profile), events, memo.leaf_cache(session_id))
    return Loaded(state=state, events=events, previous=previous, base=base, payload_tokens=counts,
                  record_source=record_source(db, memo.leaf_cache(session_id), session_id, state))


def _source_key(layout: LayoutState) -> tuple[int, int]:
    return (layout.cut_seq, layout.passes)


def record_source(db: repo.Db, stash: SessionMemo, session_id: str,
                  state: SessionState) -> RecordSource | None:
    """The summarizer's outcome the session's last pass used (issue 10 item 6), as saved
    with its record in the layout state: None before any pass or when no summarizer was
    asked. Read once per fold point and kept in the session's memo (``stash``), so a GET
    reads it only after another worker's pass (or a restart)."""
    if state.layout.passes == 0:
        return None
    key = _source_key(state.layout)
    if key in stash.record_sources:
        return stash.record_sources[key]
    stored = repo.load_record(db, session_id)
    data = stored[2].get("source") if stored is not None and isinstance(stored[2], Mapping) else None
    try:
        found = RecordSource.from_dict(data) if isinstance(data, Mapping) and "folded_seqs" in data else None
    except (ValueError, KeyError, TypeError):
        found = None
    stash.record_sources[key] = found
    return found


def with_sources(policy: Policy, *, current: RecordSource | None, candidate: RecordSource | None) -> Policy:
    """``policy`` with the summarizer's outcomes its passes may use (select only): the one
    the last pass used (``current``) and one for a new pass (``candidate``), each only if
    computed by this planner version."""
    if policy.fold is None:
        return policy
    ok = [s if s is not None and s.planner_version == PLANNER_VERSION else None for s in (current, candidate)]
    if ok == [policy.fold.current, policy.fold.candidate]:
        return policy
    return replace(policy, fold=replace(policy.fold, current=ok[0], candidate=ok[1]))


def save(db: repo.Db, plan: RequestPlan, base: repo.StoredManifest | None = None) -> repo.StoredManifest | None:
    """SAVE: the layout state by compare-and-set when the plan moved it, the manifest (a
    delta of ``base``, the previous manifest in this format; stored only if the layout
    state is still the one planned with), the payloads the request names, and what the
    next GET keeps of this request. Returns the stored manifest, or None when another
    worker moved the layout state first (the caller's transaction then writes nothing).
    Statements go to the Core connection of ``db`` (no ORM layers)."""
    db = repo.core(db)
    manifest = plan.manifest
    sid = manifest.session_id
    if plan.layout_changed:  # the record is serialized only when saved with a moved layout state
        record = plan.assembly.record.as_dict() if plan.assembly.record is not None else None
        if not repo.compare_and_set_layout(db, sid, plan.loaded_layout, plan.layout, record=record):
            return None
    saved = repo.add_manifest(db, manifest, base=base, planner_version=PLANNER_VERSION,
                              layout_version=plan.layout.version)
    if saved is None:  # planned from a layout state another worker has moved since
        return None
    stored_before = set(base.data["layout"].get("elision_index", ())) if base is not None else set()
    tenant_id = plan.tenant_id
    # every index payload is linked to the session (issue 12): readable by its tenant through the
    # handle the trunk names; those stored before are linked again (a no-op but for sessions
    # from before migration 0008_tenancy), unless this process stored the previous manifest
    # (``base.source``): that save linked them
    if base is None or base.source is None:
        link_payloads(db, [h for h in plan.derived_payloads if h in stored_before], session_id=sid,
                      tenant_id=tenant_id)
    # the previous manifest's index payloads are stored already
    new = {h: data for h, data in plan.derived_payloads.items() if h not in stored_before}
    for handle, data in new.items():
        if (stored := repo.sha256_hex(data)) != handle:  # content-addressed: the note names exactly what is stored
            raise ServerFault(f"elision index stored as {stored} but the trunk names {handle}", handle=handle)
    if new:
        own_payloads(db, new, session_id=sid, tenant_id=tenant_id)
    repo.put_previous_request(db, sid, manifest.format, replace(plan.previous, manifest_id=saved.id))
    return saved


def served_state(state: SessionState, profile: Profile) -> SessionState:
    """The session as its requests serve it: with the ``recall`` tool declaration after its
    own tools when the profile enables recall (issue 14 item 3, app/domain/recall.py
    ``with_recall_tool``), so it is rendered, counted (``tools`` role) and cached with them."""
    if not profile.recall:
        return state
    return replace(state, session=with_recall_tool(state.session))


def assemble_request(factory: sessionmaker[OrmSession], profiles: ProfileRegistry, meters: MeterRegistry,
                     session_id: str, *, fmt: str = "openai", memo: AssemblyMemo,
                     read_factory: sessionmaker[OrmSession] | None = None,
                     pass_due: PassDue | None = None, policy: str = "select",
                     watermarks: Watermarks | None = None, candidates: CandidateLookup | None = None,
                     due_calls: int | None = None, wait: SummaryWait | None = None) -> AssembledRequest:
    """Assemble, count, predict prefix reuse, persist the manifest; return the wire body.

    ``factory`` opens write transactions (the save), ``read_factory`` snapshot reads (the
    load; default ``factory``, see :func:`app.store.db.make_read_factory`). ``memo``: the
    app's assembly memo (``app.state.ctxd.memo``). ``policy``: ``select`` (GET /request's
    default: compaction passes into the progress record, saved with the layout state) or
    ``window`` (the evaluation's baseline); ``watermarks``: select's settings instead of
    the profile's (the ``ctxd eval`` sweep). ``pass_due``: an override of the compaction
    signal the planner passes to invalidation (:data:`PassDue`; None: select's forecast,
    :mod:`app.domain.compaction.forecast`). ``candidates``: the summarizer's outcomes
    computed after POSTs (:data:`CandidateLookup`): a pass whose fold matches one exactly
    uses its admitted record (issue 10 item 6; the manifest's ``compaction.record.source``
    says which record the trunk holds). ``due_calls``: N of select's pass forecast instead
    of the default (the ``ctxd eval`` policies ``select-due<N>``). ``wait``: when the plan
    runs a pass and this worker's summarizer job of that fold is in flight, wait for it
    (:data:`SummaryWait`, bounded; between the load and the save, no transaction open),
    then plan again with its outcome; the manifest's ``compaction.record.source.wait``
    says how long, or that the wait ran out. Only a GET that runs a pass waits.

    Returns the body for ``fmt`` and the manifest: tokens by zone and role, budget, items
    with why and representation, elided items with handles and token counts, and
    ``cache`` (predicted cached tokens under the profile's cache model, previous request's
    tokens, and where and why the prefix diverged when it did; seed 000 section 4.4.3).

    Raises:
        SessionNotFound (404), UnsupportedFormat (422), PinnedOverBudget (422): the root,
        trunk and next step alone exceed ``input_limit`` (eq. 1); NewestGroupOverBudget
        (422): the newest turn group cannot fit even bounded; LayoutContention (503):
        other workers moved the layout state ``MAX_PLAN_ATTEMPTS`` times in a row;
        TemplateUnsupported / ServerFault (500): the profile's template cannot be counted
        by zone, or a storage invariant broke.
    """
    check_format(fmt)
    waited: tuple[FoldKey, Waited] | None = None
    attempt = 0
    spent = {"load": 0.0, "plan": 0.0, "save": 0.0}
    while attempt < MAX_PLAN_ATTEMPTS:
        attempt += 1
        t0 = time.perf_counter()
        with core_read(read_factory or factory) as db:
            loaded = load(db, memo, session_id, fmt, tokenizer_of=lambda name: tokenizer_id(meters, profiles, name))
        t1 = time.perf_counter()
        spent["load"] += t1 - t0
        profile = profiles.get(loaded.state.session.profile)
        candidate = candidates(session_id) if candidates is not None else None
        if waited is not None:
            candidate = after_wait(candidate, *waited)
        stash = memo.leaf_cache(session_id)
        stash.warm_profile = profile.name  # what a warm-up after the next POST plans with
        with memo.plan_lock(session_id):  # the leaf cache is this plan's alone (a warm-up may be running)
            plan = plan_request(served_state(loaded.state, profile), loaded.events,
                                policy=with_sources(policy_for(profile, policy, watermarks, due_calls),
                                                    current=loaded.record_source, candidate=candidate),
                                wire=Wire(fmt, profile, session_id, loaded.state.model, memo=stash),
                                cache_model=cache_model_for(profile, fmt),
                                meter=meters.get(profile), previous=loaded.previous,
                                remembered=memo.remembered(session_id, fmt), memo=stash,
                                payload_tokens=loaded.payload_tokens,
                                pass_due=pass_due(loaded.state, loaded.events) if pass_due is not None else None)
        spent["plan"] += time.perf_counter() - t1
        if wait is not None and waited is None and (fold := pass_fold(plan)) is not None \
                and (got := wait(session_id, fold)) is not None:
            # a pass whose summarizer job is in flight here: waited (no transaction open), plan again
            waited = (fold, got)
            attempt -= 1
            continue
        t2 = time.perf_counter()
        with core_write(factory, durable=False) as db:  # derived state: planned again if lost
            saved = save(db, plan, loaded.base)
            if saved is None:
                db.rollback()
                spent["save"] += time.perf_counter() - t2
                continue
        spent["save"] += time.perf_counter() - t2
        stash = memo.leaf_cache(session_id)
        if plan.assembly.forecast is not None:  # what the POST hook reads: is a pass near?
            stash.forecast = plan.assembly.forecast
        if plan.layout.passes > plan.loaded_layout.passes:  # this worker's pass: its record's source is known
            source = plan.assembly.record.source if plan.assembly.record is not None else None
            stash.record_sources[_source_key(plan.layout)] = RecordSource.from_dict(source) \
                if source is not None and "folded_seqs" in source else None
        manifest_bytes = saved.json_bytes()
        # the memo holds the manifest's JSON and its parts' bytes (the next delta's base)
        memo.remember(session_id, fmt, plan.remembered, saved, manifest_bytes=len(manifest_bytes))
        _observe(profile, plan, policy)
        return AssembledRequest(request=plan.body, manifest=replace(plan.manifest, id=saved.id),
                                body_bytes=plan.body_bytes, assembly=plan.assembly, reuse=plan.reuse, attempts=attempt,
                                manifest_bytes=manifest_bytes, timings=spent)
    raise LayoutContention(f"the layout state of session {session_id!r} kept moving under {MAX_PLAN_ATTEMPTS} plans; "
                           "retry the request", session_id=session_id, attempts=MAX_PLAN_ATTEMPTS)


#: the leaf cache's key of the profile the session's last GET planned with (warm_after_post)
_WARM_PROFILE = "warm-up profile"


def warm_after_post(profiles: ProfileRegistry, meters: MeterRegistry, session_id: str, last_seq: int, *,
                    memo: AssemblyMemo) -> bool:
    """After a POST of the session's events up to ``last_seq``: take the first steps of its
    next GET's plan ahead of it (:func:`app.domain.planner.warm_request`: the grouping, the
    dependency graph, the new turn groups' leaf messages, and their tokenizing started on
    another thread), so that the GET finds them done. Only from what this worker's memo
    holds (no database read): the events up to ``last_seq`` and the profile of the
    session's last GET here; else nothing is done. Skipped (False) while a plan of the
    session runs. The GET's results never depend on it (every step is a memo checked
    against the GET's own inputs). Returns whether it ran."""
    events = memo.held_events(session_id, last_seq)  # first: the memo's other getters add a missing session
    if events is None:
        return False
    stash = memo.leaf_cache(session_id)
    name = stash.warm_profile
    if name is None:
        return False
    lock = memo.plan_lock(session_id)
    if not lock.acquire(blocking=False):
        return False
    try:
        profile = profiles.get(name)
        meter = meters.get(profile)
        counts = known_payload_tokens(None, tokenizer_id(meters, profiles, name), events, stash)
        warm_request(events, policy=policy_for(profile), meter=meter, memo=stash, payload_tokens=counts)
    finally:
        lock.release()
    return True


class PlanWarmer:
    """One background thread for :func:`warm_after_post` (``app.state.ctxd.warmer``): a POST
    hands it the warm-up of its session's next plan, which runs beside the POST's response
    and the agent's next GET. A warm-up is dropped, not queued, while another runs (the
    GET then takes those steps itself, as it always can): under load no work piles up."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._busy = False
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def submit(self, job: Callable[[], object]) -> bool:
        """Run ``job`` on the warm-up thread unless one runs; returns whether it was taken."""
        with self._lock:
            if self._busy:
                return False
            self._busy = True
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxd-warm")
            pool = self._pool

        def run() -> None:
            try:
                job()
            except Exception:  # the GET takes these steps itself
                log.warning("warm-up after a POST failed; the next GET plans without it", exc_info=True)
            finally:
                with self._lock:
                    self._busy = False
                    self._idle.notify_all()

        pool.submit(run)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no warm-up runs (at most ``timeout`` seconds); returns whether none does."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._busy, timeout)

    def close(self) -> None:
        """Wait for a running warm-up, then stop the thread (the app's shutdown)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def pass_fold(plan: RequestPlan) -> FoldKey | None:
    """The fold key (contract version, folded seqs) of the pass ``plan`` runs, or None when
    it runs none (or the record it writes is already a model-written one)."""
    record = plan.assembly.record
    if plan.layout.passes <= plan.loaded_layout.passes or record is None or not record.folded_seqs:
        return None
    if record.source is not None and record.source.get("source") == "model":
        return None
    return record.contract_version, tuple(record.folded_seqs)


def after_wait(candidate: RecordSource | None, fold: FoldKey, waited: Waited) -> RecordSource:
    """The summarizer's outcome a pass of ``fold`` uses after its GET waited: ``candidate``
    when it is for that fold, else the deterministic record with the reason (the wait ran
    out, or the job ended without an outcome for the fold); either says the wait."""
    if candidate is not None and (candidate.contract_version, candidate.folded_seqs) == fold:
        return replace(candidate, waited_seconds=waited.seconds, wait_ran_out=waited.ran_out)
    reason = (f"the summarizer's job of this pass was still running after the wait of {waited.seconds:g} s "
              "(CTXD_SUMMARIZER_WAIT_SECONDS)" if waited.ran_out
              else "the summarizer's job of this pass ended without a candidate")
    return RecordSource(source="deterministic", folded_seqs=fold[1], contract_version=fold[0],
                        planner_version=PLANNER_VERSION, error=reason, waited_seconds=waited.seconds,
                        wait_ran_out=waited.ran_out)


def planned_pass(factory: sessionmaker[OrmSession], profiles: ProfileRegistry, meters: MeterRegistry,
                 session_id: str, *, memo: AssemblyMemo,
                 read_factory: sessionmaker[OrmSession] | None = None) -> PlannedPass | None:
    """The compaction pass the session's next GET would run, planned now (after a POST, for
    the summarizer; issue 10 item 6): None when the last GET's forecast said no pass is due
    within a few calls, or when the plan of the events as they stand runs none. The plan is
    the GET's (select at the profile's watermarks, the same planner), not saved. Raises
    SessionNotFound."""
    stash = memo.leaf_cache(session_id)
    forecast = stash.forecast
    if forecast is not None and not forecast.due:
        return None
    with core_read(read_factory or factory) as db:
        loaded = load(db, memo, session_id, "openai", tokenizer_of=lambda name: tokenizer_id(meters, profiles, name))
    profile = profiles.get(loaded.state.session.profile)
    plan = plan_request(served_state(loaded.state, profile), loaded.events,
                        policy=with_sources(policy_for(profile), current=loaded.record_source, candidate=None),
                        wire=Wire("openai", profile, session_id, loaded.state.model, memo=stash),
                        cache_model=cache_model_for(profile, "openai"), meter=meters.get(profile), memo=stash,
                        payload_tokens=loaded.payload_tokens)
    record = plan.assembly.record
    if plan.assembly.evicted_now == 0 or record is None:
        return None
    return PlannedPass(events=tuple(loaded.events), contract=loaded.state.session.contract,
                       folded_seqs=tuple(record.folded_seqs), planner_version=PLANNER_VERSION,
                       budget_tokens=record.budget)


def get_record(factory: sessionmaker[OrmSession], profiles: ProfileRegistry, meters: MeterRegistry, session_id: str,
               *, memo: AssemblyMemo) -> dict[str, Any]:
    """The session's progress record (issue 10 item 4): the one saved with its layout state
    by the last pass (``{"session_id", "passes", "record", "text"}``; ``text`` is the trunk
    of the next select request: the contract and the record). The record is a function of
    the events before the fold point, so ``text`` is rendered from the event log; before the
    first pass (nothing folded) ``record`` is the empty record. Raises SessionNotFound."""
    with core_read(factory) as db:
        loaded = load(db, memo, session_id, "openai")
        stored = repo.load_record(db, session_id)
    state = loaded.state
    profile = profiles.get(state.session.profile)
    cache = memo.leaf_cache(session_id)
    groups = cached_turn_groups(loaded.events, cache)
    cut = state.layout.cut_seq
    k = next((i for i, g in enumerate(groups) if g.first_seq >= cut), len(groups)) if cut else 0
    count = meters.get(profile).count_text
    record, text = fold_record(state.session.contract, loaded.events, groups, k, watermarks=profile.watermarks,
                               count=count, memo=cache, pinned=pinned_group(groups))
    fold = with_sources(policy_for(profile), current=loaded.record_source, candidate=None).fold
    if fold is not None:  # the summarizer's record, when the last pass used one (issue 10 item 6)
        record, text = choose_record(fold, record, text, new_pass=False, contract=state.session.contract, count=count)
    saved = stored[2] if stored is not None else None
    return {"session_id": session_id, "passes": state.layout.passes,
            "record": saved if saved is not None and saved.get("fold_seq") == record.fold_seq else record.as_dict(),
            "text": text}


def list_manifests(db: OrmSession, session_id: str, *, limit: int = 50,
                   before_id: int | None = None) -> tuple[list[ManifestSummary], int | None]:
    """The session's persisted manifests, newest first (summaries), and the id to pass as
    ``before_id`` for the next page (None on the last page). Raises SessionNotFound (404)."""
    require_session_row(db, session_id)
    rows = repo.list_manifests(db, session_id, limit=limit + 1, before_id=before_id)
    page = rows[:limit]
    return page, page[-1].id if len(rows) > limit else None


def get_manifest(db: OrmSession, session_id: str, manifest_id: int) -> Manifest:
    """One persisted manifest exactly as it was served with its request (the body itself is
    not stored: ``request_sha256`` identifies it). Raises SessionNotFound or
    ManifestNotFound (404)."""
    require_session_row(db, session_id)
    manifest = repo.get_manifest(db, session_id, manifest_id)
    if manifest is None:
        raise ManifestNotFound(f"no manifest {manifest_id} in session {session_id!r}", session_id=session_id,
                               manifest_id=manifest_id)
    return manifest


#: Prometheus children by (metric, label values): ``labels()`` takes a lock and checks its
#: values on every call, a dozen times a GET. Bounded by the profiles, formats, zones and
#: roles there are.
_CHILDREN: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    key = (metric, *labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*labels)
    return child


def _observe(profile: Profile, plan: RequestPlan, policy: str) -> None:
    """Count one saved request (after its commit): tokens and occupancy by role, predicted
    reuse, segment-cache lookups, elided tokens, and a compaction pass when the cut moved."""
    m = plan.assembly.measurement
    if plan.layout.passes > plan.loaded_layout.passes:
        _child(metrics.COMPACTION_PASSES, profile.name, policy).inc(plan.layout.passes - plan.loaded_layout.passes)
    manifest, reuse = plan.manifest, plan.reuse
    fmt = manifest.format
    limit = plan.assembly.budget.input_limit
    for role, tokens in m.by_role.items():
        _child(metrics.ASSEMBLED_TOKENS, profile.name, role).inc(tokens)
        _child(metrics.BUDGET_OCCUPANCY, profile.name, role).observe(tokens / limit)
    _child(metrics.REQUEST_TOKENS, profile.name).observe(m.total)
    _child(metrics.PREDICTED_REUSED_TOKENS, profile.name, fmt).inc(reuse.predicted_cached_tokens)
    _child(metrics.REUSE_RATIO, profile.name, fmt).observe(reuse.predicted_cached_tokens / m.total if m.total else 0.0)
    if manifest.cache.first_divergence is not None:
        _child(metrics.TRUNK_REWRITES, profile.name, manifest.cache.first_divergence.zone).inc()
    segments = m.extra.get("segments")
    if isinstance(segments, dict):
        for zone, counts in segments.items():
            for result in ("hits", "misses"):
                if counts[result]:
                    _child(metrics.SEGMENT_CACHE, profile.name, zone, result).inc(counts[result])
    evicted = sum(filter(None, map(attrgetter("tokens"), manifest.elided)))
    capped = sum(map(attrgetter("elided_tokens"), manifest.items))
    if evicted:
        _child(metrics.ELIDED_TOKENS, profile.name, "evicted").inc(evicted)
    if capped:
        _child(metrics.ELIDED_TOKENS, profile.name, "item_cap").inc(capped)
