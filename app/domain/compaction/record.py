"""The progress record: what a compaction pass folds the leaf's older turn groups into
(seed 000 section 4.6, table 7; issue 10 item 4).

Built deterministically from the raw event log at every pass, never from the previous
record: :func:`build_record` is a pure function of the task contract, the events before
the fold point (``fold_seq``: the first event still verbatim in the leaf) and the record's
budget. So the record changes only when the fold point moves (a pass), and every event
before the fold point is folded into it, listed by seq (the lineage invariant, item 7).

Fields (table 7):

* task and constraints: copied from the contract (never from a model), verbatim;
* artifact identities: ``path@rN`` from the read bindings and writes folded;
* supported observations: what the folded tool results showed, each citing its event seqs
  and its scope (the artifact revision it read; run conditions);
* hypotheses and unresolved obligations: the current value of each key (a later event of
  the same key supersedes an earlier one);
* the next bounded step (the latest step event folded);
* the plan (issue 16): the latest plan version folded, verbatim; the conclusions of child
  sessions folded, one line each with the child and the handle; retrieved documents
  replaced before the fold point, one line each with their handle (a current document is
  never folded: it stays next to the instruction);
* the handles of everything folded: one entry per folded turn group, or, past the
  record's budget, coarser entries (a range of groups on one line naming the index
  payload that lists their handles), oldest first.

The record names the ``contract_version`` it was built against. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from app.domain.compaction.evidence import Claim, claims_of
from app.domain.compaction.lineage import SHORT_HANDLE, cut_line, split_lines
from app.domain.compaction.user_text import (
    SECTION_TOKENS,
    UserSection,
    UserTextMemo,
    protect_user_text,
    render_user_section,
)
from app.domain.layout import render_contract
from app.domain.notes import bounded_note, current_notes
from app.domain.scratchpad import current_documents, latest_plan
from app.domain.types import (
    ArtifactWriteEvent,
    ChildConclusionEvent,
    Constraint,
    Contract,
    Event,
    StepEvent,
    ToolResultEvent,
    TurnGroup,
)

__all__ = ["ArtifactIdentity", "FoldedEntry", "Note", "Observation", "ProgressRecord", "build_record",
           "call_text", "longest", "render_record"]

COMMAND_CHARS: Final = 160  # characters of a command an entry shows (cut with a marker beyond)
RECORD_VERSION: Final = 1


@dataclass(frozen=True)
class ArtifactIdentity:
    """``path@r{revision}`` as of the fold point; ``seq``: the last folded event that read
    or wrote it; ``written``: whether a folded write produced this revision."""

    path: str
    revision: int
    seq: int
    written: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "revision": self.revision, "seq": self.seq, "written": self.written}


@dataclass(frozen=True)
class Observation:
    """One supported observation: a folded tool result as the log proves it
    (:func:`app.domain.compaction.evidence.claims_of`), citing its event seqs (the call's
    message, the result) and its scope: the command, exit status, the ``artifact@rN`` it
    read (when bound), its run conditions (``key=value``), the test run (outcome, counts,
    failed and selected test ids) and its assertion / exception lines, and its handle.
    ``protected``: it carries protected fields (a test run, a failed result, run
    conditions), so a coarse entry still lists it."""

    seqs: tuple[int, ...]
    command: str
    exit_code: int | None
    bytes: int
    lines: int
    handle: str
    scope: str | None = None
    conditions: tuple[str, ...] = ()
    tests: str = ""
    test_ids: tuple[str, ...] = ()
    failure_lines: tuple[str, ...] = ()
    protected: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"seqs": list(self.seqs), "command": self.command, "exit_code": self.exit_code, "bytes": self.bytes,
                "lines": self.lines, "handle": self.handle, "scope": self.scope, "conditions": list(self.conditions),
                "tests": self.tests, "test_ids": list(self.test_ids), "failure_lines": list(self.failure_lines),
                "protected": self.protected}


@dataclass(frozen=True)
class Note:
    """A hypothesis or obligation as of the fold point (its latest event by key)."""

    kind: str
    key: str
    text: str
    status: str
    seq: int
    depends_on: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "text": self.text, "status": self.status, "seq": self.seq,
                "depends_on": list(self.depends_on)}


@dataclass(frozen=True)
class FoldedEntry:
    """Folded turn groups as the record lists them: one group (``groups == 1``, its
    observations in full) or a coarse range of groups on one line (``index``: the handle
    of the payload listing their turn and result handles). ``seqs``: every folded event
    of the entry (messages and results)."""

    first_seq: int
    last_seq: int
    groups: int
    seqs: tuple[int, ...]
    observations: tuple[Observation, ...] = ()
    turn_handles: tuple[str, ...] = ()
    index: str | None = None
    summary: str = ""
    user: bool = False  # one group: a user message (its words in the section "What the user said")

    def as_dict(self) -> dict[str, Any]:
        return {"first_seq": self.first_seq, "last_seq": self.last_seq, "groups": self.groups, "seqs": list(self.seqs),
                "observations": [o.as_dict() for o in self.observations], "turn_handles": list(self.turn_handles),
                "index": self.index, "summary": self.summary}


@dataclass(frozen=True)
class ProgressRecord:
    """Table 7 as a typed value (module docstring). ``fold_seq``: the first event not
    folded (0 when nothing is); ``folded_seqs``: every event folded into the record
    (groups, writes, steps, notes); ``tokens``: its rendered text's tokens (profile
    tokenizer) and ``budget`` the record budget it was built within; ``collapsed``: how
    many of the oldest folded groups share coarse entries."""

    contract_version: int
    goal: str
    constraints: tuple[Constraint, ...]
    fold_seq: int
    artifacts: tuple[ArtifactIdentity, ...] = ()
    observations: tuple[Observation, ...] = ()
    hypotheses: tuple[Note, ...] = ()
    obligations: tuple[Note, ...] = ()
    next_step: tuple[int, str] | None = None
    plan: tuple[int, int, str] | None = None  # (seq, version, text) of the latest plan version folded
    conclusions: tuple[tuple[int, str, str, str], ...] = ()  # (seq, child, handle, first line) folded
    documents: tuple[tuple[int, str, str, str], ...] = ()  # (seq, key, source, handle) replaced and folded
    names: tuple[str, ...] = ()
    folded: tuple[FoldedEntry, ...] = ()
    folded_seqs: tuple[int, ...] = ()
    collapsed: int = 0
    #: past its budget with every group collapsed (the floor): the coarse entry's results whose
    #: only protected fields are their exit status (and revision) share one line per status and
    #: scope (issue 10 item 3)
    terse: bool = False
    tokens: int = 0
    budget: int = 0
    index_payloads: Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: what the user said in the folded turns (:mod:`app.domain.compaction.user_text`): its own
    #: budget beside ``budget``; ``tokens`` counts the record without it
    user_text: UserSection = field(default_factory=UserSection)
    #: which record the trunk holds (issue 10 item 6): None for the deterministic one asked of
    #: no summarizer; else :meth:`app.domain.compaction.written.RecordSource.as_dict` (``model``:
    #: an admitted candidate, rendered instead; ``deterministic``: with the rejection findings)
    source: Mapping[str, Any] | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (``GET /v1/sessions/{id}/record``); ``source`` says which record the
        trunk holds (``deterministic`` unless a summarizer's candidate was admitted)."""
        return {
            "version": RECORD_VERSION,
            "contract_version": self.contract_version,
            "task": {"goal": self.goal, "constraints": [{"id": c.id, "text": c.text} for c in self.constraints]},
            "fold_seq": self.fold_seq,
            "artifacts": [a.as_dict() for a in self.artifacts],
            "observations": [o.as_dict() for o in self.observations],
            "hypotheses": [h.as_dict() for h in self.hypotheses],
            "obligations": [o.as_dict() for o in self.obligations],
            "next_step": {"seq": self.next_step[0], "text": self.next_step[1]} if self.next_step else None,
            "plan": {"seq": self.plan[0], "version": self.plan[1], "text": self.plan[2]} if self.plan else None,
            "conclusions": [{"seq": s, "child": c, "handle": h, "text": t} for s, c, h, t in self.conclusions],
            "documents": [{"seq": s, "key": k, "source": src, "handle": h} for s, k, src, h in self.documents],
            "names": list(self.names),
            "folded": [e.as_dict() for e in self.folded],
            "folded_seqs": list(self.folded_seqs),
            "collapsed_groups": self.collapsed,
            "user_text": {**self.user_text.as_dict(),
                          "entries": [{"seq": e.seq, "handle": e.handle, "text": e.text, "whole": e.whole}
                                      for e in self.user_text.entries]},
            "tokens": self.tokens,
            "budget": self.budget,
            "source": dict(self.source) if self.source is not None else {"source": "deterministic"},
        }


