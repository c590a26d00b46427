"""The evidence layer: what the event log proves, and which fields a pass may never lose
(seed 000 sections 4.5.2 and 4.6.2, listing 2; issue 10 items 5 and 6).

* :func:`claims_of` derives one :class:`Claim` per tool result from the raw event log: the
  ``(operation, result, artifact, version, scope)`` tuple that listing 2 compares a model's
  claim with. ``operation`` is the bash command of the tool call, ``result`` its exit
  status and, for a test run, the :class:`TestRun` parsed from the output (test ids run,
  passed / failed / error counts, failed ids, assertion and exception lines).
* :func:`parse_test_run` reads real test-runner output: pytest (final summary line, ``-q``
  summary, ``-v`` lines, short test summary ``FAILED`` / ``ERROR`` lines, collection and
  conftest errors, "No module named pytest"), unittest / Django ``runtests.py`` ("Ran N
  tests", ``OK`` / ``FAILED (failures=.., errors=..)``, ``-v`` lines), sympy ``bin/test``
  ("tests finished: ..."), tox (``congratulations`` / ``commands failed``).
* :func:`protected_inventory` lists the protected fields (section 4.5.2): constraint texts
  from the session contract, test names, revisions ``path@rN``, run conditions, failed
  assertion lines and exit statuses. :func:`check_protected` says which of them a set of
  texts (a compacted request, a record) lost or altered.

Pipelines mask exit codes (``pytest ... | tail -50`` exits 0 even when pytest failed, as
in most test runs of the shared traces), so a test run's outcome comes from its output,
never from the exit status alone.

Standard library only; pure functions; nothing raises on any input text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.domain.types import ArtifactWriteEvent, Contract, Event, MessageEvent, ToolResultEvent

__all__ = [
    "Claim",
    "Finding",
    "ProtectedField",
    "ProtectedInventory",
    "Scope",
    "TestRun",
    "check_protected",
    "claims_of",
    "command_of_call",
    "is_test_command",
    "parse_test_run",
    "protected_inventory",
]

Outcome = Literal["passed", "failed", "error", "no_tests", "not_run", "unknown"]

MAX_LINE_CHARS: Final = 200  # assertion lines are kept as prefixes of at most this many characters
MAX_FAILURE_LINES: Final = 6  # assertion / exception lines kept per test run
MAX_IDS: Final = 2000  # test ids kept per run (a -v run of a large suite lists thousands)

# a simple command that runs tests: after optional "cd x &&", env assignments, timeout/env/xvfb-run
_TEST_COMMAND_RE: Final = re.compile(
    r"^(?:\w+=\S*\s+)*(?:(?:timeout|env|xvfb-run|nice|time)(?:\s+-\S+)*(?:\s+\d+[smh]?)?\s+)*"
    r"(?:python[\d.]*\s+(?:-[A-Za-z]+\s+)*(?:-m\s+(?:pytest|py\.test|unittest|nose|tox)\b"
    r"|\S*(?:runtests\.py|bin/test|manage\.py\s+test)\b)"
    r"|(?:\S*/)?(?:pytest|py\.test|tox|nosetests|runtests\.py)\b|(?:\./)?bin/test\b)")
_SEGMENT_SPLIT_RE: Final = re.compile(r"&&|\|\||;|\||\n|\(|\)")

# pytest: "==== 1 failed, 3 passed, 2 warnings in 0.12s ====" (also "(0:00:01)"), "-q": "53 passed in 0.47s"
_PYTEST_SUMMARY_RE: Final = re.compile(
    r"^=+ (?P<body>[^=\n]*?) in (?P<secs>[\d.]+)s(?: \([\d:.]+\))? =+\s*$"
    r"|^(?P<qbody>(?:\d+ [a-z]+(?:, )?)+|no tests ran) in (?P<qsecs>[\d.]+)s(?: \([\d:.]+\))?\s*$", re.MULTILINE)
_COUNT_RE: Final = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|rerun)")
_PYTEST_LINE_RE: Final = re.compile(
    r"^(?P<id>[\w./-]+\.py(?:::[^\s\[]+)+(?:\[[^\n]*?\])?)(?P<rest>.*?)\s"
    r"(?P<status>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$", re.MULTILINE)
_PYTEST_SHORT_RE: Final = re.compile(r"^(?P<status>FAILED|ERROR) (?P<id>[\w./-]+\.py(?:::[^\s\[]+)*(?:\[[^\n]*?\])?)"
                                     r"(?: - (?P<why>.*))?$", re.MULTILINE)
_COLLECTED_RE: Final = re.compile(r"^collect(?:ing \.\.\. collect)?ed (\d+) items?", re.MULTILINE)
_PYTEST_ERROR_RE: Final = re.compile(r"^ImportError while loading conftest|^ERROR: |^INTERNALERROR>|^_+ ERROR collecting",
                                     re.MULTILINE)
_PYTEST_MARK_RE: Final = re.compile(r"^=+ test session starts =+$|^ImportError while loading conftest", re.MULTILINE)
_RUNNER_MISSING_RE: Final = re.compile(r"No module named (?:pytest|nose|tox)\b|(?:pytest|tox|nosetests): command not found")
# unittest / Django runtests.py
_RAN_RE: Final = re.compile(r"^Ran (\d+) tests? in [\d.]+s", re.MULTILINE)
_UNITTEST_END_RE: Final = re.compile(r"^(?P<ok>OK|FAILED)(?: \((?P<details>[^)]*)\))?\s*$", re.MULTILINE)
_UNITTEST_LINE_RE: Final = re.compile(
    r"^(?P<name>\w+) \((?P<where>[\w.]+)\)(?:\n[^\n]*?)? \.\.\. (?P<status>ok|FAIL|ERROR|skipped|expected failure"
    r"|unexpected success)", re.MULTILINE)
_UNITTEST_HEAD_RE: Final = re.compile(r"^(?P<status>FAIL|ERROR): (?P<name>\w+) \((?P<where>[\w.]+)\)", re.MULTILINE)
# sympy bin/test: "tests finished: 5 passed, 1 failed, 2 skipped, in 1.23 seconds"
_SYMPY_RE: Final = re.compile(r"tests finished: (?P<body>.*?),? in [\d.]+ seconds", re.MULTILINE)
_SYMPY_FAIL_RE: Final = re.compile(r"^_+ (?P<id>[\w./]+\.py:\w+) _+$", re.MULTILINE)
_TOX_OK_RE: Final = re.compile(r"^\s*congratulations :\)|^\s*\S+: commands succeeded", re.MULTILINE)
_TOX_FAIL_RE: Final = re.compile(r"^ERROR:\s+\S+: commands failed", re.MULTILINE)
# failure lines: pytest "E   ..." lines naming an assertion or exception, "file:12: XError", tracebacks' last line
_FAILURE_LINE_RE: Final = re.compile(
    r"^(?:E\s+.*(?:\bassert\b|Error\b|Exception\b)|\S+:\d+: \w*(?:Error|Exception)\b|[\w.]*(?:Error|Exception)(?::|$)"
    r"|\s*assert .|FAILED: |(?:FAILED|ERROR) \S+ - |ERROR: (?:not found|file or directory not found)).*$", re.MULTILINE)


@dataclass(frozen=True)
class TestRun:
    """What one test-runner output shows.

    ``runner``: pytest | unittest | sympy | tox. ``outcome``: ``passed`` (tests ran, none
    failed or errored), ``failed`` (a test failed), ``error`` (an error: collection, import,
    conftest, runner crash), ``no_tests`` (the run selected nothing), ``not_run`` (the
    runner is not installed), ``unknown`` (no summary and no per-test line: a truncated or
    filtered output). ``complete``: the runner's final summary was seen, so the counts are
    totals; otherwise they count only the per-test lines shown (``head``/``tail`` cut the
    rest). Counts are None when unknown. ``ids``: test ids seen (``-v`` lines, failure
    lines), in order, at most 2,000; ``failed_ids`` / ``error_ids`` likewise.
    ``failure_lines``: assertion and exception lines (at most 6, each at most 200
    characters, the first and the last ones when there are more)."""

    __test__ = False  # not a pytest test class

    runner: str
    outcome: Outcome
    complete: bool
    passed: int | None = None
    failed: int | None = None
    errors: int | None = None
    skipped: int | None = None
    ids: tuple[str, ...] = ()
    failed_ids: tuple[str, ...] = ()
    error_ids: tuple[str, ...] = ()
    failure_lines: tuple[str, ...] = ()
    summary: str | None = None

    @property
    def ran(self) -> int | None:
        """Tests that ran (passed + failed + errors), when the counts are known."""
        if self.passed is None and self.failed is None and self.errors is None:
            return None
        return (self.passed or 0) + (self.failed or 0) + (self.errors or 0)

    def as_dict(self) -> dict[str, Any]:
        return {"runner": self.runner, "outcome": self.outcome, "complete": self.complete, "ran": self.ran,
                "passed": self.passed, "failed": self.failed, "errors": self.errors, "skipped": self.skipped,
                "ids": list(self.ids), "failed_ids": list(self.failed_ids), "error_ids": list(self.error_ids),
                "failure_lines": list(self.failure_lines), "summary": self.summary}


@dataclass(frozen=True)
class Scope:
    """The conditions a claim holds under (seed 000 section 4.6, the scope rule).

    ``revisions``: ``(artifact, revision)`` of every artifact the session had written when
    the result was logged, plus the result's binding, sorted: the workspace the evidence
    speaks for. ``conditions``: the result's run conditions as ``(key, canonical JSON
    value)`` pairs, sorted (the adapter's ``reads`` list is a binding, not a condition).
    ``selection``: the test targets named by the command (``path``, ``path::test``, ``-k``
    expressions), in command order."""

    revisions: tuple[tuple[str, int], ...] = ()
    conditions: tuple[tuple[str, str], ...] = ()
    selection: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"revisions": {a: r for a, r in self.revisions},
                "conditions": {k: json.loads(v) for k, v in self.conditions},
                "selection": list(self.selection)}


@dataclass(frozen=True)
class Claim:
    """What the log proves about one tool result (listing 2's ``event``).

    ``seq``: the tool result's seq; ``call_seq``: the assistant message that made the call;
    ``command``: the bash command (or the tool's arguments when it has none);
    ``exit_status``: the exit code (None when not logged); ``artifact`` / ``revision``: the
    result's binding (None without one); ``scope``: :class:`Scope`; ``test_run``: the
    parsed :class:`TestRun` when the command ran tests or the output is a runner's;
    ``handle``: the payload's handle; ``failure_lines``: assertion and exception lines
    of a test run or of a failed result (nonzero exit), as :attr:`TestRun.failure_lines`."""

    seq: int
    call_seq: int | None
    command: str
    exit_status: int | None
    artifact: str | None
    revision: int | None
    scope: Scope
    test_run: TestRun | None
    handle: str
    tool: str = "bash"
    failure_lines: tuple[str, ...] = ()

    @property
    def operation(self) -> str:
        return self.command

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "call_seq": self.call_seq, "tool": self.tool, "operation": self.command,
                "exit_status": self.exit_status, "artifact": self.artifact, "revision": self.revision,
                "scope": self.scope.as_dict(), "test_run": self.test_run.as_dict() if self.test_run else None,
                "handle": self.handle, "failure_lines": list(self.failure_lines)}


def command_of_call(name: str, arguments: str) -> str:
    """The command of a tool call: ``arguments``' ``command`` string when it is a JSON
    object that has one (the bash tool of mini-swe-agent), else the arguments text."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else arguments


def _test_segments(command: str) -> list[tuple[str, int]]:
    """(simple command, end of the runner's name in it) of each simple command of
    ``command`` that runs tests (split at ``&&``, ``||``, ``;``, ``|``, newlines and
    parentheses; heredoc bodies are not told apart, so a script line may count)."""
    out = []
    for segment in _SEGMENT_SPLIT_RE.split(command):
        segment = segment.strip()
        m = _TEST_COMMAND_RE.match(segment)
        if m is not None:
            out.append((segment, m.end()))
    return out


def is_test_command(command: str) -> bool:
    """True when a simple command of ``command`` invokes a test runner: ``pytest``,
    ``python -m pytest|unittest|nose|tox``, Django ``runtests.py``, sympy ``bin/test``,
    ``manage.py test``, ``tox``, ``nosetests`` (``pip install pytest`` does not)."""
    return bool(_test_segments(command))


def _cut(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS]


def _ends(items: Sequence[str], limit: int) -> tuple[str, ...]:
    """At most ``limit`` items: the first and the last ones, in order."""
    if len(items) <= limit:
        return tuple(items)
    head = (limit + 1) // 2
    return tuple(items[:head]) + tuple(items[len(items) - (limit - head):])


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _failure_lines(text: str) -> tuple[str, ...]:
    found = _unique(_cut(m.group(0)) for m in _FAILURE_LINE_RE.finditer(text))
    return _ends(found, MAX_FAILURE_LINES)


def _counts(body: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for number, word in _COUNT_RE.findall(body):
        key = {"error": "errors", "warning": "warnings"}.get(word, word)
        out[key] = out.get(key, 0) + int(number)
    return out


def _outcome(passed: int, failed: int, errors: int, *, selected_any: bool) -> Outcome:
    if failed:
        return "failed"
    if errors:
        return "error"
    return "passed" if passed else ("no_tests" if not selected_any else "passed")


def _parse_pytest(text: str) -> TestRun | None:
    summaries = list(_PYTEST_SUMMARY_RE.finditer(text))
    lines = list(_PYTEST_LINE_RE.finditer(text))
    shorts = list(_PYTEST_SHORT_RE.finditer(text))
    failure_lines = _failure_lines(text)
    ids: list[str] = _unique([m.group("id") for m in lines] + [m.group("id") for m in shorts])
    failed_ids = _unique([m.group("id") for m in lines if m.group("status") == "FAILED"]
                         + [m.group("id") for m in shorts if m.group("status") == "FAILED"])
    error_ids = _unique([m.group("id") for m in lines if m.group("status") == "ERROR"]
                        + [m.group("id") for m in shorts if m.group("status") == "ERROR"])
    if summaries:
        last = summaries[-1]
        body = last.group("body") if last.group("body") is not None else last.group("qbody")
        counts = _counts(body)
        passed, failed, errors = counts.get("passed", 0), counts.get("failed", 0), counts.get("errors", 0)
        if "no tests ran" in body or not (passed or failed or errors or counts.get("skipped") or counts.get("xfailed")
                                          or counts.get("xpassed")):
            outcome: Outcome = "error" if errors or _PYTEST_ERROR_RE.search(text) else "no_tests"
        else:
            outcome = _outcome(passed + counts.get("xpassed", 0), failed, errors, selected_any=True)
        return TestRun(runner="pytest", outcome=outcome, complete=True, passed=passed, failed=failed, errors=errors,
                       skipped=counts.get("skipped", 0), ids=tuple(ids[:MAX_IDS]), failed_ids=tuple(failed_ids[:MAX_IDS]),
                       error_ids=tuple(error_ids[:MAX_IDS]), failure_lines=failure_lines, summary=last.group(0).strip())
    if lines or shorts:  # a cut output: count what is shown
        statuses = [m.group("status") for m in lines]
        passed = statuses.count("PASSED") + statuses.count("XPASS")
        failed, errors = len(failed_ids), len(error_ids)
        return TestRun(runner="pytest", outcome=_outcome(passed, failed, errors, selected_any=True), complete=False,
                       passed=passed, failed=failed, errors=errors, skipped=statuses.count("SKIPPED"),
                       ids=tuple(ids[:MAX_IDS]), failed_ids=tuple(failed_ids[:MAX_IDS]),
                       error_ids=tuple(error_ids[:MAX_IDS]), failure_lines=failure_lines)
    return None


def _pytest_error(text: str, *, command_says: bool) -> TestRun | None:
    """A pytest run that stopped before its summary (conftest import error, internal
    error, runner crash): ``error`` with its failure lines."""
    failure_lines = _failure_lines(text)
    if (command_says or _PYTEST_MARK_RE.search(text)) and (_PYTEST_ERROR_RE.search(text) or failure_lines):
        collected = _COLLECTED_RE.search(text)
        return TestRun(runner="pytest", outcome="error", complete=False, failure_lines=failure_lines,
                       summary=_cut(collected.group(0)) if collected else None)
    return None


def _parse_unittest(text: str) -> TestRun | None:
    ran = _RAN_RE.search(text)
    lines = list(_UNITTEST_LINE_RE.finditer(text))
    heads = list(_UNITTEST_HEAD_RE.finditer(text))
    if ran is None and not lines and not heads:
        return None

    def ident(m: re.Match[str]) -> str:
        return f"{m.group('where')}.{m.group('name')}" if not m.group("where").endswith(m.group("name")) \
            else m.group("where")

    ids = _unique([ident(m) for m in lines] + [ident(m) for m in heads])
    failed_ids = _unique([ident(m) for m in lines if m.group("status") == "FAIL"]
                         + [ident(m) for m in heads if m.group("status") == "FAIL"])
    error_ids = _unique([ident(m) for m in lines if m.group("status") == "ERROR"]
                        + [ident(m) for m in heads if m.group("status") == "ERROR"])
    end = None
    if ran is not None:
        end = next(iter(_UNITTEST_END_RE.finditer(text, ran.end())), None)
    if ran is not None and end is not None:
        pairs = dict(re.findall(r"(\w[\w ]*?)=(\d+)", end.group("details") or ""))
        failed, errors = int(pairs.get("failures", 0)), int(pairs.get("errors", 0))
        skipped = int(pairs.get("skipped", 0))
        total = int(ran.group(1))
        passed = max(0, total - failed - errors - skipped)
        outcome: Outcome = "no_tests" if total == 0 else _outcome(passed, failed, errors, selected_any=True)
        return TestRun(runner="unittest", outcome=outcome, complete=True, passed=passed, failed=failed, errors=errors,
                       skipped=skipped, ids=tuple(ids[:MAX_IDS]), failed_ids=tuple(failed_ids[:MAX_IDS]),
                       error_ids=tuple(error_ids[:MAX_IDS]), failure_lines=_failure_lines(text),
                       summary=f"{ran.group(0).strip()} {end.group(0).strip()}")
    statuses = [m.group("status") for m in lines]
    passed = statuses.count("ok")
    return TestRun(runner="unittest", outcome=_outcome(passed, len(failed_ids), len(error_ids), selected_any=True),
                   complete=False, passed=passed, failed=len(failed_ids), errors=len(error_ids),
                   skipped=statuses.count("skipped"), ids=tuple(ids[:MAX_IDS]), failed_ids=tuple(failed_ids[:MAX_IDS]),
                   error_ids=tuple(error_ids[:MAX_IDS]), failure_lines=_failure_lines(text))


def _parse_sympy(text: str) -> TestRun | None:
    m = None
    for m in _SYMPY_RE.finditer(text):
        pass
    if m is None:
        return None
    counts = _counts(m.group("body").replace("exceptions", "errors"))
    passed, failed, errors = counts.get("passed", 0), counts.get("failed", 0), counts.get("errors", 0)
    failed_ids = _unique(f.group("id") for f in _SYMPY_FAIL_RE.finditer(text))
    return TestRun(runner="sympy", outcome=_outcome(passed, failed, errors, selected_any=False), complete=True,
                   passed=passed, failed=failed, errors=errors, skipped=counts.get("skipped", 0),
                   ids=tuple(failed_ids[:MAX_IDS]), failed_ids=tuple(failed_ids[:MAX_IDS]),
                   failure_lines=_failure_lines(text), summary=_cut(m.group(0)))


def parse_test_run(text: str, *, command: str | None = None) -> TestRun | None:
    """The :class:`TestRun` an output shows, or None when it is no test runner's output
    (and ``command`` runs no tests). With a test ``command`` and an output that shows no
    runner summary, the run is ``not_run`` (runner missing) or ``unknown`` / ``error``.
    Pure; raises nothing; O(len(text))."""
    command_says = command is not None and is_test_command(command)
    for parsed in (_parse_pytest(text), _parse_unittest(text), _parse_sympy(text)):
        if parsed is not None:
            return parsed
    if _TOX_FAIL_RE.search(text) or _TOX_OK_RE.search(text):
        ok = not _TOX_FAIL_RE.search(text)
        return TestRun(runner="tox", outcome="passed" if ok else "failed", complete=True,
                       failure_lines=_failure_lines(text))
    if (crashed := _pytest_error(text, command_says=command_says)) is not None:
        return crashed
    if not command_says:
        return None
    runner = "unittest" if command and re.search(r"-m\s+unittest\b|runtests\.py|manage\.py\s+test", command) \
        else "pytest"
    if _RUNNER_MISSING_RE.search(text):
        return TestRun(runner=runner, outcome="not_run", complete=True, passed=0, failed=0, errors=0, skipped=0,
                       failure_lines=_failure_lines(text) or (_cut(_RUNNER_MISSING_RE.search(text).group(0)),))  # type: ignore[union-attr]
    failure_lines = _failure_lines(text)
    return TestRun(runner=runner, outcome="error" if failure_lines else "unknown", complete=False,
                   failure_lines=failure_lines)


_SELECTION_RE: Final = re.compile(r"(?:^|\s)(?P<target>[\w./-]+\.py(?:::[^\s;|&]+)?|[\w./-]+/)(?=\s|$|;|\||&)")
_K_RE: Final = re.compile(r"""\s-k\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>\S+))""")


def selection_of(command: str) -> tuple[str, ...]:
    """Test targets a test command names: paths and node ids after the runner, and ``-k``
    expressions (as ``-k <expr>``), in order. Empty when the command runs no tests."""
    out: list[str] = []
    for segment, end in _test_segments(command):
        after = segment[end:]
        out.extend(m.group("target") for m in _SELECTION_RE.finditer(after))
        out.extend(f"-k {m.group('dq') or m.group('sq') or m.group('bare')}" for m in _K_RE.finditer(after))
        if re.search(r"-m\s+unittest\b|runtests\.py|manage\.py\s+test", segment):
            out.extend(d for d in re.findall(r"(?:^|\s)([A-Za-z_][\w]*(?:\.[\w]+)+)(?=\s|$)", after)
                       if not d.endswith(".py"))
    return tuple(_unique(out))


def _conditions(conditions: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
                        for k, v in conditions.items() if k not in ("reads", "touches")))


def claims_of(events: Iterable[Event]) -> list[Claim]:
    """One :class:`Claim` per tool result of ``events`` (any order), in seq order, derived
    from the log only: the call's command, the result's exit code, binding and conditions,
    the workspace revisions written so far, and the test run parsed from the payload
    (section 4.6.2: "compares the recorded command, exit code, artifact version, and test
    scope"). A result whose call is not among ``events`` gets the command ``""``.
    O(total payload size); pure."""
    calls: dict[str, tuple[int, str, str]] = {}
    workspace: dict[str, int] = {}
    out: list[Claim] = []
    for event in sorted(events, key=lambda e: e.seq):
        if isinstance(event, MessageEvent):
            for call in event.tool_calls:
                calls[call.call_id] = (event.seq, call.name, command_of_call(call.name, call.arguments))
        elif isinstance(event, ArtifactWriteEvent):
            workspace[event.artifact] = event.revision
        elif isinstance(event, ToolResultEvent):
            call_seq, tool, command = calls.get(event.call_id, (None, "bash", ""))
            revisions = dict(workspace)
            if event.binding is not None:
                revisions[event.binding.artifact] = event.binding.revision
            run = parse_test_run(event.payload, command=command)
            failure_lines = run.failure_lines if run is not None else \
                _failure_lines(event.payload) if event.exit_code not in (None, 0) else ()
            out.append(Claim(
                seq=event.seq, call_seq=call_seq, command=command, exit_status=event.exit_code,
                artifact=event.binding.artifact if event.binding else None,
                revision=event.binding.revision if event.binding else None,
                scope=Scope(revisions=tuple(sorted(revisions.items())), conditions=_conditions(event.conditions),
                            selection=selection_of(command)),
                test_run=run, handle=event.handle, tool=tool, failure_lines=failure_lines))
    return out


# --- protected fields ------------------------------------------------------------------

FieldKind = Literal["constraint", "test_name", "revision", "run_condition", "assertion", "exit_status"]


@dataclass(frozen=True)
class ProtectedField:
    """One protected field (section 4.5.2). ``kind``; ``value``: the exact text that must
    survive (a constraint's text, a test id, ``path@rN``, ``key=value``, an assertion line
    prefix, ``exit N``); ``key``: what identifies the field when its value is altered
    (constraint id, test id, artifact path, condition key, assertion line, the seq);
    ``seqs``: the events it comes from (empty for contract constraints)."""

    kind: FieldKind
    key: str
    value: str
    seqs: tuple[int, ...] = ()
    handle: str | None = None


@dataclass(frozen=True)
class ProtectedInventory:
    """The host-owned required-field inventory (listing 2, check 1), built from the
    contract and the event log only: never from a model's output."""

    contract_version: int
    fields: tuple[ProtectedField, ...]
    current_revisions: tuple[tuple[str, int], ...] = ()

    def of_kind(self, kind: FieldKind) -> tuple[ProtectedField, ...]:
        return tuple(f for f in self.fields if f.kind == kind)

    def restricted_to(self, seqs: Iterable[int]) -> ProtectedInventory:
        """The contract's fields plus those that come from one of ``seqs`` (the events a
        pass folds)."""
        wanted = set(seqs)
        return ProtectedInventory(self.contract_version,
                                  tuple(f for f in self.fields if not f.seqs or wanted.intersection(f.seqs)),
                                  self.current_revisions)

    def as_dict(self) -> dict[str, Any]:
        return {"contract_version": self.contract_version,
                "fields": [{"kind": f.kind, "key": f.key, "value": f.value, "seqs": list(f.seqs)} for f in self.fields],
                "current_revisions": {a: r for a, r in self.current_revisions}}


@dataclass(frozen=True)
class Finding:
    """An audit or protected-field finding: ``kind`` (``lost``, ``altered``,
    ``missing_or_altered``, ``no_evidence``, ``contradicts_event``,
    ``needs_current_evidence``, ``unsupported_status``, ``schema``, ...), ``field`` (what it
    is about, e.g. ``constraint:boundary-1``, ``claim[2].result``), ``detail`` (plain words,
    fit to feed back to a summarizer)."""

    kind: str
    field: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "field": self.field, "detail": self.detail}


def protected_inventory(events: Iterable[Event], contract: Contract) -> ProtectedInventory:
    """The protected fields of a session (section 4.5.2; issue 10 item 5):

    * ``constraint``: every constraint text of ``contract``, verbatim (key: its id);
    * ``test_name``: ids of failed and errored tests, and node ids a test command selected
      explicitly (``path::test``), whose identity the next turn needs to reproduce a fault;
    * ``revision``: ``path@rN`` of every artifact's current revision, and of the binding of
      every test run and every failed result (the revision a failure was observed at);
    * ``run_condition``: ``key=value`` of every result's run conditions (the conditions of
      any observation are promoted to protected fields);
    * ``assertion``: failed assertion and exception lines of test runs and failed commands
      (at most 6 per result, each a prefix of at most 200 characters);
    * ``exit_status``: ``exit N`` of every test run and every failed result (key: its seq).

    Pure; O(events + payload size)."""
    events = list(events)
    claims = claims_of(events)
    current: dict[str, int] = {}
    for event in events:
        if isinstance(event, ArtifactWriteEvent) and event.revision >= current.get(event.artifact, 0):
            current[event.artifact] = event.revision
    out: list[ProtectedField] = [ProtectedField("constraint", c.id, c.text) for c in contract.constraints]
    seen: set[tuple[str, str]] = set()

    def add(kind: FieldKind, key: str, value: str, claim: Claim | None = None) -> None:
        if (kind, value) in seen:
            for i, f in enumerate(out):  # the same field from another event: add the seq
                if f.kind == kind and f.value == value and claim is not None and claim.seq not in f.seqs:
                    out[i] = ProtectedField(kind, f.key, value, (*f.seqs, claim.seq), f.handle)
            return
        seen.add((kind, value))
        out.append(ProtectedField(kind, key, value, (claim.seq,) if claim else (), claim.handle if claim else None))

    for artifact, revision in sorted(current.items()):
        add("revision", artifact, f"{artifact}@r{revision}")
    for claim in claims:
        run = claim.test_run
        failed = claim.exit_status not in (None, 0) or (run is not None and run.outcome in ("failed", "error"))
        if run is not None:
            for test_id in (*run.failed_ids, *run.error_ids):
                add("test_name", test_id, test_id, claim)
            for target in claim.scope.selection:
                if "::" in target:
                    add("test_name", target, target, claim)
        if (run is not None or failed) and claim.artifact is not None and claim.revision is not None:
            add("revision", claim.artifact, f"{claim.artifact}@r{claim.revision}", claim)
        for key, value in claim.scope.conditions:
            shown = json.loads(value)
            add("run_condition", key, f"{key}={shown if isinstance(shown, str) else value}", claim)
        for line in claim.failure_lines:
            add("assertion", line, line, claim)
        if claim.exit_status is not None and (run is not None or failed):
            out.append(ProtectedField("exit_status", str(claim.seq), f"exit {claim.exit_status}", (claim.seq,),
                                      claim.handle))
    return ProtectedInventory(contract_version=contract.contract_version, fields=tuple(out),
                              current_revisions=tuple(sorted(current.items())))


_WS_RE: Final = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS_RE.sub(" ", text).strip().casefold()


def _mentions(line: str, seqs: Sequence[int], handle: str | None) -> bool:
    if any(re.search(rf"(?:\bseq\s*|#){s}\b", line) for s in seqs):
        return True
    return handle is not None and handle[:12] in line


def check_protected(inventory: ProtectedInventory, texts: Iterable[str]) -> list[Finding]:
    """Which protected fields of ``inventory`` the ``texts`` (what a pass keeps: the
    rendered record, digests, kept slices) lost or altered. Empty: every field survives.

    * a value present verbatim (substring of the joined texts) survives;
    * ``altered``: a constraint or assertion present only up to whitespace or case, a test
      id present only by its last ``::`` part, ``path@rM`` present with another revision,
      ``key=other`` for a run condition, an exit status: a line naming the event (``seq N``,
      ``#N`` or its handle's first 12 hex chars) says ``exit M`` with M != N;
    * ``lost``: otherwise (an exit status is lost when no line naming its event says
      ``exit N``).

    Pure; O(fields x text size)."""
    text = "\n".join(texts)
    norm = _norm(text)
    lines = text.splitlines()
    out: list[Finding] = []
    for f in inventory.fields:
        name = f"{f.kind}:{f.key}"
        if f.kind == "exit_status":
            naming = [line for line in lines if _mentions(line, f.seqs, f.handle)]
            if any(re.search(rf"\b{re.escape(f.value)}\b", line) for line in naming):
                continue
            other = next((m.group(0) for line in naming for m in re.finditer(r"\bexit -?\d+\b", line)), None)
            if other is not None:
                out.append(Finding("altered", name, f"seq {f.key}: logged {f.value!r}, the text says {other!r}"))
            else:
                out.append(Finding("lost", name, f"seq {f.key}: {f.value!r} is not stated next to the event"))
            continue
        if f.value in text:
            continue
        if f.kind in ("constraint", "assertion") and _norm(f.value) in norm:
            out.append(Finding("altered", name, f"{f.kind} {f.value!r} is present only with other whitespace or case"))
        elif f.kind == "test_name" and "::" in f.value and re.search(
                rf"(?<![\w.]){re.escape(f.value.rsplit('::', 1)[1])}(?![\w])", text):
            out.append(Finding("altered", name, f"test {f.value!r} is named only by {f.value.rsplit('::', 1)[1]!r}"))
        elif f.kind == "revision" and (m := re.search(rf"{re.escape(f.key)}@r(\d+)", text)):
            out.append(Finding("altered", name, f"{f.value!r} is given as {m.group(0)!r}"))
        elif f.kind == "run_condition" and (m := re.search(rf"(?<![\w.-]){re.escape(f.key)}=(\S+)", text)):
            out.append(Finding("altered", name, f"run condition {f.value!r} is given as {m.group(0)!r}"))
        else:
            out.append(Finding("lost", name, f"{f.kind} {f.value!r} is missing"))
    return out
