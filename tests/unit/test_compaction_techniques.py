"""Deterministic compaction techniques (issue 10 item 1; seed 000 section 4.5.1, table 6,
listing 1; seed 004 part B) on real tool outputs of the shared traces, plus hypothesis
properties: deterministic, idempotent, never invent text, keep protected lines, bounded."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.compaction import (
    MARKER_RE,
    Compacted,
    as_source,
    dedup_repeats,
    digest_tool_result,
    fold_diff,
    handle_of,
    is_protected,
    outline_python,
    slice_failures,
    split_lines,
    strip_terminal,
    tool_digest,
)
from app.domain.compaction.lineage import CUT_RE, body_of, merge_spans
from app.domain.compaction.outline import NUMBERED_RE
from app.domain.compaction.terminal import render_line
from app.domain.text import split_lines as handle_api_lines
from tests.tool_outputs import all_outputs, find

# ---------------------------------------------------------------- invariant checks


def raw_bodies(raw: str) -> list[str]:
    return [body_of(line) for line in split_lines(raw)]


def shown_from(line: str, raw_line: str) -> bool:
    """``line`` is ``raw_line`` or ``raw_line`` cut with the inline cut marker."""
    if line == raw_line:
        return True
    cut = CUT_RE.search(line)
    return cut is not None and raw_line.startswith(line[:cut.start()])


def check_result(raw: str, result: Compacted, *, kind: str | None = None) -> None:
    """Lineage invariants and "never invent text" for one technique's result on ``raw``."""
    raw_lines = raw_bodies(raw)
    out = split_lines(result.text)
    assert len(out) == len(result.origins)
    assert result.source == handle_of(raw) and result.source_lines == len(raw_lines)
    if not result.lineage:
        assert result.text == raw
        return
    t = result.lineage[-1]
    if kind is not None:
        assert t.kind == kind
    assert (t.output_bytes, t.output_lines) == (len(result.text.encode()), len(out))
    assert (t.input_bytes, t.input_lines) == (len(raw.encode()), len(raw_lines))
    assert t.kept == merge_spans(o for o in result.origins if o)
    covered = {n for a, b in t.kept for n in range(a, b + 1)}
    omitted = {n for a, b in t.omitted for n in range(a, b + 1)}
    assert not covered & omitted and covered | omitted == set(range(1, len(raw_lines) + 1))
    for line, origin in zip(out, result.origins, strict=True):
        body = body_of(line)
        if origin is None:
            assert MARKER_RE.match(body), body
            continue
        a, b = origin
        if t.kind == "terminal":
            assert not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]", body)
            assert set(body) <= set("".join(raw_lines[a - 1:b])) | {" "}
            continue
        assert a == b, (t.kind, origin)
        if t.kind == "outline":
            number = NUMBERED_RE.match(body)
            assert number is not None
            assert body == raw_lines[a - 1] or body == f"{a:>6}\t{raw_lines[a - 1]}"
        elif t.kind == "digest":
            # a key line ending in a lone "\r" reads back as its CRLF-ended body
            assert body.startswith(f"L{a}: ") and shown_from(body[len(f"L{a}: "):], raw_lines[a - 1].removesuffix("\r"))
        else:
            assert shown_from(body, raw_lines[a - 1]), (body, raw_lines[a - 1])


def sections(text: str) -> list[str]:
    return [body_of(line) for line in split_lines(text)]


# ---------------------------------------------------------------- the shared lineage model


def test_lines_are_numbered_like_the_handle_api() -> None:
    """GET /v1/handles/{h}?lines=a:b cuts lines at "\\n" only (``app.domain.text.split_lines``,
    as ``sed -n`` and ``grep -n`` count): so do the techniques. A lone "\\r", "\\x0b", "\\x0c",
    "\\x1c" or U+2028 does not end a line (before: ``bytes.splitlines`` cut at each of them, so
    ranges of such a payload named other lines than the handle API serves)."""
    text = "a\nb\r\nc\rd\x0be\x0cf\x1cg\u2028h\n\nlast"
    assert split_lines(text) == ["a\n", "b\r\n", "c\rd\x0be\x0cf\x1cg\u2028h\n", "\n", "last"]
    assert split_lines(text) == [p.decode() for p in handle_api_lines(text.encode())]
    assert as_source(text).source_lines == 5
    for o in list(all_outputs())[::25]:
        assert "".join(split_lines(o.output)) == o.output
        assert len(split_lines(o.output)) == o.output.count("\n") + (0 if o.output.endswith("\n") or not o.output else 1)