# --------------------------------------------------------------------------- building


def call_text(arguments: str) -> str:
    """What a tool call ran, for the record: the ``command`` of a JSON object's arguments
    (the bash tool's shape), else the arguments text itself, whitespace runs joined."""
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else arguments


def _one_line(text: str, limit: int) -> str:
    return cut_line(" ".join(text.split()), limit)


def _observation(claim: Claim, payload: str) -> Observation:
    """The record's observation of one claim (the full command is in the index payload
    and the call; a line shows at most ``COMMAND_CHARS`` characters of it)."""
    run = claim.test_run
    failed = claim.exit_status not in (None, 0) or (run is not None and run.outcome in ("failed", "error"))
    conditions = tuple(f"{k}={_shown(v)}" for k, v in claim.scope.conditions)
    tests = ""
    ids: tuple[str, ...] = ()
    if run is not None:
        counts = ", ".join(f"{n} {name}" for n, name in ((run.passed, "passed"), (run.failed, "failed"),
                                                         (run.errors, "errors"), (run.skipped, "skipped")) if n)
        tests = f"{run.runner} {run.outcome}" + (f" ({counts})" if counts else "") + ("" if run.complete else
                                                                                     ", partial output")
        ids = tuple(dict.fromkeys((*run.failed_ids, *run.error_ids,
                                   *(t for t in claim.scope.selection if "::" in t))))
    scope = f"{claim.artifact}@r{claim.revision}" if claim.artifact is not None and claim.revision is not None else None
    return Observation(seqs=tuple(s for s in (claim.call_seq, claim.seq) if s is not None),
                       command=_one_line(claim.command, COMMAND_CHARS), exit_code=claim.exit_status,
                       bytes=len(payload.encode("utf-8", "surrogatepass")), lines=len(split_lines(payload)),
                       handle=claim.handle, scope=scope, conditions=conditions, tests=tests, test_ids=ids,
                       failure_lines=claim.failure_lines, protected=bool(run is not None or failed or conditions))


