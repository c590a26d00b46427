"""The evidence layer (app/domain/compaction/evidence.py) and the keyed notes
(app/domain/notes.py) on real tool outputs of the shared traces (tests/tool_outputs.py)
and on the seed 000 listing 1 / table 7 example."""

from __future__ import annotations

import collections

import pytest

from app.domain.compaction import digest_tool_result
from app.domain.compaction.evidence import (
    Scope,
    check_protected,
    claims_of,
    is_test_command,
    parse_test_run,
    protected_inventory,
    selection_of,
)
from app.domain.notes import current_notes, note_items
from app.domain.types import Constraint, Contract
from tests.domain_events import to_domain, trace_session
from tests.tool_outputs import all_outputs, find
from tests.traces import TRACE_FILES

FUENTES = "pvlib/tests/test_temperature.py::test_fuentes[pvwatts_8760_rackmount.csv-45]"


# --- test-runner output ---------------------------------------------------------------

def test_pytest_failure_masked_by_a_pipe_is_failed_with_its_id_and_assertion() -> None:
    o = find(command=r"test_temperature.py::test_fuentes", output=r"1 failed")
    assert o.exit_code == 0, "the pipe into tail hides pytest's exit status"
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and (run.runner, run.outcome, run.complete) == ("pytest", "failed", True)
    assert (run.passed, run.failed, run.errors, run.skipped, run.ran) == (0, 1, 0, 0, 1)
    assert run.failed_ids == (FUENTES,) and run.ids == (FUENTES,)
    assert run.failure_lines == ("E   AssertionError: Series are different",
                                 "pandas/_libs/testing.pyx:171: AssertionError")
    assert run.summary == "======================== 1 failed, 2 warnings in 0.10s ========================="


def test_pytest_quiet_summary() -> None:
    o = find(command=r"ansi_test.py -x -q")
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and (run.outcome, run.passed, run.failed, run.ran) == ("passed", 53, 0, 53)
    assert run.summary == "53 passed, 2 warnings in 0.47s"


def test_unittest_import_failure_is_one_error() -> None:
    o = find(command=r"-m unittest pydicom")
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and (run.runner, run.outcome, run.complete) == ("unittest", "error", True)
    assert (run.ran, run.passed, run.failed, run.errors) == (1, 0, 0, 1)
    assert run.error_ids == ("unittest.loader._FailedTest.test_dataset",)
    assert "ModuleNotFoundError: No module named 'pytest'" in run.failure_lines
    assert run.summary == "Ran 1 test in 0.000s FAILED (errors=1)"


def test_runner_missing_is_not_run_and_conftest_error_is_error() -> None:
    o = find(output=r"No module named pytest", command="pytest")
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and run.outcome == "not_run" and run.ran == 0 and o.exit_code == 0
    o = find(output=r"No module named 'simplejson'", command="pytest")
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and (run.outcome, run.complete, run.ran) == ("error", False, None)
    assert run.failure_lines == ("E   ModuleNotFoundError: No module named 'simplejson'",)


def test_node_id_not_found_is_an_error_not_a_pass() -> None:
    o = find(command=r"pytest test/core/linter/ -x -q")
    run = parse_test_run(o.output, command=o.command)
    assert run is not None and run.outcome == "error" and run.ran == 0
    assert run.failure_lines == ("ERROR: file or directory not found: test/core/linter/",)


def test_verbose_lines_give_the_ids_of_a_complete_run() -> None:
    checked = 0
    for o in all_outputs():
        run = parse_test_run(o.output, command=o.command)
        if run and run.complete and run.runner == "pytest" and "test session starts" in o.output and " PASSED" in o.output:
            assert len(run.ids) == run.passed + run.failed + run.errors + run.skipped, o.where
            checked += 1
    assert checked == 28


def test_cut_output_counts_only_what_it_shows() -> None:
    runs = [(o, parse_test_run(o.output, command=o.command)) for o in all_outputs()]
    cut = [(o, r) for o, r in runs if r is not None and r.runner == "pytest" and r.ids and not r.complete]
    assert cut, "the traces hold -v outputs cut by head"
    for o, r in cut:
        assert r.passed == sum(1 for i in r.ids if i not in r.failed_ids and i not in r.error_ids) - (r.skipped or 0)
        assert "head" in o.command