def test_raw_payload_has_no_lineage_and_its_handle() -> None:
    o = find(command=r"pip install -e \.", output="Successfully installed")
    source = as_source(o.output)
    assert source.lineage == () and source.source == o.handle == handle_of(o.output)
    assert source.origins == tuple((i, i) for i in range(1, source.source_lines + 1))
    assert source.source_bytes == len(o.output.encode())


# ---------------------------------------------------------------- repeated-poll deduplication


def test_dedup_real_pytest_progress_keeps_first_count_last() -> None:
    o = find(trace="sqlfluff__sqlfluff-2419__reasoner", command=r"yaml_test_cases_test\.py -x 2>&1 \| tail -10")
    assert sections(o.output)[:7] == [f"{'.' * 72} [{p:>3}%]" for p in (34, 44, 54, 64, 74, 84, 94)]
    result = dedup_repeats(o.output)
    assert sections(result.text) == [
        f"{'.' * 72} [ 34%]",
        f"[ctxd: 5 more similar lines omitted (lines 2-6 of {o.handle[:12]}); the last one follows]",
        f"{'.' * 72} [ 94%]",
        f"{'.' * 43}{' ' * 30}[100%]",
        "",
        "============================= 728 passed in 15.14s =============================",
        "",
    ][:len(sections(result.text))]
    t = result.lineage[-1]
    assert (t.kind, t.kept, t.omitted, dict(t.stats)) == ("dedup", ((1, 1), (7, 10)), ((2, 6),),
                                                          {"runs": 1, "omitted_lines": 5})
    assert (t.input_bytes, t.output_bytes) == (722, 409)
    check_result(o.output, result, kind="dedup")


def test_dedup_keeps_distinct_file_names_and_grep_hits() -> None:
    """Digits that are evidence are not masked (Supercompress/Supercompress#149)."""
    listing = find(trace="sqlfluff__sqlfluff-1763__chat", command=r'find src -type f -name "\*.py" \| head -50')
    assert sum(1 for b in sections(listing.output) if re.search(r"rules/L0\d\d\.py", b)) >= 20
    assert dedup_repeats(listing.output).text == listing.output
    hits = find(trace="sqlfluff__sqlfluff-2419__chat", command='grep -n "COALESCE" test_comprehensive.sql')
    assert dedup_repeats(hits.output).text == hits.output


def test_dedup_protected_lines_fold_only_when_identical() -> None:
    distinct = "".join(f"2026-03-01T09:00:00Z ERROR payment declined for order ORD-{10000 + k} code=51\n" for k in range(20))
    assert dedup_repeats(distinct).text == distinct
    same = "ERROR: connection refused, retrying\n" * 6
    assert sections(dedup_repeats(same).text) == [
        "ERROR: connection refused, retrying",
        f"[ctxd: 4 more identical lines omitted (lines 2-5 of {handle_of(same)[:12]}); the last one follows]",
        "ERROR: connection refused, retrying",
    ]


def test_dedup_run_lengths_and_polls() -> None:
    """One rule for every run length (Growth-Circle/cadis#2151): a run collapses when it has
    at least 3 repetitions and the marker is shorter than what it replaces."""
    line = "Waiting for the database to accept connections on port 5432 (attempt {k}, 2s elapsed)\n"
    for n in (1, 2, 3):
        text = "".join(line.format(k=1) for _ in range(n))
        assert dedup_repeats(text).text == text  # 3 lines: the marker replaces just one
    text = "".join(line.format(k=1) for _ in range(4))
    assert len(sections(dedup_repeats(text).text)) == 3  # first, marker (for 2 lines), last
    image = "".join(f"Retrieving image: {k}%\n" for k in range(44))  # nex-agi/NexAU#8
    assert sections(dedup_repeats(image).text) == [
        "Retrieving image: 0%",
        f"[ctxd: 42 more similar lines omitted (lines 2-43 of {handle_of(image)[:12]}); the last one follows]",
        "Retrieving image: 43%",
    ]
    block = "".join(f"status: pending\nchecked at 10:00:{k:02d}\n" for k in range(10)) + "status: done\n"
    result = dedup_repeats(block)
    assert sections(result.text)[:2] == ["status: pending", "checked at 10:00:00"]
    assert sections(result.text)[2].startswith("[ctxd: 8 more similar repetitions of the 2 lines above omitted (lines 3-18")
    assert sections(result.text)[3:] == ["status: pending", "checked at 10:00:09", "status: done"]
    check_result(block, result, kind="dedup")


# ---------------------------------------------------------------- terminal-control stripping