def _shown(value: str) -> str:
    """A run condition's value as the protected-field inventory spells it (a JSON string
    unquoted, anything else as canonical JSON)."""
    loaded = json.loads(value)
    return loaded if isinstance(loaded, str) else value


def _artifacts(events: Sequence[Event]) -> tuple[ArtifactIdentity, ...]:
    """``path@rN`` of every artifact the folded events read or wrote: the revision after
    the last folded write (reads count revisions as ingestion numbers them)."""
    seen: dict[str, ArtifactIdentity] = {}
    for event in events:
        if isinstance(event, ArtifactWriteEvent):
            seen[event.artifact] = ArtifactIdentity(event.artifact, event.revision, event.seq, written=True)
        elif isinstance(event, ToolResultEvent):
            reads = [event.binding] if event.binding is not None else []
            for binding in reads:
                old = seen.get(binding.artifact)
                if old is None or binding.revision >= old.revision:
                    seen[binding.artifact] = ArtifactIdentity(binding.artifact, binding.revision, event.seq,
                                                              written=old is not None and old.written
                                                              and old.revision == binding.revision)
    return tuple(sorted(seen.values(), key=lambda a: a.path))


#: what the names index picks from the agent's folded messages and commands: paths, dotted
#: names, snake_case and CamelCase words (3 characters or more)
_NAME_RE: Final = re.compile(r"(?<![\w./-])(?:\.{1,2}/|/)?(?:[\w.-]+/)+[\w.-]*\w"
                             r"|(?<![\w./])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w/])|(?<![\w])[A-Za-z_]\w*(?![\w])")


