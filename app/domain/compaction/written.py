"""Which progress record a compaction pass writes into the trunk: the deterministic one
(:mod:`app.domain.compaction.record`) or a model-written candidate admitted by the host
audit (issue 10 item 6; seed 000 section 4.6.2, listing 2).

A summarizer's candidate is asked for after a POST, for exactly the pass the next GET would
run (its folded seqs and contract version, planned by the same planner version), and
audited against that pass's host inventory (:func:`app.domain.audit.audit_candidate`). The
outcome is a :class:`RecordSource`. A GET's pass uses it only when its own fold matches
exactly (:meth:`RecordSource.matches`): same folded seqs, same contract version (the
planner version is checked by the caller, which knows it); otherwise, or when the
candidate was rejected, the deterministic record. The trunk then names which record it
holds: ``model`` (admitted after N rejected candidates) or ``deterministic`` (with the
rejection findings, when a candidate was rejected).

A model-written trunk keeps what the host owns: the contract is rendered from the session
(never from the model), and the handles of every folded output come from the host's own
record (the lineage invariant), after the candidate's sections.

Standard library only; pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.domain.compaction.lineage import SHORT_HANDLE
from app.domain.compaction.record import ProgressRecord
from app.domain.compaction.user_text import render_user_section
from app.domain.layout import render_contract
from app.domain.types import Contract

__all__ = ["RecordSource", "render_written_record"]

SourceName = Literal["model", "deterministic"]
FINDINGS_SHOWN: Final = 20  # findings a source keeps per rejected candidate (the manifest's bound)


@dataclass(frozen=True)
class RecordSource:
    """The outcome of asking a summarizer for the record of one pass.

    ``source``: ``model`` (``candidate`` admitted by the audit) or ``deterministic`` (every
    candidate rejected, or the summarizer failed: ``error``); ``folded_seqs`` and
    ``contract_version``: the pass it was asked and audited for; ``planner_version``: the
    planner that computed that pass; ``rejections``: the findings of each rejected
    candidate, in order (strings ``kind field: detail``, at most :data:`FINDINGS_SHOWN`
    each); ``waited_seconds``: how long the GET that runs the pass waited for the
    summarizer's job of this fold (None: it did not wait), ``wait_ran_out``: the wait's
    bound passed with the job still in flight (the record is then the deterministic one).
    The wait is said by the pass that waited only (:meth:`from_dict` drops it)."""

    source: SourceName
    folded_seqs: tuple[int, ...]
    contract_version: int
    planner_version: int
    candidate: Mapping[str, Any] | None = None
    rejections: tuple[tuple[str, ...], ...] = ()
    error: str | None = None
    waited_seconds: float | None = None
    wait_ran_out: bool = False

    def matches(self, record: ProgressRecord) -> bool:
        """Whether this outcome is for exactly ``record``'s fold: the same folded seqs and
        contract version."""
        return self.folded_seqs == tuple(record.folded_seqs) and self.contract_version == record.contract_version

    def as_dict(self) -> dict[str, Any]:
        """JSON form; ``wait`` ({seconds, ran_out}) only when the pass's GET waited."""
        out = {"source": self.source, "folded_seqs": list(self.folded_seqs),
               "contract_version": self.contract_version, "planner_version": self.planner_version,
               "candidate": dict(self.candidate) if self.candidate is not None else None,
               "rejected_candidates": len(self.rejections), "rejections": [list(r) for r in self.rejections],
               "error": self.error}
        if self.waited_seconds is not None:
            out["wait"] = {"seconds": self.waited_seconds, "ran_out": self.wait_ran_out}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecordSource:
        """The value :meth:`as_dict` wrote. Raises ValueError, KeyError or TypeError on
        another shape."""
        source = str(data["source"])
        if source not in ("model", "deterministic"):
            raise ValueError(f"unknown record source {source!r}")
        candidate = data.get("candidate")
        return cls(source="model" if source == "model" else "deterministic",
                   folded_seqs=tuple(int(s) for s in data["folded_seqs"]),
                   contract_version=int(data["contract_version"]), planner_version=int(data["planner_version"]),
                   candidate=dict(candidate) if isinstance(candidate, Mapping) else None,
                   rejections=tuple(tuple(str(f) for f in r) for r in data.get("rejections") or ()),
                   error=None if data.get("error") is None else str(data["error"]))

    def provenance(self) -> dict[str, Any]:
        """What the manifest and the record endpoint say of the record used: ``source``,
        the candidates rejected before (``rejected_candidates``, N), their findings and
        the summarizer's error, if any (the candidate itself is in the record)."""
        return {"source": self.source, "rejected_candidates": len(self.rejections),
                "rejections": [list(r) for r in self.rejections], "error": self.error}


def _tests(tests: Any) -> str:
    if not isinstance(tests, Mapping):
        return ""
    counts = ", ".join(f"{name} {tests.get(name)}" for name in ("ran", "passed", "failed", "errors")
                       if tests.get(name) is not None)
    failed = " ".join(str(t) for t in tests.get("failed_ids") or [])
    return f"; tests: {tests.get('outcome')}" + (f" ({counts})" if counts else "") + \
        (f"; failed ids: {failed}" if failed else "")