def test_every_test_command_of_the_traces_has_a_test_run_and_nothing_else_does() -> None:
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    for path in TRACE_FILES:
        _, events = trace_session(path)
        for claim in claims_of(events):
            assert (claim.test_run is not None) == is_test_command(claim.command), (path.name, claim.command)
            if claim.test_run is not None:
                outcomes[(claim.test_run.runner, claim.test_run.outcome)] += 1
    # coverage of the 32 shared traces (reported in the README): pytest and one unittest run
    assert sum(outcomes.values()) == 125
    assert outcomes[("pytest", "passed")] == 55 and outcomes[("pytest", "failed")] == 14
    assert outcomes[("pytest", "not_run")] == 18 and outcomes[("unittest", "error")] == 1


@pytest.mark.parametrize(("text", "expected"), [
    # sympy bin/test (format of sympy/testing/runtests.py)
    (("============================= test process starts ==============================\n"
     "sympy/core/tests/test_basic.py[22] ......F...............                  [FAIL]\n\n"
     "________________________________________________________________________________\n"
     "_____________ sympy/core/tests/test_basic.py:test_literal_evalf ______________\n"
     "Traceback (most recent call last):\n  File \"x.py\", line 3, in test_literal_evalf\n"
     "    assert x == 2\nAssertionError\n\n"
     "============ tests finished: 21 passed, 1 failed, in 0.52 seconds =============\n"),
     ("sympy", "failed", 21, 1, 0, ("sympy/core/tests/test_basic.py:test_literal_evalf",))),
    # Django tests/runtests.py (unittest's runner)
    (("Testing against Django installed in '/testbed/django'\nSystem check identified no issues (0 silenced).\n"
     "test_a (queries.tests.Queries1Tests.test_a) ... ok\ntest_b (queries.tests.Queries1Tests.test_b) ... FAIL\n\n"
     "======================================================================\n"
     "FAIL: test_b (queries.tests.Queries1Tests.test_b)\n"
     "----------------------------------------------------------------------\n"
     "AssertionError: 1 != 2\n\n----------------------------------------------------------------------\n"
     "Ran 2 tests in 0.004s\n\nFAILED (failures=1)\n"),
     ("unittest", "failed", 1, 1, 0, ("queries.tests.Queries1Tests.test_b",))),
    (("...\n----------------------------------------------------------------------\nRan 3 tests in 0.001s\n\n"
     "OK (skipped=1)\n"), ("unittest", "passed", 2, 0, 0, ())),
    ("  py39: commands succeeded\n  congratulations :)\n", ("tox", "passed", None, None, None, ())),
])
def test_other_runner_formats(text: str, expected: tuple) -> None:
    run = parse_test_run(text)
    assert run is not None
    assert (run.runner, run.outcome, run.passed, run.failed, run.errors, run.failed_ids) == expected


def test_commands() -> None:
    assert not is_test_command("pip install pytest -q") and not is_test_command("grep -n pytest setup.py")
    assert not is_test_command("cat tests/unittest_nodes.py")
    assert is_test_command("cd /testbed && timeout 60 python -m pytest tests/a.py -x 2>&1 | tail -5")
    assert selection_of('cd /testbed && python -m pytest tests/a.py::T::test_x -xvs -k "date or x" 2>&1 | tail') \
        == ("tests/a.py::T::test_x", "-k date or x")
    assert selection_of("python -m unittest pydicom.tests.test_dataset.TestDataset.test_to_json_dict -v") \
        == ("pydicom.tests.test_dataset.TestDataset.test_to_json_dict",)
    assert selection_of("python tests/runtests.py queries.tests --parallel 1") == ("queries.tests",)
    assert selection_of("python -m pytest test/") == ("test/",)


# --- claims ---------------------------------------------------------------------------

def test_claims_of_a_real_trace_carry_command_exit_scope_and_test_run() -> None:
    path = next(p for p in TRACE_FILES if p.name.startswith("pydicom__pydicom-1694"))
    _, events = trace_session(path)
    claims = claims_of(events)
    assert [c.seq for c in claims] == sorted(e.seq for e in events if e.kind == "tool_result")
    unit = next(c for c in claims if c.command.endswith("test_to_json_dict -v") and "unittest" in c.command)
    assert unit.exit_status == 1 and unit.test_run is not None and unit.test_run.errors == 1
    assert unit.scope.selection == ("pydicom.tests.test_dataset.TestDataset.test_to_json_dict",)
    written = {e.artifact: e.revision for e in events if e.kind == "artifact_write" and e.seq < unit.seq}
    assert dict(unit.scope.revisions) == written and written, "the workspace the run speaks for"
    by_seq = {e.seq: e for e in events}
    assert by_seq[unit.call_seq].kind == "message" and unit.handle == by_seq[unit.seq].handle