#: escape sequences written inside the agent's strings (``printf "a\\nThe b"``): separators, so
#: ``\\nThe`` yields no name ``nThe`` and ``\\nfoo_bar`` yields ``foo_bar``
_ESCAPE_RE: Final = re.compile(r"\\[ntr]")


def _is_name(word: str) -> bool:
    """Paths and dotted names; snake_case words, including a leading underscore (``_eval``)
    and dunders (``__init__``); CamelCase words. 3 characters or more."""
    if len(word) < 3:
        return False
    if "/" in word or "." in word:
        return True
    core = word.strip("_")
    if not any(c.isalpha() for c in core):
        return False
    return "_" in core or (word.startswith("_") and len(core) >= 2) or (
        any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))


#: a Python traceback frame: ``File "path", line N, in function``, or pytest's ``path.py:N: in function``
_FRAME_RE: Final = re.compile(r'File "([^"\n]+)", line (\d+), in ([\w<>.]+)|^([\w./-]+\.py):(\d+): in (\w+)', re.MULTILINE)
FRAMES_PER_RESULT: Final = 3  # the innermost frames of a failed result the names index takes


def _frame_names(text: str) -> list[str]:
    """``path:line`` and the function of the innermost :data:`FRAMES_PER_RESULT` traceback
    frames of ``text`` (a failed result: where it failed), innermost first."""
    out: list[str] = []
    for m in reversed(_FRAME_RE.findall(text)[-FRAMES_PER_RESULT:]):
        path, line, func = (m[0], m[1], m[2]) if m[0] else (m[3], m[4], m[5])
        out += [f"{path.removeprefix('/testbed/')}:{line}", func]
    return out


def names_of(groups: Sequence[TurnGroup]) -> tuple[str, ...]:
    """The names (paths, dotted names, snake_case and CamelCase words) the agent wrote in
    the folded turns (its messages and its tool calls' commands), and the innermost
    traceback frames (``path:line``, function) of their failed results, newest first, each
    once: an index of what it worked with, each readable back through the handles above."""
    seen: dict[str, None] = {}
    for group in reversed(groups):
        texts = [group.message.content, *(call_text(c.arguments) for c in group.message.tool_calls)]
        frames = [n for r in group.results if r.exit_code not in (None, 0) for n in _frame_names(r.payload)]
        for name in frames:
            if name not in seen and len(name) >= 3 and "<" not in name:
                seen[name] = None
        for text in texts:
            for m in _NAME_RE.finditer(_ESCAPE_RE.sub(" ", text)):
                word = m.group(0)
                if _is_name(word) and word not in seen:
                    seen[word] = None
    return tuple(seen)


def _notes(events: Sequence[Event]) -> tuple[tuple[Note, ...], tuple[Note, ...]]:
    """Current hypotheses and obligations by key (:func:`app.domain.notes.current_notes`:
    a later event of a key supersedes the earlier one)."""
    notes = current_notes(events)
    return (tuple(Note("hypothesis", h.key, bounded_note(h.text, h.seq, "hypothesis"), h.status, h.seq, h.depends_on)
                  for h in notes.hypotheses),
            tuple(Note("obligation", o.key, bounded_note(o.text, o.seq, "obligation"), o.status, o.seq)
                  for o in notes.obligations))


def _group_entry(group: TurnGroup) -> FoldedEntry:
    payloads = {r.seq: r.payload for r in group.results}
    observations = tuple(_observation(c, payloads[c.seq]) for c in claims_of((group.message, *group.results)))
    return FoldedEntry(first_seq=group.first_seq, last_seq=max(group.seqs), groups=1, seqs=group.seqs,
                       observations=observations, turn_handles=(group.message.handle,),
                       user=group.message.role == "user")