def colorize_pytest(text: str) -> str:
    """What pytest --color=yes prints for a plain run (SGR around results and separators)."""
    out = []
    for line in split_lines(text):
        body, end = body_of(line), line[len(body_of(line)):]
        if body.startswith("="):
            body = f"\x1b[1m{body}\x1b[0m"
        elif body.startswith(("FAILED", "E ")):
            body = f"\x1b[31m\x1b[1m{body}\x1b[0m"
        elif body.endswith("%]"):
            dots, _, rest = body.partition(" ")
            body = "".join(f"\x1b[32m{c}\x1b[0m" for c in dots) + f"\x1b[32m {rest}\x1b[0m"
        out.append(body + end)
    return "".join(out)


def test_terminal_strips_real_pytest_colors_back_to_the_plain_output() -> None:
    o = find(trace="sqlfluff__sqlfluff-2419__reasoner", command=r"yaml_test_cases_test\.py -x 2>&1 \| tail -10")
    colored = colorize_pytest(o.output)
    assert "\x1b[" in colored and len(colored) > len(o.output) * 5
    result = strip_terminal(colored)
    assert result.text == o.output
    t = result.lineage[-1]
    assert (t.kind, t.input_bytes, t.output_bytes, t.omitted) == ("terminal", len(colored.encode()), 722, ())
    check_result(colored, result, kind="terminal")


def test_terminal_applies_carriage_return_redraws_of_real_pip_output() -> None:
    o = find(command=r"pip install -e \.", output="Successfully installed")
    lines = split_lines(o.output)
    frames = "".join(f"  Downloading {p:>3}% |{'#' * (p // 10):<10}|\r" for p in range(0, 101, 10))
    redrawn = lines[0] + frames + "\x1b[K" + "".join(lines[1:])
    result = strip_terminal(redrawn)
    assert result.text == o.output  # the erase leaves the line blank: the line vanishes into nothing
    # what happened: raw lines 2..12 (the 11 frames) rendered to one line, which was erased
    check_result(redrawn, result, kind="terminal")
    kept = "".join(f"Receiving objects: {p:>3}% ({p // 4}/25)\r" for p in range(0, 101, 4))[:-1] + ", done.\n"
    shown = strip_terminal(kept)
    assert shown.text == "Receiving objects: 100% (25/25), done.\n"
    assert shown.origins == ((1, 1),) and shown.lineage[-1].kept == ((1, 1),)  # one "\n"-line, as the handle API counts