def seed_events(*, with_r18: bool = True) -> list:
    """Seed 000 section 4.5.1 / 4.6: the connection-pool repair. r17 fails the controlled
    test; the patch writes r18; the reproducer passes on r18."""
    def call(i: int, command: str) -> dict:
        return {"event_id": f"a{i}", "kind": "message", "role": "assistant", "content": "",
                "tool_calls": [{"call_id": f"c{i}", "name": "bash", "arguments": {"command": command}}]}
    listing1 = ("source=src/pool.py@r17 test=tests/test_pool.py@r17\ntest_name=test_waiter_notified_on_return\n"
                "configuration=controlled waiter-before-return schedule\n... repeated worker progress messages ...\n"
                "waiter_registered_before_return=true\nconnection_available_after_return=true\n"
                "waiter_resumed_at_notification_check=false\n"
                "FAILED tests/test_pool.py::test_waiter_notified_on_return - assert waiter_resumed_at_notification_check\n"
                "========================= 1 failed in 0.31s =========================\n")
    test = "python -m pytest tests/test_pool.py::test_waiter_notified_on_return"
    events = [{"event_id": f"w{i}", "kind": "artifact_write", "artifact": "src/pool.py"} for i in range(17)]
    events += [call(1, test),
               {"event_id": "r1", "kind": "tool_result", "call_id": "c1", "payload": listing1, "exit_code": 1,
                "binding": {"artifact": "src/pool.py", "kind": "file"}, "conditions": {"schedule": "controlled"}}]
    if with_r18:
        events += [{"event_id": "w17", "kind": "artifact_write", "artifact": "src/pool.py"}, call(2, test),
                   {"event_id": "r2", "kind": "tool_result", "call_id": "c2", "exit_code": 0,
                    "payload": "tests/test_pool.py::test_waiter_notified_on_return PASSED\n"
                               "========================= 1 passed in 0.29s =========================\n",
                    "binding": {"artifact": "src/pool.py", "kind": "file"}, "conditions": {"schedule": "controlled"}}]
    return to_domain(events)


CONTRACT = Contract(goal="Repair waiter notification.", constraints=(
    Constraint("api", "Preserve the public API."), Constraint("ws", "Edit only inside the approved workspace."),
    Constraint("deploy", "No production deployment.")), contract_version=3)


def test_seed_claims_scope_each_run_to_its_revision() -> None:
    claims = claims_of(seed_events())
    r17, r18 = claims
    assert (r17.artifact, r17.revision, r17.exit_status) == ("src/pool.py", 17, 1)
    assert (r18.artifact, r18.revision, r18.exit_status) == ("src/pool.py", 18, 0)
    assert r17.scope == Scope(revisions=(("src/pool.py", 17),), conditions=(("schedule", '"controlled"'),),
                              selection=("tests/test_pool.py::test_waiter_notified_on_return",))
    assert r17.test_run is not None and r17.test_run.failed_ids == ("tests/test_pool.py::test_waiter_notified_on_return",)
    assert r18.test_run is not None and (r18.test_run.outcome, r18.test_run.ran) == ("passed", 1)


# --- protected fields -----------------------------------------------------------------

def test_inventory_of_the_seed_example() -> None:
    inv = protected_inventory(seed_events(), CONTRACT)
    got = {(f.kind, f.value) for f in inv.fields}
    assert got == {
        ("constraint", "Preserve the public API."), ("constraint", "Edit only inside the approved workspace."),
        ("constraint", "No production deployment."),
        ("revision", "src/pool.py@r18"), ("revision", "src/pool.py@r17"),
        ("test_name", "tests/test_pool.py::test_waiter_notified_on_return"),
        ("run_condition", "schedule=controlled"),
        ("assertion", ("FAILED tests/test_pool.py::test_waiter_notified_on_return - assert "
                      "waiter_resumed_at_notification_check")),
        ("exit_status", "exit 1"), ("exit_status", "exit 0"),
    }
    assert inv.contract_version == 3 and inv.current_revisions == (("src/pool.py", 18),)
    assert [f.key for f in inv.of_kind("exit_status")] == ["19", "22"]


def _render(inv) -> str:
    lines = [f.value for f in inv.fields if f.kind != "exit_status"]
    lines += [f"seq {f.key}: {f.value}" for f in inv.of_kind("exit_status")]
    return "\n".join(lines)