def _range_entry(groups: Sequence[TurnGroup], entries: Sequence[FoldedEntry], index: str) -> FoldedEntry:
    """One line for several groups: how many, what commands ran (first word, counts), and
    the index payload naming their handles; the observations with protected fields (test
    runs, failed results, run conditions) are still listed, compactly, under it."""
    programs: dict[str, int] = {}
    for entry in entries:
        for o in entry.observations:
            words = o.command.split()
            name = next((w for w in words if w not in ("cd", "&&", "-c") and not w.startswith("/testbed")), "?")
            programs[name] = programs.get(name, 0) + 1
    top = sorted(programs.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    ran = ", ".join(f"{k} x{v}" for k, v in top) + (", ..." if len(programs) > len(top) else "")
    kept = sum(1 for e in entries for o in e.observations if o.protected)
    status = f"the other results exit 0 or have no exit code; the {kept} test runs, failures and results with " \
             "run conditions follow" if kept else "every result exit 0 or no exit code"
    seqs = tuple(s for e in entries for s in e.seqs)
    summary = f"{len(groups)} turn groups ({ran}); {status}"
    return FoldedEntry(first_seq=entries[0].first_seq, last_seq=entries[-1].last_seq, groups=len(groups), seqs=seqs,
                       observations=tuple(o for e in entries for o in e.observations),
                       turn_handles=tuple(h for e in entries for h in e.turn_handles), index=index, summary=summary)


def _index_payload(groups: Sequence[TurnGroup]) -> bytes:
    """Canonical JSON listing each group's turn handle and each call's command, result
    handle, exit code (the index a coarse entry names)."""
    out = []
    for group in groups:
        results = {r.call_id: r for r in group.results}
        out.append({"seq": group.message.seq, "turn": group.message.handle,
                    "calls": [{"call_id": c.call_id, "command": call_text(c.arguments),
                               "result": results[c.call_id].handle, "result_seq": results[c.call_id].seq,
                               "exit_code": results[c.call_id].exit_code}
                              for c in group.message.tool_calls if c.call_id in results]})
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


#: the folded plan takes at most 1/PLAN_SHARE of the record's budget (issue 16 item 1)
PLAN_SHARE: Final = 2


def longest(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in 0..n with ``fits(k)`` (``fits`` true for 0 and monotone)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit_plan(text: str, handle: str, limit_tokens: int, count: Callable[[str], int]) -> str:
    """The plan's text as the record folds it: verbatim when it counts at most
    ``limit_tokens``; else its first lines (up to two thirds of the limit) and last lines (up
    to a third), whole lines only, around one marker line naming how many lines and bytes
    were cut and the handle of the whole plan. Deterministic; ``count``: tokens of a text.

    Before: a 15,759-token plan was folded verbatim into a record of budget 1,500 (the
    record counted 16,006 tokens and task_state ran over its role limit unannounced)."""
    if count(text) <= limit_tokens:
        return text
    def marker(lines_cut: int, bytes_cut: int) -> str:
        return (f"[... {lines_cut:,} lines ({bytes_cut:,} bytes) of this plan cut here to fit the record; the "
                f"whole plan is handle {handle[:SHORT_HANDLE]} ...]")

    lines = text.split("\n")
    room = max(0, limit_tokens - count(marker(len(lines), len(text.encode()))) - 2)  # the marker and its newlines
    head = longest(len(lines), lambda k: count("\n".join(lines[:k])) <= room * 2 // 3)
    rest = lines[head:]
    tail = longest(len(rest), lambda k: k == 0 or count("\n".join(rest[len(rest) - k:])) <= room // 3)
    cut = rest[:len(rest) - tail]
    return "\n".join([*lines[:head], marker(len(cut), len("\n".join(cut).encode())), *rest[len(rest) - tail:]])


class RecordMemo(UserTextMemo, Protocol):
    """The session memo's fields this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    record_entries: dict[tuple[Any, ...], FoldedEntry]


def build_record(contract: Contract, events: Sequence[Event], groups: Sequence[TurnGroup], *, fold_seq: int,
                 budget_tokens: int, count: Callable[[str], int],
                 memo: RecordMemo | None = None, pinned: int | None = None,
                 user_text_tokens: int = SECTION_TOKENS) -> ProgressRecord:
    """The progress record of the events before ``fold_seq`` (module docstring).

    ``groups``: the session's turn groups in seq order (those starting before ``fold_seq``
    are folded); ``events``: the session's events (those before ``fold_seq`` are folded);
    ``count(text)``: tokens of a text on the profile's tokenizer; ``budget_tokens``: the
    record's own budget. The rendered record (:func:`render_record`, contract excluded:
    the contract is pinned whatever the budget) stays within the budget by collapsing the
    oldest per-group entries into one coarse entry, oldest first; if even the coarse entry
    alone leaves it over, it is kept over (the coarse entry is the floor). Deterministic.
    ``memo``: an optional mapping kept across calls (the session's leaf cache) holding each
    group's entry, so a pass digests only the groups it newly folds. ``pinned``: the first
    seq of a turn group kept verbatim in the leaf although it starts before the fold point
    (the newest user message): it is not folded. ``user_text_tokens``: the budget of the
    section "What the user said" (:func:`app.domain.compaction.user_text.protect_user_text`),
    which holds every folded user message and is not counted in ``budget_tokens``.
    """
    kept = {s for g in groups if g.first_seq == pinned for s in g.seqs}
    folded_all = [g for g in groups if g.first_seq < fold_seq and g.first_seq != pinned]
    grouped = {s for g in folded_all for s in g.seqs}
    # plan versions and child conclusions are groups of their own (app/domain/scratchpad.py):
    # folded into their own sections, not into per-turn entries
    folded_groups = [g for g in folded_all if g.message.kind == "message"]
    earlier = [e for e in events if e.seq < fold_seq and e.seq not in kept]
    plan = latest_plan(earlier)
    # documents replaced by a later document of the same key, both before the fold point (a
    # pure function of the events before it); current ones stay verbatim in the leaf
    documents = current_documents(earlier)
    folded_docs = tuple(documents.replaced)
    step = next((e for e in reversed(earlier) if isinstance(e, StepEvent)), None)
    hypotheses, obligations = _notes(earlier)
    record_entries = memo.record_entries if memo is not None else {}
    entries = []
    for g in folded_groups:
        key = (g.message.seq, g.message.handle, tuple((r.seq, r.handle) for r in g.results))
        entry = record_entries.get(key)
        if entry is None:
            entry = record_entries[key] = _group_entry(g)
        entries.append(entry)
    base = ProgressRecord(
        contract_version=contract.contract_version, goal=contract.goal, constraints=contract.constraints,
        fold_seq=fold_seq, artifacts=_artifacts(earlier), hypotheses=hypotheses, obligations=obligations,
        next_step=(step.seq, bounded_note(step.text, step.seq, "step")) if step is not None else None,
        budget=budget_tokens,
        user_text=protect_user_text([g.message for g in folded_groups if g.message.role == "user"], count=count,
                                    budget_tokens=user_text_tokens, memo=memo),
        plan=(plan.seq, plan.version, fit_plan(plan.text, plan.handle, budget_tokens // PLAN_SHARE, count))
        if plan is not None else None,
        conclusions=tuple((e.seq, e.child, e.handle, _one_line(e.text, COMMAND_CHARS)) for e in earlier
                          if isinstance(e, ChildConclusionEvent)),
        documents=tuple((d.seq, d.key, d.source, d.handle) for d in folded_docs),
        # every event of a folded group, and every other event before the fold point (writes,
        # steps, notes, replaced documents): messages, results, plans and conclusions before it
        # all belong to folded groups; a current document is not folded
        folded_seqs=tuple(sorted(grouped | {d.seq for d in folded_docs} | {
            e.seq for e in earlier if e.kind not in ("message", "tool_result", "plan", "child_conclusion",
                                                     "document")})),
    )

    # the names index takes at most a quarter of the budget, newest names first
    candidates = names_of(folded_groups)
    kept_names = longest(len(candidates), lambda k: count(", ".join(candidates[:k])) <= budget_tokens // 4)
    base = _replace(base, names=candidates[:kept_names])

    def with_collapsed(m: int) -> ProgressRecord:
        if m <= 1:
            folded, index = tuple(entries), {}
        else:
            payload = _index_payload(folded_groups[:m])
            handle = hashlib.sha256(payload).hexdigest()
            folded = (_range_entry(folded_groups[:m], entries[:m], handle), *entries[m:])
            index = {handle: payload}
        observations = tuple(o for e in folded for o in e.observations)
        return _replace(base, folded=folded, observations=observations, collapsed=m if m > 1 else 0,
                        index_payloads=index)

    def tokens(record: ProgressRecord) -> int:  # what the record budget bounds: the user's words apart
        return count(render_record(record, with_contract=False, with_user_text=False))

    record = with_collapsed(0)
    size = tokens(record)
    if size > budget_tokens and len(entries) > 1:
        lo, hi = 2, len(entries)  # smallest m (oldest groups collapsed) that fits; tokens fall as m grows
        best = None
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = with_collapsed(mid)
            n = tokens(candidate)
            if n <= budget_tokens:
                best, hi = (candidate, n), mid - 1
            else:
                lo = mid + 1
        if best is None:  # even the coarsest entry is over: the floor, made as small as protected fields allow
            best = _floor(with_collapsed(len(entries)), budget_tokens, tokens)
        record, size = best
    return _replace(record, tokens=size)


def _floor(record: ProgressRecord, budget_tokens: int,
           tokens: Callable[[ProgressRecord], int]) -> tuple[ProgressRecord, int]:
    """The record with every group collapsed, brought toward ``budget_tokens``: its
    exit-status-only results terse (one line per exit status and scope, each result named
    ``#seq``). What remains over the budget is protected (revisions, test ids, assertion
    lines, exit statuses) or the names index (at most a quarter of the budget), which is
    kept: cutting it to the budget cost 0.004 of grounding on the 32 shared traces for 0.3%
    of cost (README "Compaction")."""
    size = tokens(record)
    if size <= budget_tokens:
        return record, size
    terse = _replace(record, terse=True)
    if (n := tokens(terse)) < size:
        record, size = terse, n
    return record, size


def _replace(record: ProgressRecord, **changes: Any) -> ProgressRecord:
    from dataclasses import replace

    return replace(record, **changes)


# --------------------------------------------------------------------------- rendering


def _observation_line(o: Observation, *, compact: bool = False, suffix: str = "") -> str:
    """One observation: ``- seq N `command` -> exit M at path@rK; tests: ...; key=value;
    handle H`` and its assertion / exception lines below (``!``). ``compact`` (inside a
    coarse entry): the command cut shorter and no size. ``suffix`` ends the first line."""
    exit_part = f"exit {o.exit_code}" if o.exit_code is not None else "no exit code"
    scope = f" at {o.scope}" if o.scope else ""
    command = _one_line(o.command, 60) if compact else o.command
    size = "" if compact else f", {o.lines:,} lines, {o.bytes:,} bytes"
    extra = "".join(f"; {c}" for c in o.conditions)
    if o.tests:
        extra += f"; tests: {o.tests}"
    if o.test_ids:
        extra += "; test ids: " + " ".join(o.test_ids)
    line = f"{'  ' if compact else ''}- seq {o.seqs[-1]} `{command}` -> {exit_part}{scope}{size}{extra}; " \
           f"handle {o.handle[:SHORT_HANDLE]}{suffix}"
    return line + "".join(f"\n    ! {t}" for t in o.failure_lines)


def _exit_only(o: Observation) -> bool:
    """A protected observation whose only protected fields are its exit status and scope."""
    return not (o.tests or o.test_ids or o.failure_lines or o.conditions)


def _protected_lines(entry: FoldedEntry, *, terse: bool) -> list[str]:
    """The protected observations of a coarse entry: one compact line each, or with
    ``terse`` the exit-status-only ones sharing a line per (exit status, scope):
    ``- #24 #28 -> exit 1 at path@r0`` (each result named as the protected-field check reads
    it, :func:`app.domain.compaction.evidence.check_protected`)."""
    kept = [o for o in entry.observations if o.protected]
    if not terse:
        return [_observation_line(o, compact=True) for o in kept]
    shared: dict[tuple[int | None, str | None], list[Observation]] = {}
    lines: list[str] = []
    for o in kept:
        if _exit_only(o):
            shared.setdefault((o.exit_code, o.scope), []).append(o)
        else:
            lines.append(_observation_line(o, compact=True))
    for (code, scope), group in shared.items():
        exit_part = f"exit {code}" if code is not None else "no exit code"
        lines.append(f"  - {' '.join(f'#{o.seqs[-1]}' for o in group)} -> {exit_part}" + (f" at {scope}" if scope else ""))
    return lines


def render_record(record: ProgressRecord, *, with_contract: bool = True, with_user_text: bool = True) -> str:
    """The record as trunk text: the task contract (verbatim, with its version), then the
    record's sections; sections without content are left out. ``with_contract=False``
    renders the record's own part only; with ``with_user_text=False`` too, what its budget
    bounds (the section "What the user said" has its own).

    Order: what only grows between passes first (artifacts, plan, notes, the folded turns'
    observations, conclusions, documents), then what the user said (a pass appends to it), then
    the volatile part (the names index, the next step)."""
    parts: list[str] = [render_contract(Contract(record.goal, record.constraints, record.contract_version))] \
        if with_contract else []
    if not (record.folded or record.artifacts or record.hypotheses or record.obligations or record.next_step
            or record.plan or record.conclusions or record.documents or record.user_text.entries):
        return "\n".join(parts)
    last = max(record.folded_seqs) if record.folded_seqs else 0
    lines = ["# Progress record",
             (f"Built by ctxd from the event log, events seq 1-{last} (contract version {record.contract_version}). "
             "Every folded output is whole behind its handle: GET /v1/handles/<handle> (prefixes accepted).")]
    if record.artifacts:
        lines += ["", "## Artifacts (path@revision as of the fold)"]
        lines.append(", ".join(f"{a.path}@r{a.revision}" + (" (written)" if a.written else "") for a in record.artifacts))
    if record.plan:
        lines += ["", (f"## Plan (version {record.plan[1]}, seq {record.plan[0]}; the agent's own, verbatim; a "
                       "later version in the turns below replaces it)"), record.plan[2]]
    if record.hypotheses:
        lines += ["", "## Hypotheses"] + [f"- [{h.key}] ({h.status}, seq {h.seq}) {h.text}" for h in record.hypotheses]
    if record.obligations:
        lines += ["", "## Unresolved obligations"] + [f"- [{o.key}] ({o.status}, seq {o.seq}) {o.text}"
                                                      for o in record.obligations]
    if record.folded:
        lines += ["", "## Observations of the folded turns (command -> exit status, scope, size, handle)"]
        for entry in record.folded:
            if entry.groups > 1:
                lines.append(f"- seq {entry.first_seq}-{entry.last_seq}: {entry.summary}; turn and result handles "
                             f"in index {entry.index[:SHORT_HANDLE] if entry.index else '-'}")
                lines.extend(_protected_lines(entry, terse=record.terse))
            else:
                turn = f"turn seq {entry.first_seq}, handle {entry.turn_handles[0][:SHORT_HANDLE]}"
                if not entry.observations:
                    lines.append(f"- seq {entry.first_seq}: {turn} (" + (
                        "a user message: its words are under What the user said)" if entry.user else
                        "a message without tool calls)"))
                for i, o in enumerate(entry.observations):
                    lines.append(_observation_line(o, suffix=f" ({turn})" if i == 0 else ""))
    if record.conclusions:
        lines += ["", "## Conclusions of sub-agent sessions (child session, handle of the whole text)"]
        lines += [f"- seq {seq}: session {child}, handle {handle[:SHORT_HANDLE]}: {text}"
                  for seq, child, handle, text in record.conclusions]
    if record.documents:
        lines += ["", "## Retrieved documents replaced since (key, source, handle)"]
        lines += [f"- seq {seq} [{key}] {source}, handle {handle[:SHORT_HANDLE]}" for seq, key, source, handle in
                  record.documents]
    user = render_user_section(record.user_text) if with_user_text else []
    if user:
        lines += ["", *user]
    if record.names:
        lines += ["", "## Names in the folded turns (paths, modules, functions the agent wrote; newest first)",
                  ", ".join(record.names)]
    if record.next_step:
        lines += ["", "## Next bounded step (as of the fold)", f"(seq {record.next_step[0]}) {record.next_step[1]}"]
    parts.append("\n".join(lines))
    return "\n\n".join(parts)