def test_terminal_peer_cases() -> None:
    """vorn-run/vorn#470, lucascaro/hive#296, nex-agi/NexAU#8, Kilo-Org/kilocode#6811."""
    assert render_line("\x1b[?25lWorking\x1b[?25h")[0] == "Working"  # private-mode CSI
    assert render_line("W\rWo\rWor\rWork\rWorking")[0] == "Working"  # \r applied, not deleted
    assert strip_terminal("ok\r\nnext\r\n").text == "ok\r\nnext\r\n"  # \r\n is a line end, not an erase
    assert render_line("\x1b]0;title\x07text\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\")[0] == "textlink"  # OSC BEL / ST
    assert strip_terminal("a\n\x1b[0m\x1b[?25h\nb\n").text == "a\n\nb\n"  # control-only line: empty
    assert render_line("é ✓\tcol\x1b[1mbold\x1b[0m")[0] == "é ✓\tcolbold"  # UTF-8 and tabs kept
    assert render_line("Retrieving image: 43%\x1b[2K\x1b[0A\x1b[0E")[0] == "Retrieving image: 43%"
    assert render_line("abc\b\bXY")[0] == "aXY"
    assert render_line("100%|##########|\r\x1b[Kdone")[0] == "done"
    assert render_line("abcdef\r\x1b[3Cxy")[0] == "abcxyf"
    assert render_line("\x1b(B\x1b=plain\x9b31mred")[0] == "plainred"
    frames = "".join(f"{k}/3 files\r" for k in range(1, 4)) + "\n"  # the last \r + \n is a CRLF ending
    assert strip_terminal(frames).text == "3/3 files\r\n"
    frames = "".join(f"\r{k}/3 files" for k in range(1, 4)) + "\n"
    assert strip_terminal(frames).text == "3/3 files\n"


# ---------------------------------------------------------------- diff hunk folding


def test_diff_folds_context_of_a_real_git_diff() -> None:
    o = find(trace="pvlib__pvlib-python-1854__chat", command=r"git diff pvlib/singlediode.py \| head -50")
    result = fold_diff(o.output)
    got, raw = sections(result.text), sections(o.output)
    assert raw[8].startswith("-") and raw[9].startswith("+") and "NsVbi=np.Inf" in raw[8]
    h = o.handle[:12]
    assert got[:12] == [
        "diff --git a/pvlib/singlediode.py b/pvlib/singlediode.py",
        "index 203b20c..fcaa61c 100644",
        "--- a/pvlib/singlediode.py",
        "+++ b/pvlib/singlediode.py",
        "@@ -58,7 +58,7 @@ def estimate_voc(photocurrent, saturation_current, nNsVth):",
        f"[ctxd: 2 unchanged lines folded (lines 6-7 of {h})]",
        *raw[7:11],
        f"[ctxd: 2 unchanged lines folded (lines 12-13 of {h})]",
        "@@ -206,7 +206,7 @@ def bishop88(diode_voltage, photocurrent, saturation_current,",
    ]
    assert sum(1 for b in got if b[:1] in "+-" and not b.startswith(("+++", "---"))) == 8
    t = result.lineage[-1]
    assert dict(t.stats) == {"files": 1, "hunks": 4, "context_folded": 14, "hunks_folded": 0, "changed_folded": 0}
    assert t.omitted == ((6, 7), (12, 13), (15, 16), (21, 22), (24, 25), (30, 31), (39, 40))
    assert (t.input_bytes, t.output_bytes, t.input_lines, t.output_lines) == (2073, 2000, 40, 33)
    check_result(o.output, result, kind="diff_fold")


def test_diff_budget_folds_later_hunk_bodies_and_counts_them() -> None:
    o = find(trace="pylint-dev__astroid-1333__chat", command=r"git diff d0775d5f\.\.e36b4388 -- astroid/moduti")
    result = fold_diff(o.output, budget_lines=20)
    got = sections(result.text)
    assert sum(1 for b in got if b.startswith("@@ ")) == 8  # every hunk header (location) kept
    assert got[:4] == sections(o.output)[:4]  # file header kept
    h = o.handle[:12]
    assert f"[ctxd: hunk body folded: +3 -1 lines, 6 unchanged (lines 25-34 of {h})]" in got
    assert f"[ctxd: hunk body folded: +7 -4 lines, 8 unchanged (lines 51-69 of {h})]" in got
    raw = sections(o.output)
    assert raw[24:34] and sum(1 for b in raw[24:34] if b.startswith("+")) == 3  # the counts are right
    assert sum(1 for b in raw[50:69] if b.startswith("-")) == 4
    t = result.lineage[-1]
    assert dict(t.stats) == {"files": 1, "hunks": 8, "context_folded": 6, "hunks_folded": 6, "changed_folded": 31}
    check_result(o.output, result, kind="diff_fold")


def test_diff_leaves_text_without_hunks_alone() -> None:
    for o in (find(command=r"^git status"), find(command=r"pip install -e \.", output="Successfully")):
        assert fold_diff(o.output) is not None and fold_diff(o.output).text == o.output


# ---------------------------------------------------------------- failure-marker slicing

LISTING_1 = """source=src/pool.py@r17 test=tests/test_pool.py@r17
test_name=test_waiter_notified_on_return
configuration=controlled waiter-before-return schedule
... repeated worker progress messages ...
waiter_registered_before_return=true
connection_available_after_return=true
waiter_resumed_at_notification_check=false
FAILED: assert waiter_resumed_at_notification_check
"""


def test_slice_keeps_the_causal_lines_of_listing_1() -> None:
    """Seed 000 listing 1: the FAILED line alone does not explain the failure; the lines
    just before it (the event ordering) and the setup lines (revision, test, schedule) do."""
    noisy = LISTING_1.replace("... repeated worker progress messages ...\n",
                              "".join(f"worker {k % 4} progress: batch {k} ok\n" for k in range(200)))
    result = slice_failures(noisy, budget_lines=12, head=3, tail=1, before=3)
    h = handle_of(noisy)[:12]
    assert sections(result.text) == [
        "source=src/pool.py@r17 test=tests/test_pool.py@r17",
        "test_name=test_waiter_notified_on_return",
        "configuration=controlled waiter-before-return schedule",
        "worker 0 progress: batch 0 ok",
        "worker 1 progress: batch 1 ok",
        "worker 2 progress: batch 2 ok",
        f"[ctxd: 196 lines omitted (lines 7-202 of {h})]",
        "worker 3 progress: batch 199 ok",
        "waiter_registered_before_return=true",
        "connection_available_after_return=true",
        "waiter_resumed_at_notification_check=false",
        "FAILED: assert waiter_resumed_at_notification_check",
    ]
    naive = [b for b in sections(noisy) if "FAILED" in b]
    assert naive == ["FAILED: assert waiter_resumed_at_notification_check"]  # what a FAILED-only filter keeps
    t = result.lineage[-1]
    assert t.omitted == ((7, 202),) and dict(t.stats)["protected_kept"] == 1
    check_result(noisy, result, kind="slice")


def test_slice_real_pytest_failure_keeps_every_protected_line() -> None:
    o = find(trace="pvlib__pvlib-python-1072__chat", command=r"test_fuentes -xvs 2>&1 \| tail -50")
    protected = [k + 1 for k, b in enumerate(sections(o.output)) if is_protected(b)]
    assert len(protected) == 12
    result = slice_failures(o.output, budget_lines=30, max_line_chars=120)
    got = sections(result.text)
    h = o.handle[:12]
    assert len(split_lines(result.text)) == 30
    assert got[0] == f"[ctxd: 11 lines omitted (lines 1-11 of {h})]"
    assert got[4] == ">       assert_series_equal(expected_tcell[is_daytime].round(3),"
    assert got[5] == f"[ctxd: 7 lines omitted (lines 16-22 of {h})]"
    assert "E   AssertionError: Series are different" in got
    assert "pandas/_libs/testing.pyx:171: AssertionError" in got
    assert got[-3:] == ["FAILED pvlib/tests/test_temperature.py::test_fuentes[pvwatts_8760_rackmount.csv-45]",
                        "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!",
                        "======================== 1 failed, 2 warnings in 0.10s ========================="]
    assert got[13].startswith("E   [index]: [2019-01-01T09:00:00.000000,")
    assert got[13].endswith(" [ctxd: line cut, 1461 more chars]")  # the long E [index] line, cut
    t = result.lineage[-1]
    kept = {n for a, b in t.kept for n in range(a, b + 1)}
    assert set(protected) <= kept
    assert t.kept == ((12, 15), (23, 35), (41, 50)) and t.omitted == ((1, 11), (16, 22), (36, 40))
    assert dict(t.stats) == {"protected": 12, "protected_kept": 12, "omitted_lines": 23, "lines_cut": 5}
    check_result(o.output, result, kind="slice")


def test_slice_real_traceback_keeps_last_frames_and_exception() -> None:
    """headroomlabs-ai/headroom#2596, The-AI-Alliance/cube-harness#368: the cause is at the tail."""
    o = find(trace="marshmallow-code__marshmallow-1343__chat", command=r"^python reproduce_issue\.py$",
             output=r"^AttributeError: module 'collections' has no attribute 'Mapping'")
    raw = sections(o.output)
    assert len(raw) == 15 and raw[1] == "Traceback (most recent call last):"
    noisy = "".join(f"DEBUG loading fixture {k}\n" for k in range(300)) + o.output
    result = slice_failures(noisy, budget_lines=14, head=1, tail=1, before=1, frames=2)
    got = sections(result.text)
    assert "Traceback (most recent call last):" in got
    assert got[-7:] == raw[-7:]  # the last two frames (File, source, carets) and the exception
    assert got[-8] == f"[ctxd: 6 lines omitted (lines 303-308 of {handle_of(noisy)[:12]})]"  # two first frames
    assert "AttributeError: module 'collections' has no attribute 'Mapping'" in got
    assert '  File "/testbed/reproduce_issue.py", line 19, in <module>' not in got  # first frame dropped
    assert len(split_lines(result.text)) <= 14
    check_result(noisy, result, kind="slice")


def test_slice_leaves_short_outputs_alone() -> None:
    o = find(command=r"pip install -e \.", output="Successfully installed")
    assert slice_failures(o.output) is not None and slice_failures(o.output).lineage == ()


# ---------------------------------------------------------------- Python source outline


def test_outline_of_a_real_cat_of_a_python_module() -> None:
    o = find(trace="pvlib__pvlib-python-1707__reasoner", command=r"^cat \./pvlib/iam\.py$")
    result = outline_python(o.output)
    got = sections(result.text)
    assert got[0] == (f"[ctxd: Python outline (lines 1-893 of {o.handle[:12]}): class and def lines with the first "
                      "docstring line, bodies folded; each line starts with its line number]")
    assert got[1:8] == [
        '     1\tr"""',
        "     2\tThe ``iam`` module contains functions that implement models for the incidence",
        "    27\tdef ashrae(aoi, b=0.05):",
        '    28\t    r"""',
        "    29\t    Determine the incidence angle modifier using the ASHRAE transmission",
        "    94\tdef physical(aoi, n=1.526, K=4.0, L=0.002, *, n_ar=None):",
        '    95\t    r"""',
    ]
    assert [b.split("\t", 1)[1] for b in got if "\tdef " in b] == [
        "def ashrae(aoi, b=0.05):", "def physical(aoi, n=1.526, K=4.0, L=0.002, *, n_ar=None):",
        "def martin_ruiz(aoi, a_r=0.16):", "def martin_ruiz_diffuse(surface_tilt, a_r=0.16, c1=0.4244, c2=None):",
        "def interp(aoi, theta_ref, iam_ref, method='linear', normalize=True):", "def sapm(aoi, module, upper=None):",
        "def marion_diffuse(model, surface_tilt, **kwargs):", "def marion_integrate(function, surface_tilt, region, num=None):",
        "def schlick(aoi):", "def schlick_diffuse(surface_tilt):"]
    t = result.lineage[-1]
    assert (t.input_bytes, t.output_bytes, t.input_lines, t.output_lines) == (30022, 1730, 893, 33)
    assert dict(t.stats) == {"definitions": 10, "lines_kept": 32, "lines_folded": 861}
    check_result(o.output, result, kind="outline")


def test_outline_keeps_decorators_multiline_signatures_and_class_members() -> None:
    o = find(trace="sqlfluff__sqlfluff-1733__reasoner", command=r"^cat /testbed/src/sqlfluff/rules/L003\.py$")
    result = outline_python(o.output)
    got = [b.split("\t", 1)[1] for b in sections(result.text)[1:]]
    raw = sections(o.output)
    for k, b in enumerate(raw):  # every def/class line and every decorator line of a kept def is kept
        if re.match(r"\s*(class|def) ", b) and not re.match(r"\s{8,}def ", b):
            assert b in got, b
    assert any(b.lstrip().startswith("@") for b in got)
    assert result.lineage[-1].output_bytes * 5 < result.lineage[-1].input_bytes
    check_result(o.output, result, kind="outline")


def test_outline_numbered_input_and_fragments() -> None:
    o = find(trace="pyvista__pyvista-4315__chat", command=r"cat -n \./pyvista/core/grid\.py \| sed -n '126,160p'")
    result = outline_python(o.output)
    assert sections(result.text)[1:] == [
        "   126\t    def __init__(self, *args, check_duplicates=False, deep=False, **kwargs):",
        '   127\t        """Initialize the rectilinear grid."""',
        "   158\t    def __repr__(self):",
        '   159\t        """Return the default representation."""',
        "",
    ][:len(sections(result.text)) - 1]
    assert dict(result.lineage[-1].params) == {"first_line": 1, "numbered": True}
    check_result(o.output, result, kind="outline")
    fragment = find(trace="marshmallow-code__marshmallow-1343__chat", command=r"sed -n '250,260p'")
    assert outline_python(fragment.output) is not None
    assert outline_python(fragment.output).lineage == ()  # mid-block fragment: does not parse, unchanged
    assert outline_python("def broken(:\n    pass\n" * 40).lineage == ()
    assert outline_python("x = 1\n" * 100).lineage == ()  # no class or def
    shifted = outline_python("def f(a,\n      b):\n" + "    a = a + b\n" * 30 + "    return a\n", first_line=100)
    assert sections(shifted.text)[1:3] == ["   100\tdef f(a,", "   101\t      b):"]


# ---------------------------------------------------------------- tool-result digest


def test_digest_of_a_real_failing_pytest_run() -> None:
    o = find(trace="pvlib__pvlib-python-1072__chat", command=r"test_fuentes -xvs 2>&1 \| tail -50")
    result = digest_tool_result(o.output, command=o.command, exit_code=o.exit_code)
    h = o.handle[:12]
    assert sections(result.text) == [
        f"[ctxd: digest of a tool result, whole output behind handle {h}: exit 0 (ok), 5190 bytes, 50 lines]",
        "[ctxd: command: cd /testbed && python -m pytest pvlib/tests/test_temperature.py::test_fuentes -xvs 2>&1 | tail -50]",
        "L15: >       assert_series_equal(expected_tcell[is_daytime].round(3),",
        "L26: >   ???",
        "L27: E   AssertionError: Series are different",
        "L35: pandas/_libs/testing.pyx:171: AssertionError",
        "L48: FAILED pvlib/tests/test_temperature.py::test_fuentes[pvwatts_8760_rackmount.csv-45]",
        "L50: ======================== 1 failed, 2 warnings in 0.10s =========================",
    ]
    d = tool_digest(o.output, command=o.command, exit_code=o.exit_code)
    assert (d.status, d.exit_code, d.bytes, d.lines, d.handle) == ("ok", 0, 5190, 50, o.handle)
    assert d.as_dict()["key_lines"][-1] == [50, "======================== 1 failed, 2 warnings in 0.10s ========================="]
    check_result(o.output, result, kind="digest")


def test_digest_status_and_last_line() -> None:
    o = find(command=r"pip install -e \.", output="Successfully installed")
    d = tool_digest(o.output, command=o.command, exit_code=o.exit_code)
    last = sections(o.output)[6]
    assert len(last) == 221 and last.startswith("WARNING: Running pip as the 'root' user")
    assert d.status == "ok" and d.key_lines == ((7, last[:200] + " [ctxd: line cut, 21 more chars]"),)  # the last line
    assert tool_digest("boom\n", exit_code=2).status == "failed"
    assert tool_digest("", exit_code=None).status == "unknown" and tool_digest("").key_lines == ()
    timed_out = tool_digest("partial\n", exit_code=-1, exception="TimeoutExpired: 60 s")
    assert timed_out.status == "exception"
    assert "exit -1 (exception, TimeoutExpired: 60 s)" in timed_out.render()
    script = "cat > x.py <<'EOF'\nprint(1)\nEOF\npython x.py"
    assert "[ctxd: command: cat > x.py <<'EOF' ...]" in tool_digest("1\n", command=script, exit_code=0).render()
    many = "".join(f"FAILED tests/test_{k}.py::test_x - AssertionError\n" for k in range(20)) + "=== 20 failed in 1s ===\n"
    keys = tool_digest(many, max_key_lines=4).key_lines
    assert [n for n, _ in keys] == [1, 2, 20, 21]  # first and last markers, the last line is one


# ---------------------------------------------------------------- composition


def test_techniques_compose_and_name_raw_lines() -> None:
    """Terminal stripping, then dedup, then slicing: every marker and record names lines of
    the raw payload, so the handle API returns the right bytes whatever ran before."""
    progress = "".join(f"Downloading wheel {k * 10}%\r" for k in range(10)) + "Downloading wheel 100%\n"
    polls = "".join(f"waiting for worker ({k}s)\n" for k in range(40))
    raw = "\x1b[1msetup\x1b[0m\n" + progress + polls + "Traceback (most recent call last):\n" \
        '  File "w.py", line 3, in <module>\n    run()\nRuntimeError: worker died\n'
    step1 = strip_terminal(raw)
    step2 = dedup_repeats(step1)
    step3 = slice_failures(step2, budget_lines=6, head=1, tail=2, before=0)
    assert [t.kind for t in step3.lineage] == ["terminal", "dedup", "slice"]
    raw_lines = raw_bodies(raw)
    assert step1.origins[1] == (2, 2)  # the eleven \r-redrawn frames are one raw line, as the handle API counts
    h = handle_of(raw)[:12]
    assert sections(step2.text)[2:5] == [
        "waiting for worker (0s)",
        f"[ctxd: 38 more similar lines omitted (lines 4-41 of {h}); the last one follows]",
        "waiting for worker (39s)",
    ]
    for line, origin in zip(split_lines(step3.text), step3.origins, strict=True):
        for m in re.finditer(r"lines (\d+)-(\d+) of ([0-9a-f]{12})", line):
            assert m.group(3) == h and 1 <= int(m.group(1)) <= int(m.group(2)) <= len(raw_lines)
        if origin is not None and origin[0] == origin[1]:  # verbatim, or rendered (the bold "setup")
            assert body_of(line) in (raw_lines[origin[0] - 1], render_line(raw_lines[origin[0] - 1])[0])
    assert "RuntimeError: worker died" in step3.text and len(split_lines(step3.text)) <= 6
    assert step3.lineage[-1].source == step1.lineage[0].source == handle_of(raw)


# ---------------------------------------------------------------- every real tool output

TECHNIQUES: dict[str, Callable[[str | Compacted], Compacted]] = {
    "terminal": strip_terminal,
    "dedup": dedup_repeats,
    "diff_fold": fold_diff,
    "slice": slice_failures,
    "outline": outline_python,
}
OUTPUTS = list(all_outputs())


def test_the_shared_traces_have_their_tool_outputs() -> None:
    assert len(OUTPUTS) == 2466


@pytest.mark.parametrize("kind", list(TECHNIQUES))
def test_every_real_tool_output(kind: str) -> None:
    """On all 2,466 real tool outputs: lineage invariants, no invented text, idempotent."""
    technique = TECHNIQUES[kind]
    changed = 0
    for o in OUTPUTS:
        result = technique(o.output)
        check_result(o.output, result, kind=kind)
        again = technique(result)
        assert again is result, (kind, o.where)
        changed += bool(result.lineage)
    assert changed == {"terminal": 0, "dedup": 7, "diff_fold": 57, "slice": 165, "outline": 127}[kind]


def test_every_real_tool_output_digest() -> None:
    for o in OUTPUTS[::3]:
        result = digest_tool_result(o.output, command=o.command, exit_code=o.exit_code)
        check_result(o.output, result, kind="digest")
        assert len(split_lines(result.text)) <= 2 + 6


# ---------------------------------------------------------------- hypothesis properties

POOL = [
    "", "   ", "." * 72 + " [ 34%]", "." * 72 + " [ 44%]", "Downloading foo-1.2.3.tar.gz (1.2 MB)",
    "waiting for server... 3s", "waiting for server... 4s", "Retrieving image: 42%",
    "FAILED tests/test_x.py::test_y - AssertionError: boom", "E       assert 1 == 2", "assert x",
    "Traceback (most recent call last):", '  File "x.py", line 3, in <module>', "    foo()", "ValueError: bad",
    "diff --git a/x b/x", "--- a/x", "+++ b/x", "@@ -1,3 +1,3 @@", "@@ -1 +1,2 @@", " context", "-old", "+new",
    "\\ No newline at end of file", "def f(x):", "    return x", "class A:", '    """Doc."""', "@property",
    "\x1b[31mred\x1b[0m", "50%\r100%", "abc\bX", "\x1b]0;t\x07", "[ctxd: 3 lines omitted (lines 1-3 of abcdef012345)]",
    "ERROR: order 17 declined", "ERROR: order 18 declined", "é ünïcode ✓", "x" * 500,
]
lines_st = st.lists(st.one_of(st.sampled_from(POOL), st.text(max_size=20)), max_size=80)
endings_st = st.lists(st.sampled_from(["\n", "\n", "\n", "\r\n", "\r", ""]), min_size=80, max_size=80)


@st.composite
def texts(draw: st.DrawFn) -> str:
    lines, endings = draw(lines_st), draw(endings_st)
    return "".join(line + end for line, end in zip(lines, endings))


# CTXD_HYPOTHESIS_EXAMPLES=5000 for a deeper local search
FAST = settings(max_examples=int(os.environ.get("CTXD_HYPOTHESIS_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", list(TECHNIQUES))
@FAST
@given(text=texts())
def test_property_deterministic_idempotent_never_invents(kind: str, text: str) -> None:
    technique = TECHNIQUES[kind]
    first, second = technique(text), technique(text)
    assert first == second and first.text.encode() == second.text.encode()  # same input, same bytes
    check_result(text, first, kind=kind)
    assert technique(first) is first  # idempotent: a second pass changes nothing, adds no record


@FAST
@given(text=texts(), budget=st.integers(min_value=3, max_value=40), before=st.integers(0, 4),
       head=st.integers(0, 10), tail=st.integers(0, 10), max_chars=st.integers(10, 200))
def test_property_slice_budget_and_protected_lines(text: str, budget: int, before: int, head: int, tail: int,
                                                   max_chars: int) -> None:
    result = slice_failures(text, budget_lines=budget, before=before, head=head, tail=tail, max_line_chars=max_chars)
    check_result(text, result, kind="slice")
    out = split_lines(result.text)
    raw = raw_bodies(text)
    if len(raw) > budget:
        assert len(out) <= budget
    assert all(len(body_of(line)) <= max(max_chars + 40, len("[ctxd: 999999 lines omitted (lines 1-999999 of abcdef012345)]"))
               for line in out)
    protected = [k + 1 for k, b in enumerate(raw) if is_protected(b)]
    if 2 * len(protected) + 1 <= budget:
        kept = {o[0] for o in result.origins if o}
        assert set(protected) <= kept


@FAST
@given(text=texts())
def test_property_digest_is_short_and_quotes_raw_lines(text: str) -> None:
    result = digest_tool_result(text, command="make test", exit_code=1)
    check_result(text, result, kind="digest")
    assert len(split_lines(result.text)) <= 8
    raw = raw_bodies(text)
    d = tool_digest(text, command="make test", exit_code=1)
    protected = [k + 1 for k, b in enumerate(raw) if is_protected(b)]
    if 0 < len(protected) <= 5:
        assert set(protected) <= {n for n, _ in d.key_lines}


@FAST
@given(text=texts())
def test_property_diff_counts_every_changed_line(text: str) -> None:
    result = fold_diff(text, context=0, budget_lines=5)
    check_result(text, result, kind="diff_fold")
    if result.lineage:
        stats = dict(result.lineage[-1].stats)
        folded_changes = sum(int(a) + int(r) for a, r in re.findall(r"hunk body folded: \+(\d+) -(\d+)", result.text))
        assert folded_changes == stats["changed_folded"]