def _claim_lines(claim: Mapping[str, Any]) -> list[str]:
    found = claim.get("scope")
    scope: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    exit_status = claim.get("exit_status")
    line = f"- seq {claim.get('event_seq')} `{' '.join(str(claim.get('operation', '')).split())}` -> " + \
        (f"exit {exit_status}" if exit_status is not None else "no exit code")
    if claim.get("artifact") is not None:
        line += f" at {claim.get('artifact')}@r{claim.get('revision')}"
    line += _tests(claim.get("tests"))
    revisions = [f"{r.get('artifact')}@r{r.get('revision')}" for r in scope.get("revisions") or []
                 if isinstance(r, Mapping)]
    conditions = [f"{c.get('key')}={c.get('value')}" for c in scope.get("conditions") or [] if isinstance(c, Mapping)]
    selection = [str(s) for s in scope.get("selection") or []]
    if revisions:
        line += "; workspace " + ", ".join(revisions)
    if conditions:
        line += "; " + "; ".join(conditions)
    if selection:
        line += "; selected " + " ".join(selection)
    # ``current`` is not shown: the trunk outlives the pass, and a later write would make it
    # wrong; the revisions above scope the claim (notices name later writes, issue 11)
    out = [line]
    text = " ".join(str(claim.get("text", "")).split())
    if text:
        out.append(f"  seq {claim.get('event_seq')}: {text}")
    out += [f"    ! {e}" for e in claim.get("evidence") or []]
    return out


def _handle_lines(record: ProgressRecord) -> list[str]:
    """The host's index of the folded turns: each entry's seqs and handles (a coarse entry
    names its index payload)."""
    out = []
    for entry in record.folded:
        if entry.groups > 1 and entry.index:
            out.append(f"- seq {entry.first_seq}-{entry.last_seq}: {entry.groups} turn groups, handles in index "
                       f"{entry.index[:SHORT_HANDLE]}")
            continue
        handles = [*(h[:SHORT_HANDLE] for h in entry.turn_handles),
                   *(o.handle[:SHORT_HANDLE] for o in entry.observations)]
        out.append(f"- seq {entry.first_seq}-{entry.last_seq}: handles {' '.join(handles)}")
    return out


def render_written_record(contract: Contract, candidate: Mapping[str, Any], record: ProgressRecord, *,
                          rejected: int = 0, with_contract: bool = True, with_user_text: bool = True) -> str:
    """The trunk text of a pass that uses an admitted ``candidate`` (candidate schema,
    :data:`app.domain.audit.CANDIDATE_SCHEMA`): the session's ``contract`` (verbatim, from
    the host), then the candidate's artifacts, claims (one line per claim naming its event,
    exit status, revisions, run conditions, selection and tests; its text; its evidence
    lines), hypotheses, obligations and next step, then the host's handles of everything
    ``record`` (the deterministic record of the same fold) folds. ``rejected``: the
    candidates the audit rejected before this one (said in the heading).
    ``with_contract=False``: the record's own part; with ``with_user_text=False`` too, what
    the record budget bounds. The section "What the user said" is the deterministic record's,
    copied verbatim (the summarizer never writes it), between the folded turns and the next step."""
    last = max(record.folded_seqs) if record.folded_seqs else 0
    admitted = f"after {rejected} rejected candidate(s)" if rejected else "at the first candidate"
    lines = ["# Progress record (model-written)",
             (f"Written by a summarizer from the event log, events seq 1-{last} (contract version "
             f"{record.contract_version}), admitted by ctxd's audit against that log {admitted}. Every folded output "
             "is whole behind its handle: GET /v1/handles/<handle> (prefixes accepted).")]
    artifacts = [f"{a.get('artifact')}@r{a.get('revision')}" for a in candidate.get("artifacts") or []
                 if isinstance(a, Mapping)]
    if artifacts:
        lines += ["", "## Artifacts (path@revision)", ", ".join(artifacts)]
    claims: Sequence[Any] = candidate.get("claims") or []
    if claims:
        lines += ["", "## Claims (each cites its event)"]
        for claim in claims:
            if isinstance(claim, Mapping):
                lines += _claim_lines(claim)
    for key, title in (("hypotheses", "Hypotheses"), ("obligations", "Unresolved obligations")):
        notes = [n for n in candidate.get(key) or [] if isinstance(n, Mapping)]
        if notes:
            lines += ["", f"## {title}"] + [f"- [{n.get('key')}] ({n.get('status')}) {n.get('text')}" for n in notes]
    handles = _handle_lines(record)
    if handles:
        lines += ["", "## Folded turns (host index: seqs and handles)", *handles]
    user = render_user_section(record.user_text) if with_user_text else []
    if user:
        lines += ["", *user]
    step = " ".join(str(candidate.get("next_step") or "").split())
    if step:
        lines += ["", "## Next bounded step", step]
    return (render_contract(contract) + "\n\n" if with_contract else "") + "\n".join(lines)
