"""Auditing a model-written progress record against the host's log (seed 000 section
4.6.2, listing 2; issue 10 item 6).

A summarizer may propose a *candidate* record (JSON under :data:`CANDIDATE_SCHEMA`). It is
untrusted: :func:`audit_candidate` compares it with values the summarizer did not write
(the session contract, the raw event log, the current workspace revisions) and returns
findings; any finding rejects the candidate. Three checks, as listing 2:

1. **Required fields equal the host inventory**: ``contract_version``; the contract's
   constraints, verbatim and all of them (none added); the current artifact revisions;
   the current hypotheses and obligations (key, text, status, depends_on); and every
   protected field of the folded events (:func:`~app.domain.compaction.evidence.check_protected`:
   test names, revisions, run conditions, assertion lines, exit statuses).
2. **Every claim equals its logged event**: a claim cites ``event_seq``; its
   ``(operation, result, artifact, revision, scope)`` must equal the :class:`Claim`
   derived from that tool result (:func:`~app.domain.compaction.evidence.claims_of`):
   command, exit status, the parsed test run (outcome, ran / passed / failed / errors,
   failed ids), binding and scope (workspace revisions, run conditions, test selection).
   Its prose may not claim more: a blanket "all tests / the full suite passed" needs a
   complete, passing run that selected no single test; "passed" needs a passing run.
3. **A current-state claim needs current evidence**: ``current: true`` needs the event's
   workspace (for a test run or an unbound result) or its binding's revision (for a read)
   to equal the workspace now.

:func:`host_record` builds the minimal record directly from the log (section 4.6.2: "or
build a minimal record directly from its own event log"); it passes the audit by
construction, and is what a candidate starts from. :func:`summarizer_chunks` caps the
summarizer's input in bounded chunks.

Standard library only; pure; nothing here raises on a malformed candidate (a finding says
what is wrong).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from app.domain.compaction.evidence import Claim, Finding, check_protected, claims_of, protected_inventory
from app.domain.notes import current_notes
from app.domain.types import ArtifactWriteEvent, Contract, Event, MessageEvent, ToolResultEvent

__all__ = [
    "CANDIDATE_SCHEMA",
    "audit_candidate",
    "candidate_texts",
    "estimate_tokens",
    "host_record",
    "schema_findings",
    "summarizer_chunks",
]

_INT_OR_NULL: Final = {"type": ["integer", "null"]}
_OUTCOMES: Final = ["passed", "failed", "error", "no_tests", "not_run", "unknown"]


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """A strict-mode object (OpenAI structured outputs: every property required, no others)."""
    return {"type": "object", "additionalProperties": False, "required": list(properties), "properties": properties}


_STRINGS: Final = {"type": "array", "items": {"type": "string"}}
CANDIDATE_SCHEMA: Final[dict[str, Any]] = _object({
    "contract_version": {"type": "integer"},
    "task": {"type": "string"},
    "constraints": {"type": "array", "items": _object({"id": {"type": "string"}, "text": {"type": "string"}})},
    "artifacts": {"type": "array", "items": _object({"artifact": {"type": "string"}, "revision": {"type": "integer"}})},
    "claims": {"type": "array", "items": _object({
        "event_seq": {"type": "integer"},
        "text": {"type": "string"},
        "operation": {"type": "string"},
        "exit_status": _INT_OR_NULL,
        "tests": {"anyOf": [{"type": "null"}, _object({
            "outcome": {"type": "string", "enum": _OUTCOMES}, "ran": _INT_OR_NULL, "passed": _INT_OR_NULL,
            "failed": _INT_OR_NULL, "errors": _INT_OR_NULL, "failed_ids": _STRINGS})]},
        "artifact": {"type": ["string", "null"]},
        "revision": _INT_OR_NULL,
        "scope": _object({
            "revisions": {"type": "array", "items": _object({"artifact": {"type": "string"},
                                                             "revision": {"type": "integer"}})},
            "conditions": {"type": "array", "items": _object({"key": {"type": "string"}, "value": {"type": "string"}})},
            "selection": _STRINGS}),
        "current": {"type": "boolean"},
        "evidence": _STRINGS,
    })},
    "hypotheses": {"type": "array", "items": _object({
        "key": {"type": "string"}, "text": {"type": "string"},
        "status": {"type": "string", "enum": ["working", "supported", "refuted"]},
        "depends_on": {"type": "array", "items": {"type": "integer"}}})},
    "obligations": {"type": "array", "items": _object({
        "key": {"type": "string"}, "text": {"type": "string"},
        "status": {"type": "string", "enum": ["open", "done", "dropped"]}})},
    "next_step": {"type": "string"},
})
"""JSON schema of a candidate record (OpenAI ``response_format: json_schema`` strict mode:
objects list every property as required and forbid others; optional values are nullable).
A claim's ``evidence`` lists the protected lines it keeps (assertion lines, test ids)."""

