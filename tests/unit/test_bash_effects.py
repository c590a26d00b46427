"""Reads and writes inferred from bash commands (app.adapters.bash_effects), and
the bindings the mini-swe-agent adapter derives from them on the 32 real traces."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest

from app.adapters.bash_effects import (
    CommandEffects,
    Read,
    SessionEffects,
    Write,
    command_effects,
    patch_targets,
    python_writes,
)
from ctxd_tools.bash_coverage import coverage_report
from ctxd_tools.miniswe import (
    PostEvents,
    Trajectory,
    load_trajectory,
    replay_plan,
    trajectory_events,
)
from tests.traces import TRACES_DIR

TRACES = sorted(TRACES_DIR.glob("*.traj.json"))
IDS = [p.name.removesuffix(".traj.json") for p in TRACES]

R = tuple[str, str | None, str]  # artifact, range, tool
W = tuple[str, str]  # artifact, tool ("<tool> (tree)" for tree writes)

PATCH = """\
--- a/src/sqlfluff/core/parser/grammar/delimited.py
+++ b/src/sqlfluff/core/parser/grammar/delimited.py
@@ -1,2 +1,2 @@
 import x
--- this line is content, not a header
+++ neither is this one
@@ -10 +10 @@
-a
+b
--- a/README.md
+++ b/README.md
@@ -1 +1 @@
-old
+new
"""

# (command, expected reads, expected writes); most commands verbatim from the traces
CASES: list[tuple[str, list[R], list[W]]] = [
    # ---- reads
    ("cd /testbed && sed -n '1,50p' pydicom/config.py", [("pydicom/config.py", "1:50", "sed -n")], []),
    ("sed -n '1090,1130p' src/marshmallow/fields.py", [("src/marshmallow/fields.py", "1090:1130", "sed -n")], []),
    ("sed -n '410,450p' /testbed/src/sqlfluff/dialects/dialect_ansi.py",
     [("src/sqlfluff/dialects/dialect_ansi.py", "410:450", "sed -n")], []),
    ("sed -n '10,20p;30p' a.py", [("a.py", "10:20", "sed -n"), ("a.py", "30:30", "sed -n")], []),
    ("sed -n -e '5p' -e '7,+2p' a.py", [("a.py", "5:5", "sed -n"), ("a.py", "7:9", "sed -n")], []),
    ("sed -n '/def foo/,/^def /p' a.py", [("a.py", None, "sed -n")], []),
    ("cat src/sqlfluff/core/file_helpers.py", [("src/sqlfluff/core/file_helpers.py", None, "cat")], []),
    ("cat -n a.py b.py", [("a.py", None, "cat"), ("b.py", None, "cat")], []),
    ("head -20 ./pvlib/temperature.py", [("pvlib/temperature.py", "1:20", "head")], []),
    ("head -n 5 a.py", [("a.py", "1:5", "head")], []),
    ("head a.py", [("a.py", "1:10", "head")], []),
    ("tail -50 astroid/nodes/as_string.py", [("astroid/nodes/as_string.py", None, "tail")], []),
    ("grep -n \"@property\" src/marshmallow/fields.py", [("src/marshmallow/fields.py", None, "grep")], []),
    ("grep -n foo a.py | head -5", [("a.py", None, "grep")], []),
    ("grep -n \"def _from_arrays\" ./pyvista/core/grid.py -A 10 | head -20", [("pyvista/core/grid.py", None, "grep")], []),
    ("grep -r \"PersonName\" pydicom/ --include=\"*.py\" | head -20", [], []),
    ("grep -r \"bytes-like\" pydicom/filewriter.py 2>/dev/null || echo \"Not found\"",
     [("pydicom/filewriter.py", None, "grep")], []),
    ("grep -e foo -e bar x.py y.py", [("x.py", None, "grep"), ("y.py", None, "grep")], []),
    ("awk 'NR >= 927 && NR <= 970' ./astroid/brain/brain_builtin_inference.py",
     [("astroid/brain/brain_builtin_inference.py", "927:970", "awk")], []),
    ("wc -l src/sqlfluff/core/linter/linted_file.py", [("src/sqlfluff/core/linter/linted_file.py", None, "wc")], []),
    ("cd /testbed && git diff src/marshmallow/fields.py", [("src/marshmallow/fields.py", None, "git diff")], []),
    ("git diff d5d8b2f..e8b7b8d -- astroid/modutils.py", [], []),
    ("cd test && cat rules/std_test.py", [("test/rules/std_test.py", None, "cat")], []),
    ("(cd src && cat a.py) 2>&1 | head -5", [("src/a.py", None, "cat")], []),
    ("cat < setup.py", [("setup.py", None, "cat")], []),
    ("find test -name \"*.py\" -type f | xargs grep -l \"persist_tree\\|UnicodeEncodeError\" | head -5", [], []),
    ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt", [("patch.txt", None, "cat")], []),
    ("cd /testbed && python -m pytest test/core/ -x 2>&1 | tail -10", [], []),
    ("python -c \"print(open('setup.py').read())\"", [], []),  # scripts are no reads
    # ---- writes
    ("echo hi > /dev/null", [], []),
    ("grep -n foo a.py > /dev/null 2>&1", [], []),  # output hidden: no observation of a.py
    ("cat <<'EOF' > test_x.py\nimport os\nprint(os.getcwd())\nEOF", [], [("test_x.py", ">")]),
    ("cd /testbed && cat >> test/fixtures/rules/std_rule_cases/L003.yml << 'EOF'\n\ntest_x:\n  pass_str: a\nEOF",
     [], [("test/fixtures/rules/std_rule_cases/L003.yml", ">>")]),
    ("python - <<EOF\nopen('a.txt','w').write('x')\nEOF", [], [("a.txt", "python")]),
    ("sed -i 's/a/b/' x.py && python x.py", [], [("x.py", "sed -i")]),
    ("sed -i '863,866d' src/marshmallow/schema.py", [], [("src/marshmallow/schema.py", "sed -i")]),
    ("cp ./pvlib/iam.py.backup ./pvlib/iam.py", [], [("pvlib/iam.py", "cp")]),
    ("cp a.py b.py /tmp/", [], [("/tmp/a.py", "cp"), ("/tmp/b.py", "cp")]),
    ("git checkout -- pvlib/pvsystem.py pvlib/singlediode.py", [],
     [("pvlib/pvsystem.py", "git checkout"), ("pvlib/singlediode.py", "git checkout")]),
    ("git checkout pvlib/pvsystem.py  # Revert to original", [], [("pvlib/pvsystem.py", "git checkout")]),
    ("git checkout v2.9.0 -- astroid/modutils.py", [], [("astroid/modutils.py", "git checkout")]),
    ("cd /testbed && git stash && python -m pytest test/cli/commands_test.py -xvs 2>&1 | tail -50",
     [], [(".", "git stash (tree)")]),
    ("git stash list", [], []),
    ("rm /testbed/inspect.py", [], [("inspect.py", "rm")]),
    ("sqlfluff fix test_l060.sql --rules L060 --force", [], [("test_l060.sql", "sqlfluff fix")]),
    ("python -m sqlfluff fix test_with_indent.sql --dialect ansi", [], [("test_with_indent.sql", "sqlfluff fix")]),
    ("cd /testbed && git apply <<'EOF'\n" + PATCH + "EOF", [],
     [("src/sqlfluff/core/parser/grammar/delimited.py", "git apply"), ("README.md", "git apply")]),
    ("cd src && patch -p1 <<'EOF'\n" + PATCH + "EOF", [],
     [("src/src/sqlfluff/core/parser/grammar/delimited.py", "patch"), ("src/README.md", "patch")]),
    ("git apply --check fix.patch", [], []),
    ("git apply fix.patch", [], [(".", "git apply (tree)")]),  # patch text unknown
    ("for f in a.py b.py; do sed -i 's/x/y/' $f; done", [], [(".", "sed -i (tree)")]),
    (("# Create a new file with the fixed function\n"
     "head -926 ./astroid/brain/brain_builtin_inference.py > /tmp/new_file.py\n"
     "cat /tmp/new_function.py >> /tmp/new_file.py\n"
     "tail -n +962 ./astroid/brain/brain_builtin_inference.py >> /tmp/new_file.py\n"
     "mv /tmp/new_file.py ./astroid/brain/brain_builtin_inference.py"),
     [], [("/tmp/new_file.py", ">"), ("/tmp/new_file.py", ">>"), ("/tmp/new_file.py", ">>"),
          ("/tmp/new_file.py", "mv"), ("astroid/brain/brain_builtin_inference.py", "mv")]),
    (("git diff HEAD src/sqlfluff/core/linter/linted_file.py > /tmp/full_patch.txt && "
     "grep -A50 \"def persist_tree\" /tmp/full_patch.txt | head -60 > patch.txt && "
     "echo \"=== Patch created ===\" && cat patch.txt"),
     [("patch.txt", None, "cat")], [("/tmp/full_patch.txt", ">"), ("patch.txt", ">")]),
    (("cd /opt/miniconda3/lib/python3.11/site-packages && python3 -c \"\n"
     "with open('wrapt/decorators.py', 'r') as f:\n    content = f.read()\n"
     "with open('wrapt/decorators.py', 'w') as f:\n    f.write(content)\n\""),
     [], [("/opt/miniconda3/lib/python3.11/site-packages/wrapt/decorators.py", "python")]),
    ("find . -name '*.orig' -delete", [], [(".", "find (tree)")]),
    ("echo 'SELECT 1' | tee q.sql", [], [("q.sql", "tee")]),
    # ---- constructs bashlex 0.18 did not parse (tree-sitter-bash does)
    ("time cat a.py", [("a.py", None, "cat")], []),
    ("case $1 in a) cat a.py;; *) rm b.py;; esac", [("a.py", None, "cat")], [("b.py", "rm")]),
    ("[[ -f a.py ]] && cat a.py", [("a.py", None, "cat")], []),
    ("echo $(cd sub && cat a.py) > res.txt", [], [("res.txt", ">")]),
    # ---- quoting bashlex got wrong: 'it'\''s.py' is it's.py
    ("cat \"a\\\"b.py\" 'it'\\''s.py' a\\ b.py",
     [('a"b.py', None, "cat"), ("it's.py", None, "cat"), ("a b.py", None, "cat")], []),
    # ---- grammar shapes normalised by app.adapters.bash_syntax
    ("a && cat b.py > c.txt", [], [("c.txt", ">")]),  # the redirection is cat's: no observation
    ("{ cat a.py; sed -i s/a/b/ b.py; } > log.txt", [], [("log.txt", ">"), ("b.py", "sed -i")]),
    ("cat 0< in.py", [("in.py", None, "cat")], []),  # 0< is a descriptor, not an argument 0
    ("cat 0 < in.py", [("0", None, "cat")], []),
    ("echo > f.txt g", [], [("f.txt", ">")]),
    ("cd src && cat <<EOF | python - && cat a.py\nopen('v.txt','w')\nEOF", [("src/a.py", None, "cat")], []),
    # ---- tree-sitter-bash gaps worked around (issue #346: here-document first line)
    ("python - <<'EOF' 2>&1 | tail -5\nopen('z.txt','w')\nEOF", [], [("z.txt", "python")]),
    ("cat <<'EOF' > g.py; python g.py\nopen('w.txt','w')\nEOF", [], [("g.py", ">"), ("w.txt", "python")]),
    ("python3 -c \"\n# ``q`` is empty\nopen('q.py', 'w')\n\" 2>&1", [], [("q.py", "python")]),
    # ---- reads and writes in one command
    ("cat f.py && sed -i 's/a/b/' f.py && sed -n '1,3p' f.py",
     [("f.py", None, "cat"), ("f.py", "1:3", "sed -n")], [("f.py", "sed -i")]),
]


def _effects(c: CommandEffects) -> tuple[list[R], list[W]]:
    return (
        [(r.artifact, r.range, r.tool) for r in c.reads],
        [(w.artifact, w.tool + (" (tree)" if w.tree else "")) for w in c.writes],
    )


@pytest.mark.parametrize(("command", "reads", "writes"), CASES, ids=[f"case{i:02d}" for i in range(len(CASES))])
def test_command_effects(command: str, reads: list[R], writes: list[W]) -> None:
    eff = command_effects(command)
    assert eff.parsed, eff.reason
    assert eff.reason is None
    assert _effects(eff) == (reads, writes)


def test_table_is_large_and_mostly_compound() -> None:
    assert len(CASES) >= 40
    compound = [c for c, _, _ in CASES if re.search(r"&&|\|\||;|\||\n|<<|\(", c)]
    assert len(compound) >= 15


@pytest.mark.parametrize(
    "command",
    ["cat a.py && (echo unclosed", "if then fi", "", "   ", "# only a comment"],
)
def test_unparseable_binds_to_nothing(command: str) -> None:
    eff = command_effects(command)
    assert not eff.parsed
    assert eff.reason
    assert eff.reads == () and eff.writes == ()


def test_relative_write_after_unknown_cd_is_unparsed() -> None:
    eff = command_effects("cd $HOME && echo x > notes.txt")
    assert not eff.parsed and "unknown directory" in (eff.reason or "")
    # an absolute write after it is fine, and a relative read is merely dropped
    eff = command_effects("cd $HOME && cat notes.txt && echo x > /tmp/n.txt")
    assert eff.parsed and _effects(eff) == ([], [("/tmp/n.txt", ">")])


def test_heredoc_content_is_known_and_used_later_in_the_command() -> None:
    script = "p = 'src/m.py'\nwith open(p) as f:\n    s = f.read()\nwith open(p, 'w') as f:\n    f.write(s)\n"
    eff = command_effects(f"cat > fix.py << 'EOF'\n{script}EOF\ncd /testbed && python fix.py")
    assert _effects(eff)[1] == [("fix.py", ">"), ("src/m.py", "python")]
    assert eff.writes[0].content == script


def test_quoted_heredoc_body_is_verbatim() -> None:
    """``<<'EOF'``: bash keeps ``\\<newline>`` (bashlex 0.18 joined the lines: 3
    recorded commands, e.g. pvlib-1707 #51, a ``sed -i '158i\\`` script). An
    unquoted delimiter joins them; leading blank lines are kept either way."""
    script = "sed -i '158i\\\n    x = 1\\\n' ./pvlib/iam.py\n"
    eff = command_effects(f"cat > insert_fix.sh << 'EOF'\n{script}EOF")
    assert eff.writes[0].content == script
    eff = command_effects("cat > a.txt <<EOF\n\nx \\\ny \\$z\nEOF")
    assert eff.writes[0].content == "\nx y $z\n"
    eff = command_effects("cat > t.txt <<-EOF\n\tone\n\t\ttwo\n\tEOF")
    assert eff.writes[0].content == "one\ntwo\n"


def test_echo_ansi_c_string_content() -> None:
    assert command_effects("echo $'a\\tb' > tab.txt").writes[0].content == "a\tb\n"


def test_known_sources_from_earlier_commands() -> None:
    known = {"fix.py": "open('pkg/a.py', 'a').write('x')\n", "fix.patch": PATCH, "x.sh": "sed -i s/a/b/ pkg/b.py\n"}
    assert _effects(command_effects("python fix.py", known_sources=known))[1] == [("pkg/a.py", "python")]
    assert _effects(command_effects("cd /testbed/pkg && python ../fix.py", known_sources=known))[1] == \
        [("pkg/pkg/a.py", "python")]  # relative to the process's cwd, not the script's
    assert _effects(command_effects("git apply fix.patch", known_sources=known))[1] == \
        [("src/sqlfluff/core/parser/grammar/delimited.py", "git apply"), ("README.md", "git apply")]
    assert _effects(command_effects("patch -p1 < fix.patch", known_sources=known))[1] == \
        [("src/sqlfluff/core/parser/grammar/delimited.py", "patch"), ("README.md", "patch")]
    assert _effects(command_effects("bash x.sh", known_sources=known))[1] == [("pkg/b.py", "sed -i")]
    assert _effects(command_effects("python unknown.py", known_sources=known)) == ([], [])


def test_paths_inside_the_root_are_relative_others_absolute() -> None:
    eff = command_effects("cat ../etc/hosts ./a/../b.py /testbed/c.py /tmp/d.py", cwd="/testbed/src")
    assert [r.artifact for r in eff.reads] == ["etc/hosts", "src/b.py", "c.py", "/tmp/d.py"]
    assert command_effects("cat /etc/hosts").reads[0].artifact == "/etc/hosts"


def test_python_writes() -> None:
    src = """
import os, shutil
from pathlib import Path
name = 'out.txt'
base = 'build'
open(name, 'w')
open('log.txt', mode='a')
open('read.txt')
open('read2.txt', 'rb')
Path('p.txt').write_text('x')
Path(base) / 'q.txt'
(Path(base) / 'q.txt').write_text('x')
os.remove('gone.txt')
shutil.copy('src.txt', 'dst.txt')
with open(os.path.join(base, 'j.txt'), 'w') as f: pass
for f in ['loop.txt']:
    open(f, 'w')  # f is a loop variable: not literal
open(f'{base}/fs.txt', 'w')
"""
    assert python_writes(src) == ["out.txt", "log.txt", "p.txt", "build/q.txt", "gone.txt", "dst.txt",
                                  "build/j.txt", "build/fs.txt"]
    assert python_writes("this is not python(") == []


def test_patch_targets_skip_hunk_bodies() -> None:
    assert patch_targets(PATCH) == ["src/sqlfluff/core/parser/grammar/delimited.py", "README.md"]
    assert patch_targets(PATCH, strip=None) == ["delimited.py", "README.md"]
    deletion = "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    assert patch_targets(deletion) == ["old.py"]
    assert patch_targets("no patch here") is None


def test_session_tracks_sources_and_expands_tree_writes() -> None:
    s = SessionEffects()
    s.run("sed -n '1,5p' pkg/a.py && cat /tmp/x.py")
    s.run("cat > fix.py <<'EOF'\nopen('pkg/b.py', 'w')\nEOF")
    assert s.known_sources["fix.py"] == "open('pkg/b.py', 'w')\n"
    assert s.run("python fix.py").written == ("pkg/b.py",)
    s.run("sed -i 's/w/a/' fix.py")  # the text is no longer known
    assert "fix.py" not in s.known_sources
    assert s.run("python fix.py").written == ()
    # git stash reverts the whole repository: every artifact seen inside it
    assert s.run("git stash").written == ("pkg/a.py", "fix.py", "pkg/b.py")
    assert s.run(None).effects.parsed is False


def test_values_are_frozen() -> None:
    eff = command_effects("cat a.py")
    with pytest.raises(AttributeError):
        eff.parsed = False  # type: ignore[misc]
    assert isinstance(eff.reads[0], Read) and not isinstance(eff.reads[0], Write)


# ---------------------------------------------------------------- the 32 real traces


@cache
def _load(path: Path) -> Trajectory:
    return load_trajectory(path)


@cache
def _inferred(path: str) -> list[dict[str, Any]]:
    """trajectory_events(infer_bindings=True), computed once per trace."""
    return trajectory_events(_load(Path(path)), infer_bindings=True)


def _events(traj: Trajectory) -> list[dict[str, Any]]:
    return _inferred(traj.path)


@lru_cache(maxsize=1)
def _report() -> dict[str, Any]:
    return coverage_report(TRACES)


def test_coverage_on_all_traces() -> None:
    r = _report()
    assert r["trajectories"] == 32
    assert r["commands"] == 2494
    assert r["parsed"] + sum(r["unparsed_reasons"].values()) == r["commands"]
    # measured: every recorded command parses (tree-sitter-bash 0.25.1, with the two
    # rewrites of app.adapters.bash_syntax for 2 commands; bashlex 0.18 with a patched
    # heredoc reader: 2494 too, unpatched 2118)
    assert r["parsed"] == 2494
    assert r["with_read"] >= 900 and r["with_write"] >= 550
    for tool in ("grep", "sed -n", "cat", "head"):
        assert r["reads_by_tool"][tool] > 0
    for tool in (">", "python", "sed -i", "cp", "git checkout", "patch", "git apply"):
        assert r["writes_by_tool"][tool] > 0
    json.dumps(r)


def test_inference_matches_the_reviewed_bashlex_snapshot() -> None:
    """The move from bashlex to tree-sitter-bash (issue 11), command by command on
    all 2494 recorded commands (tests/tools/bash_effects_compare.py): same parsed
    flag and same reads everywhere; writes differ only in the known text of 3
    quoted here-documents, where bashlex joined ``\\<newline>`` lines and bash
    (and tree-sitter) do not. A grammar upgrade that changes anything else fails
    here; review it with the tool."""
    from tests.tools.bash_effects_compare import BASELINE, compare, read_snapshot, snapshot

    report = compare(read_snapshot(BASELINE), list(snapshot(TRACES_DIR)))
    assert report["commands"] == 2494
    assert report["same"]["unknown"] == report["same"]["reads"] == report["same"]["artifacts"] == 2494
    assert report["new"] == report["old"] == {"parsed": 2494, "with_read": 970, "with_write": 621,
                                              "write_events": 783}
    diffs = {(d["trace"], d["index"]) for d in report["differences"]}
    assert diffs == {("pvlib__pvlib-python-1707__chat", 51), ("pylint-dev__astroid-1978__chat", 31),
                     ("pylint-dev__astroid-1978__chat", 58)}
    for d in report["differences"]:
        strip = [[w[:3] for w in side["writes"]] for side in (d["old"], d["new"])]
        assert strip[0] == strip[1]  # same artifacts, tools, tree flags: only the content differs
        assert "<< 'EOF'" in d["command"] and "\\\n" in d["command"]


@pytest.fixture(params=TRACES, ids=IDS)
def traj(request: pytest.FixtureRequest) -> Trajectory:
    return _load(request.param)


def test_default_events_are_unchanged(traj: Trajectory) -> None:
    plain = trajectory_events(traj)
    assert plain == trajectory_events(traj, infer_bindings=False)
    inferred = _events(traj)
    stripped = [
        {k: v for k, v in e.items() if k != "binding"}
        | ({"conditions": {k: v for k, v in e["conditions"].items() if k != "reads"}} if "conditions" in e else {})
        for e in inferred if e["kind"] != "artifact_write"
    ]
    assert stripped == plain


def test_writes_precede_the_result_of_their_call(traj: Trajectory) -> None:
    events = _events(traj)
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    position = {e["event_id"]: n for n, e in enumerate(events)}
    result_of = {e["call_id"]: position[e["event_id"]] for e in events if e["kind"] == "tool_result"}
    for n, e in enumerate(events):
        if e["kind"] != "artifact_write":
            continue
        assert re.fullmatch(r"m\d{4}-w\d+", e["event_id"])
        assert {"event_id", "kind", "artifact"} <= set(e) <= {"event_id", "kind", "artifact", "content_hash"}
        assert e["artifact"] and re.fullmatch(r"[0-9a-f]{64}", e.get("content_hash", "0" * 64))
        i = int(e["event_id"][1:5])
        assistant = position[f"m{i:04d}-assistant"]
        assert assistant < n  # after the message that made the call
        calls = [c["call_id"] for c in events[assistant]["tool_calls"]]
        # before the result of the call that caused it (there is one call per message here)
        if calls[0] in result_of:
            assert n < result_of[calls[0]]
            assert all(events[k]["kind"] == "artifact_write" for k in range(n, result_of[calls[0]]))


def test_bindings_are_well_formed(traj: Trajectory) -> None:
    events = _events(traj)
    for e in events:
        if e["kind"] != "tool_result" or "binding" not in e:
            continue
        b = e["binding"]
        assert set(b) <= {"artifact", "kind", "range", "revision", "content_hash"} and {"artifact", "kind", "range"} <= set(b)
        if "content_hash" in b:  # only a whole-file read that exited 0: the hash of its whole output
            assert b["range"] is None and "revision" not in b and e["exit_code"] == 0
            assert b["content_hash"] == hashlib.sha256(e["payload"].encode()).hexdigest()
        assert b["kind"] == "file" and isinstance(b["artifact"], str) and b["artifact"]
        assert not b["artifact"].startswith("/testbed")
        if b["range"] is not None:
            m = re.fullmatch(r"(\d+):(\d+)", b["range"])
            assert m and 1 <= int(m.group(1)) <= int(m.group(2))
        for extra in e["conditions"].get("reads", []):
            assert {"artifact", "range"} <= set(extra) and extra != {"artifact": b["artifact"], "range": b["range"]}


def test_bindings_match_the_commands(traj: Trajectory) -> None:
    events = _events(traj)
    by_call = {e["call_id"]: e for e in events if e["kind"] == "tool_result"}
    session = SessionEffects()
    writes = [e for e in events if e["kind"] == "artifact_write"]
    n_writes = 0
    for m in traj.messages:
        if m["role"] != "assistant":
            continue
        for tc in m["tool_calls"]:
            call = session.run(json.loads(tc["function"]["arguments"])["command"])
            n_writes += len(call.written)
            result = by_call.get(tc["id"])
            if result is None:
                continue
            if call.effects.reads:
                first = call.effects.reads[0]
                assert (result["binding"]["artifact"], result["binding"]["range"]) == (first.artifact, first.range)
            else:
                assert "binding" not in result
    assert n_writes == len(writes)


def test_replay_plan_posts_the_inferred_events(traj: Trajectory) -> None:
    plan = replay_plan(traj, infer_bindings=True)
    posted = [e for s in plan if isinstance(s, PostEvents) for e in s.events]
    assert posted == _events(traj)
    plain = replay_plan(traj)
    assert [type(s) for s in plain] == [type(s) for s in plan]  # same calls, same batching
    for s in plan:
        if isinstance(s, PostEvents):
            assert s.events[0]["role"] == "assistant"


def test_sed_edit_then_read_binds_to_the_new_revision() -> None:
    """A trace excerpt: the agent edits with ``sed -i`` and reads the file back."""
    t = _load(TRACES_DIR / "marshmallow-code__marshmallow-1343__chat.traj.json")
    events = _events(t)
    writes = [e for e in events if e["kind"] == "artifact_write"]
    assert any(w["artifact"] == "src/marshmallow/marshalling.py" for w in writes)
    bound = {e["binding"]["artifact"] for e in events if e.get("binding")}
    assert "src/marshmallow/marshalling.py" in bound


def test_read_before_a_write_in_the_same_call_names_its_revision(tmp_path: Path) -> None:
    data = json.loads((TRACES_DIR / "sqlfluff__sqlfluff-2419__chat.traj.json").read_text())
    args = json.loads(data["messages"][2]["tool_calls"][0]["function"]["arguments"])
    args["command"] = "cat f.py && sed -i 's/a/b/' f.py"
    data["messages"][2]["tool_calls"][0]["function"]["arguments"] = json.dumps(args)
    p = tmp_path / "t.traj.json"
    p.write_text(json.dumps(data))
    events = trajectory_events(load_trajectory(p), infer_bindings=True)
    assert [e["event_id"] for e in events[:3]] == ["m0002-assistant", "m0002-w0", "m0003-tool"]
    assert events[1]["artifact"] == "f.py"
    assert events[2]["binding"] == {"artifact": "f.py", "kind": "file", "range": None, "revision": 0}


def test_untrusted_command_shapes_never_raise() -> None:
    eff = command_effects(" && ".join(f"cat f{i}.py" for i in range(3000)))
    assert eff.parsed and len(eff.reads) == 3000
    for command in ("$(" * 400 + "cat a" + ")" * 400, "(" * 300 + "cat a" + ")" * 300, "cat <<EOF\nx"):
        eff = command_effects(command)
        assert not eff.parsed and eff.reason and eff.reads == eff.writes == ()


def test_patch_targets_count_lines_as_patch_does() -> None:
    # a form feed inside a context line is content (str.splitlines() split it, so the hunk
    # ended early and the rest of the line read as a header naming e.py)
    feed = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n a\x0c--- a/e.py\x0c+++ b/e.py\n"
    assert patch_targets(feed) == ["x.py"]
    crlf = "--- a/x.py\r\n+++ b/x.py\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n"  # a CRLF diff: the trailing \r is dropped
    assert patch_targets(crlf) == ["x.py"]