def test_check_protected_finds_each_lost_or_altered_field() -> None:
    inv = protected_inventory(seed_events(), CONTRACT)
    whole = _render(inv)
    assert check_protected(inv, [whole]) == []
    cases = {
        "No production deployment.": ("", "lost", "constraint:deploy"),
        "Preserve the public API.": ("preserve the  public API.", "altered", "constraint:api"),
        "src/pool.py@r17": ("src/pool.py@r16", "altered", "revision:src/pool.py"),
        "schedule=controlled": ("schedule=default", "altered", "run_condition:schedule"),
        "seq 19: exit 1": ("seq 19: exit 0", "altered", "exit_status:19"),
        "seq 22: exit 0": ("", "lost", "exit_status:22"),
    }
    for old, (new, kind, name) in cases.items():
        findings = check_protected(inv, [whole.replace(old, new)])
        assert [(f.kind, f.field) for f in findings] == [(kind, name)], (old, findings)
    # a test named only by its function name is altered (listing 1: the identity matters)
    text = whole.replace("tests/test_pool.py::test_waiter_notified_on_return", "test_waiter_notified_on_return")
    assert {(f.kind, f.field) for f in check_protected(inv, [text])} >= {
        ("altered", "test_name:tests/test_pool.py::test_waiter_notified_on_return")}


def test_a_failure_only_filter_loses_protected_fields_the_digest_keeps() -> None:
    """Listing 1's point on a real output: grep FAILED keeps the failing id but drops the
    assertion line; the tool-result digest keeps assertion, id and exit status."""
    path = next(p for p in TRACE_FILES if p.name.startswith("pvlib__pvlib-python-1072__chat"))
    contract, events = trace_session(path)
    claim = next(c for c in claims_of(events) if c.test_run and c.test_run.outcome == "failed")
    inv = protected_inventory(events, contract).restricted_to([claim.seq])
    result = next(e for e in events if e.seq == claim.seq)
    digest = digest_tool_result(result.payload, command=claim.command, exit_code=claim.exit_status).text
    kept = [f"[ctxd: constraints] {c.text}" for c in contract.constraints] + [
        f"{f.value}" for f in inv.of_kind("revision")] + [f"#{claim.seq} {digest}"]
    assert check_protected(inv, kept) == []
    grep = "\n".join(line for line in result.payload.splitlines() if "FAILED" in line)
    naive = kept[:-1] + [f"#{claim.seq} {grep}"]
    lost = {(f.kind, f.field.split(":", 1)[0]) for f in check_protected(inv, naive)}
    assert lost == {("lost", "assertion"), ("lost", "exit_status")}


def test_inventory_on_every_trace_lists_every_constraint_verbatim() -> None:
    kinds: collections.Counter[str] = collections.Counter()
    for path in TRACE_FILES:
        contract, events = trace_session(path)
        inv = protected_inventory(events, contract)
        assert [f.value for f in inv.of_kind("constraint")] == [c.text for c in contract.constraints]
        kinds.update(f.kind for f in inv.fields)
        assert check_protected(inv, [_render(inv)]) == [], path.name
    assert kinds["constraint"] == 96 and kinds["test_name"] > 0 and kinds["assertion"] > 0


# --- notes ----------------------------------------------------------------------------

def test_current_notes_a_later_key_supersedes() -> None:
    events = to_domain([
        {"event_id": "h1", "kind": "hypothesis", "key": "timeout", "text": "Timeout.", "status": "working"},
        {"event_id": "h2", "kind": "hypothesis", "key": "notify", "text": "Missed notification.", "depends_on": [1]},
        {"event_id": "o1", "kind": "obligation", "key": "api", "text": "Check the API."},
        {"event_id": "h3", "kind": "hypothesis", "key": "timeout", "text": "No support.", "status": "refuted"},
        {"event_id": "o2", "kind": "obligation", "key": "timeout", "text": "Same key, other namespace."},
    ])
    notes = current_notes(reversed(events))
    assert [(h.key, h.status, h.seq) for h in notes.hypotheses] == [("timeout", "refuted", 4), ("notify", "working", 2)]
    assert [(o.key, o.status) for o in notes.obligations] == [("api", "open"), ("timeout", "open")]
    assert notes.superseded == (1,) and notes.hypothesis("notify").depends_on == (1,)  # type: ignore[union-attr]
    assert [o.key for o in notes.open_obligations] == ["api", "timeout"]
    assert [i["representation"] for i in note_items(events)] == ["superseded"] + ["not_rendered"] * 4