_TYPES: Final = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _type_ok(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def schema_findings(value: Any, schema: Mapping[str, Any] = CANDIDATE_SCHEMA, where: str = "record") -> list[Finding]:
    """Findings (kind ``schema``) of ``value`` against the subset of JSON Schema used by
    :data:`CANDIDATE_SCHEMA` (type, enum, properties, required, additionalProperties,
    items, anyOf). Empty when it conforms. At most one finding per node."""
    if "anyOf" in schema:
        if any(not schema_findings(value, s, where) for s in schema["anyOf"]):
            return []
        return [Finding("schema", where, f"{where} matches none of the allowed shapes")]
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, n) for n in names):
            return [Finding("schema", where, f"{where} must be {' or '.join(names)}, not {type(value).__name__}")]
    if "enum" in schema and value not in schema["enum"]:
        return [Finding("schema", where, f"{where} must be one of {schema['enum']}, not {value!r}")]
    out: list[Finding] = []
    if isinstance(value, dict) and "properties" in schema:
        missing = [k for k in schema.get("required", ()) if k not in value]
        extra = [k for k in value if k not in schema["properties"]] if schema.get("additionalProperties") is False else []
        if missing or extra:
            return [Finding("schema", where, f"{where}: missing {missing}, unexpected {extra}")]
        for key, sub in schema["properties"].items():
            out += schema_findings(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += schema_findings(item, schema["items"], f"{where}[{i}]")
    return out


# --- the host's view -------------------------------------------------------------------

def _current_revisions(events: Iterable[Event]) -> dict[str, int]:
    current: dict[str, int] = {}
    for e in events:
        if isinstance(e, ArtifactWriteEvent) and e.revision >= current.get(e.artifact, 0):
            current[e.artifact] = e.revision
    return current


def _folded(events: Sequence[Event], folded_seqs: Iterable[int] | None) -> set[int]:
    return {e.seq for e in events} if folded_seqs is None else set(folded_seqs)


def _tests_of(claim: Claim) -> dict[str, Any] | None:
    run = claim.test_run
    if run is None:
        return None
    return {"outcome": run.outcome, "ran": run.ran, "passed": run.passed, "failed": run.failed, "errors": run.errors,
            "failed_ids": list(run.failed_ids)}


def _scope_of(claim: Claim) -> dict[str, Any]:
    return {"revisions": [{"artifact": a, "revision": r} for a, r in claim.scope.revisions],
            "conditions": [{"key": k, "value": _condition_text(v)} for k, v in claim.scope.conditions],
            "selection": list(claim.scope.selection)}


def _condition_text(canonical: str) -> str:
    value = json.loads(canonical)
    return value if isinstance(value, str) else canonical


def claim_entry(claim: Claim, *, current: bool = False, text: str | None = None) -> dict[str, Any]:
    """The candidate-schema claim that states exactly what ``claim`` logged (the form a
    summarizer must copy; used by :func:`host_record`)."""
    run = claim.test_run
    if text is None:
        what = (f"{run.runner} run: {run.outcome}" + (f", {run.ran} ran" if run.ran is not None else "")
                if run is not None else "command")
        text = f"seq {claim.seq}: {what}, exit {claim.exit_status}"
    evidence = list(dict.fromkeys([*(run.failed_ids if run else ()), *(run.error_ids if run else ()),
                                   *(s for s in claim.scope.selection if "::" in s), *claim.failure_lines]))
    return {"event_seq": claim.seq, "text": text, "operation": claim.command, "exit_status": claim.exit_status,
            "tests": _tests_of(claim), "artifact": claim.artifact, "revision": claim.revision,
            "scope": _scope_of(claim), "current": current, "evidence": evidence}


def _needs_claim(claim: Claim) -> bool:
    """A folded result whose exit status is protected (a test run or a failure) is stated
    as a claim in the record."""
    return claim.test_run is not None or claim.exit_status not in (None, 0)


def host_record(events: Sequence[Event], contract: Contract, *, folded_seqs: Iterable[int] | None = None,
                next_step: str = "") -> dict[str, Any]:
    """The minimal record built from the log only (candidate schema): contract fields,
    current artifact revisions, one claim per folded test run or failed result (none
    marked current), current hypotheses and obligations, ``next_step``. It passes
    :func:`audit_candidate` by construction. ``folded_seqs``: the events the record
    replaces (default: all)."""
    folded = _folded(events, folded_seqs)
    notes = current_notes(events)
    return {
        "contract_version": contract.contract_version, "task": contract.goal,
        "constraints": [{"id": c.id, "text": c.text} for c in contract.constraints],
        "artifacts": [{"artifact": a, "revision": r} for a, r in sorted(_current_revisions(events).items())],
        "claims": [claim_entry(c) for c in claims_of(events) if c.seq in folded and _needs_claim(c)],
        "hypotheses": [{"key": h.key, "text": h.text, "status": h.status, "depends_on": list(h.depends_on)}
                       for h in notes.hypotheses],
        "obligations": [{"key": o.key, "text": o.text, "status": o.status} for o in notes.obligations],
        "next_step": next_step,
    }


def candidate_texts(candidate: Mapping[str, Any]) -> list[str]:
    """The lines a candidate keeps, for :func:`check_protected`: constraint texts,
    ``path@rN`` of its artifacts, per claim a line ``seq N: <operation> exit <status>``,
    its text, evidence lines, failed ids, selection, ``key=value`` conditions and
    ``path@rN`` revisions; hypothesis and obligation texts; the next step."""
    out: list[str] = [str(c.get("text", "")) for c in candidate.get("constraints", []) if isinstance(c, Mapping)]
    out += [f"{a.get('artifact')}@r{a.get('revision')}" for a in candidate.get("artifacts", []) if isinstance(a, Mapping)]
    for c in candidate.get("claims", []):
        if not isinstance(c, Mapping):
            continue
        seq = c.get("event_seq")
        out.append(f"seq {seq}: {c.get('operation')} exit {c.get('exit_status')}")
        out.append(f"seq {seq}: {c.get('text', '')}")
        out += [str(x) for x in c.get("evidence", []) or []]
        tests = c.get("tests")
        if isinstance(tests, Mapping):
            out += [str(x) for x in tests.get("failed_ids", []) or []]
        scope = found if isinstance(found := c.get("scope"), Mapping) else {}
        out += [str(x) for x in scope.get("selection", []) or []]
        out += [f"{x.get('key')}={x.get('value')}" for x in scope.get("conditions", []) or [] if isinstance(x, Mapping)]
        out += [f"{x.get('artifact')}@r{x.get('revision')}" for x in scope.get("revisions", []) or []
                if isinstance(x, Mapping)]
        if c.get("artifact") is not None:
            out.append(f"{c.get('artifact')}@r{c.get('revision')}")
    out += [str(h.get("text", "")) for key in ("hypotheses", "obligations") for h in candidate.get(key, [])
            if isinstance(h, Mapping)]
    out.append(str(candidate.get("next_step", "")))
    return out


# --- the audit (listing 2) ---------------------------------------------------------------

_WS: Final = re.compile(r"\s+")
_SENTENCE: Final = re.compile(r"[^.;\n]+")
_BLANKET: Final = re.compile(r"\b(?:all|full|entire|whole|every|complete)\b[^.;\n]*\b(?:tests?|suites?|regressions?)\b"
                             r"|\b(?:test )?suite\b|\bno (?:test )?failures\b|\bregression suite\b", re.IGNORECASE)
_SUCCESS: Final = re.compile(r"\b(?:pass(?:es|ed|ing)?|succeed(?:s|ed)?|green|fixed|resolved|works?)\b", re.IGNORECASE)
_NEGATED: Final = re.compile(r"\b(?:not|no|never|fail(?:s|ed|ing|ure|ures)?|errors?|broken)\b", re.IGNORECASE)


def _norm(text: Any) -> str:
    return _WS.sub(" ", str(text)).strip()


def _narrow(claim: Claim) -> bool:
    """The run selected less than a suite: a node id, a single file or a -k expression."""
    return any("::" in s or s.startswith("-k ") or s.endswith(".py") or "." in s and "/" not in s
               for s in claim.scope.selection)


def _prose_findings(where: str, text: str, claim: Claim) -> list[Finding]:
    run = claim.test_run
    out: list[Finding] = []
    for sentence in _SENTENCE.findall(text):
        success = _SUCCESS.search(sentence) and not _NEGATED.search(sentence)
        if not success:
            continue
        if _BLANKET.search(sentence) and (run is None or not run.complete or run.outcome != "passed" or _narrow(claim)):
            ran = run.ran if run is not None else None
            out.append(Finding("contradicts_event", f"{where}.text",
                               f"{sentence.strip()!r} claims the whole suite passed, but event {claim.seq} ran "
                               f"{claim.command!r} ({ran if ran is not None else 'unknown'} test(s), outcome "
                               f"{run.outcome if run else 'no test run'})"))
        elif run is not None and run.outcome != "passed" and re.search(r"\btests?\b|\bpass", sentence, re.IGNORECASE):
            out.append(Finding("contradicts_event", f"{where}.text",
                               f"{sentence.strip()!r} claims success, but event {claim.seq}'s test run is {run.outcome}"))
    return out


def _scope_findings(where: str, scope: Any, claim: Claim) -> list[Finding]:
    if not isinstance(scope, Mapping):
        return [Finding("contradicts_event", f"{where}.scope", "scope missing")]
    host = _scope_of(claim)
    out = []
    got_revisions = sorted((str(r.get("artifact")), r.get("revision")) for r in scope.get("revisions") or []
                           if isinstance(r, Mapping))
    if got_revisions != sorted((r["artifact"], r["revision"]) for r in host["revisions"]):
        out.append(Finding("contradicts_event", f"{where}.scope.revisions",
                           f"event {claim.seq} ran at {[f'{a}@r{r}' for a, r in claim.scope.revisions]}, the claim says "
                           f"{[f'{a}@r{r}' for a, r in got_revisions]}"))
    got_conditions = sorted((str(c.get("key")), str(c.get("value"))) for c in scope.get("conditions") or []
                            if isinstance(c, Mapping))
    if got_conditions != sorted((c["key"], c["value"]) for c in host["conditions"]):
        out.append(Finding("contradicts_event", f"{where}.scope.conditions",
                           f"event {claim.seq} ran under {host['conditions']}, the claim says {got_conditions}"))
    if [str(s) for s in scope.get("selection") or []] != host["selection"]:
        out.append(Finding("contradicts_event", f"{where}.scope.selection",
                           f"event {claim.seq} selected {host['selection']}, the claim says {scope.get('selection')}"))
    return out


def _claim_findings(i: int, c: Mapping[str, Any], by_seq: Mapping[int, Claim], current: Mapping[str, int]) -> list[Finding]:
    where = f"claims[{i}]"
    claim = by_seq.get(c.get("event_seq"))  # type: ignore[arg-type]
    if claim is None:
        return [Finding("no_evidence", where, f"event {c.get('event_seq')} is not a logged tool result")]
    out: list[Finding] = []

    def differ(name: str, got: Any, logged: Any) -> None:
        out.append(Finding("contradicts_event", f"{where}.{name}",
                           f"event {claim.seq}: logged {name} {logged!r}, the claim says {got!r}"))

    if _norm(c.get("operation", "")) != _norm(claim.command):
        differ("operation", c.get("operation"), claim.command)
    if c.get("exit_status") != claim.exit_status:
        differ("exit_status", c.get("exit_status"), claim.exit_status)
    logged_tests, tests = _tests_of(claim), c.get("tests")
    if logged_tests is None and tests is not None:
        differ("tests", tests, None)
    elif logged_tests is not None:
        if not isinstance(tests, Mapping):
            differ("tests", tests, logged_tests)
        else:
            for key in ("outcome", "ran", "passed", "failed", "errors"):
                if tests.get(key) != logged_tests[key]:
                    differ(f"tests.{key}", tests.get(key), logged_tests[key])
            if sorted(map(str, tests.get("failed_ids") or [])) != sorted(logged_tests["failed_ids"]):
                differ("tests.failed_ids", tests.get("failed_ids"), logged_tests["failed_ids"])
    if c.get("artifact") != claim.artifact:
        differ("artifact", c.get("artifact"), claim.artifact)
    if c.get("revision") != claim.revision:
        differ("revision", c.get("revision"), claim.revision)
    out += _scope_findings(where, c.get("scope"), claim)
    out += _prose_findings(where, str(c.get("text", "")), claim)
    if c.get("current") is True:
        if claim.test_run is not None or claim.artifact is None:
            stale = {a: r for a, r in claim.scope.revisions if current.get(a) != r}
            newer = {a: r for a, r in current.items() if dict(claim.scope.revisions).get(a) != r}
            if stale or newer:
                out.append(Finding("needs_current_evidence", where,
                                   f"event {claim.seq} ran on {[f'{a}@r{r}' for a, r in claim.scope.revisions]}; the "
                                   f"workspace is now {[f'{a}@r{r}' for a, r in sorted(current.items())]}"))
        elif current.get(claim.artifact, 0) != claim.revision:
            out.append(Finding("needs_current_evidence", where,
                               f"event {claim.seq} read {claim.artifact}@r{claim.revision}; it is now "
                               f"@r{current.get(claim.artifact, 0)}"))
    return out


def _notes_findings(candidate: Mapping[str, Any], events: Sequence[Event]) -> list[Finding]:
    notes = current_notes(events)
    out: list[Finding] = []
    for name, host in (("hypotheses", [{"key": h.key, "text": h.text, "status": h.status,
                                        "depends_on": list(h.depends_on)} for h in notes.hypotheses]),
                       ("obligations", [{"key": o.key, "text": o.text, "status": o.status} for o in notes.obligations])):
        got = {str(x.get("key")): x for x in candidate.get(name, []) if isinstance(x, Mapping)}
        for entry in host:
            mine = got.pop(str(entry["key"]), None)
            if mine is None or {k: mine.get(k) for k in entry} != entry:
                out.append(Finding("missing_or_altered", f"{name}:{entry['key']}",
                                   f"{name[:-1]} {entry['key']!r} must read {entry}, the candidate has {mine}"))
        for key in got:
            out.append(Finding("no_evidence", f"{name}:{key}", f"no logged {name[:-1]} has key {key!r}"))
    return out


def audit_candidate(candidate: Any, *, events: Sequence[Event], contract: Contract,
                    folded_seqs: Iterable[int] | None = None) -> list[Finding]:
    """Listing 2 on a candidate record (any JSON value; the module docstring lists the
    checks). ``events``: the session's whole log up to the pass (the current workspace is
    its last writes); ``folded_seqs``: the events the record replaces (default: all), whose
    protected fields it must keep. Returns the findings; empty admits the candidate.
    Pure; raises nothing; O(events + payloads)."""
    found = schema_findings(candidate)
    if found:
        return found
    events = list(events)
    folded = _folded(events, folded_seqs)
    current = _current_revisions(events)
    out: list[Finding] = []
    # 1. required fields
    if candidate["contract_version"] != contract.contract_version:
        out.append(Finding("missing_or_altered", "contract_version",
                           f"the contract is version {contract.contract_version}, the candidate says "
                           f"{candidate['contract_version']}"))
    got = {str(c["id"]): c["text"] for c in candidate["constraints"]}
    for c in contract.constraints:
        if got.pop(c.id, None) != c.text:
            out.append(Finding("missing_or_altered", f"constraint:{c.id}", f"constraint {c.id} must read {c.text!r}"))
    out += [Finding("no_evidence", f"constraint:{k}", f"the contract has no constraint {k!r}") for k in got]
    artifacts = sorted((str(a["artifact"]), a["revision"]) for a in candidate["artifacts"])
    if artifacts != sorted(current.items()):
        out.append(Finding("missing_or_altered", "artifacts",
                           f"current artifacts are {[f'{a}@r{r}' for a, r in sorted(current.items())]}, the candidate "
                           f"says {[f'{a}@r{r}' for a, r in artifacts]}"))
    out += _notes_findings(candidate, events)
    inventory = protected_inventory(events, contract).restricted_to(folded)
    out += [Finding("missing_or_altered" if f.kind == "lost" else f.kind, f.field, f.detail)
            for f in check_protected(inventory, candidate_texts(candidate))
            if not f.field.startswith("constraint:")]  # constraints were compared exactly above
    # 2. claims against their events, 3. current-state claims
    by_seq = {c.seq: c for c in claims_of(events)}
    for i, claim in enumerate(candidate["claims"]):
        out += _claim_findings(i, claim, by_seq, current)
    return out


# --- the summarizer's input ----------------------------------------------------------------

def estimate_tokens(text: str) -> int:
    """A conservative token estimate for a model whose tokenizer ctxd does not have: one
    token per 3 UTF-8 bytes, rounded up (BPE tokenizers average about 4 bytes per token on
    English and code, fewer on other scripts, which UTF-8 makes longer in bytes)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 3)


def evidence_items(events: Sequence[Event], folded_seqs: Iterable[int] | None = None, *,
                   max_line_chars: int = 300) -> list[dict[str, Any]]:
    """What the summarizer reads about each folded event, in seq order: a tool result as
    its logged claim (command, exit status, test run, binding, scope) plus failure lines;
    a message as its role and text (cut at ``max_line_chars``); a note as its fields."""
    folded = _folded(events, folded_seqs)
    claims = {c.seq: c for c in claims_of(events)}
    out: list[dict[str, Any]] = []
    for e in sorted(events, key=lambda e: e.seq):
        if e.seq not in folded:
            continue
        if isinstance(e, ToolResultEvent) and e.seq in claims:
            out.append({"seq": e.seq, **{k: v for k, v in claim_entry(claims[e.seq]).items()
                                         if k not in ("event_seq", "text", "current")}})
        elif isinstance(e, MessageEvent):
            text = e.content if len(e.content) <= max_line_chars else e.content[:max_line_chars] + " [cut]"
            out.append({"seq": e.seq, "role": e.role, "text": text})
        elif e.kind in ("hypothesis", "obligation", "step"):
            out.append({"seq": e.seq, "kind": e.kind, "text": getattr(e, "text", "")})
    return out


SYSTEM_PROMPT: Final = (
    "You write the progress record of one compaction pass over a coding agent's context, as JSON under the given "
    "schema. The pass folds the agent's older events (listed to you as Events, each with its seq) out of the "
    "agent's context; your record replaces exactly those folded events there, within the token budget given, so it "
    "keeps what the agent still needs of them: results, failures, hypotheses and open work. The record so far is "
    "the host's own record of the same fold: copy its contract_version, task, constraints, artifacts, hypotheses "
    "and obligations exactly. Write one claim per folded event you mention, citing its seq as event_seq, and copy "
    "operation, exit_status, tests, artifact, revision and scope exactly from that event's evidence; keep every "
    "failed test id and assertion line in evidence. A claim's text says only what that event shows, in few words: "
    "a run of one test is not the suite; a failed or errored run did not pass. Set current to true only for "
    "evidence recorded at the current artifact revisions. Never invent events, tests, constraints or results.")


def _chunk_prompt(record: Mapping[str, Any], items: Sequence[Mapping[str, Any]], *, part: int, parts: int,
                  omitted: int, findings: Sequence[Finding], budget_tokens: int | None = None) -> str:
    lines = [(f"Part {part} of {parts} of the events this pass folds. Update the record with these events and "
              "return the whole record.")]
    if budget_tokens is not None:
        lines.append(f"Budget: the record's text (without the constraints) must fit {budget_tokens} tokens.")
    if omitted:
        lines.append(f"{omitted} older folded event(s) are left out to fit your input; the host record already "
                     "covers them.")
    if findings:
        lines.append("The host audit rejected your previous record. Fix every finding:")
        lines += [f"- {f.kind} {f.field}: {f.detail}" for f in findings]
    lines.append("Record so far:\n" + json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    lines.append("Events:\n" + "\n".join(json.dumps(i, ensure_ascii=False, separators=(",", ":")) for i in items))
    return "\n".join(lines)


def summarizer_chunks(record: Mapping[str, Any], items: Sequence[Mapping[str, Any]], *, max_input_tokens: int,
                      max_chunks: int = 4, findings: Sequence[Finding] = (),
                      estimate: Callable[[str], int] = estimate_tokens) -> list[list[Mapping[str, Any]]]:
    """``items`` cut into at most ``max_chunks`` chunks such that the system prompt, the
    record (``record``; it comes back grown by the model's prose, so its estimate
    counts 1.5 times) and each chunk fit ``max_input_tokens`` (estimated
    by ``estimate``). An item alone over the room is dropped; when more chunks would be
    needed, the oldest items are dropped (the host record covers them). Returns the
    chunks (possibly one empty chunk). Raises ValueError when the system prompt and the
    record alone do not fit."""
    fixed = estimate(SYSTEM_PROMPT) + 3 * estimate(_chunk_prompt(record, [], part=9, parts=9, omitted=99999,
                                                                 findings=findings, budget_tokens=10**9)) // 2 + 16
    room = max_input_tokens - fixed
    if room <= 0:
        raise ValueError(f"the summarizer's input cap of {max_input_tokens} tokens does not hold the record "
                         f"({fixed} tokens estimated)")
    chunks: list[list[Mapping[str, Any]]] = []
    size = 0
    for item in reversed(items):  # newest first, so what is dropped is the oldest
        cost = estimate(json.dumps(item, ensure_ascii=False, separators=(",", ":"))) + 1
        if cost > room:
            continue
        if not chunks or size + cost > room:
            if len(chunks) == max_chunks:
                break
            chunks.append([])
            size = 0
        chunks[-1].insert(0, item)
        size += cost
    chunks.reverse()
    return chunks or [[]]


def chunk_messages(record: Mapping[str, Any], chunk: Sequence[Mapping[str, Any]], *, part: int, parts: int,
                   omitted: int = 0, findings: Sequence[Finding] = (),
                   budget_tokens: int | None = None) -> list[dict[str, str]]:
    """The chat messages of one summarizer request (system + user): the pass's folded
    events of this chunk, the record so far and, when given, the record budget (tokens of
    the profile's tokenizer)."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": _chunk_prompt(record, chunk, part=part, parts=parts, omitted=omitted,
                                                      findings=findings, budget_tokens=budget_tokens)}]
