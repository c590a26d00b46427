"""The tree-sitter-bash front end of the bash read/write inference
(app.adapters.bash_syntax): grammar shapes normalised to bash's own structure,
here-document bodies equal to what bash feeds the command, words after quote
removal, and the two grammar-gap rewrites."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from app.adapters.bash_syntax import (
    BashSyntaxError,
    Command,
    Group,
    Node,
    Pipeline,
    Redirect,
    Sequence,
    Word,
    parse,
)


def _names(node: Node) -> object:
    """The tree with each command shown as its words' text."""
    if isinstance(node, Command):
        return " ".join(w.text for w in node.words)
    if isinstance(node, Pipeline):
        return ("|", [_names(s) for s in node.stages])
    if isinstance(node, Group):
        return ("()" if node.subshell else "{}", [_names(i) for i in node.items])
    return [_names(i) for i in node.items]


def _commands(node: Node) -> list[Command]:
    if isinstance(node, Command):
        return [node]
    parts = node.stages if isinstance(node, Pipeline) else node.items
    return [c for p in parts for c in _commands(p)]


def _ops(cmd: Command) -> list[tuple[str, int | None, object]]:
    return [(r.op, r.fd, r.target.text if isinstance(r.target, Word) else r.target) for r in cmd.redirects]


def test_redirection_after_a_list_belongs_to_its_last_command() -> None:
    tree = parse("cd x && cat a.py > out.txt")
    assert _names(tree) == ["cd x", "cat a.py"]
    cd, cat = _commands(tree)
    assert cd.redirects == [] and _ops(cat) == [(">", None, "out.txt")]


def test_redirection_after_a_pipeline_belongs_to_its_last_stage() -> None:
    tree = parse("a | b 2>&1 | c > f")
    assert _names(tree) == [("|", ["a", "b", "c"])]
    a, b, c = _commands(tree)
    assert _ops(a) == [] and _ops(b) == [(">&", 2, 1)] and _ops(c) == [(">", None, "f")]


def test_extra_redirection_destinations_are_arguments() -> None:
    (cmd,) = _commands(parse("cat > f a.py <in 2>&1"))
    assert [w.text for w in cmd.words] == ["cat", "a.py"]
    assert _ops(cmd) == [(">", None, "f"), ("<", None, "in"), (">&", 2, 1)]


def test_descriptor_zero_before_a_redirection() -> None:
    (cmd,) = _commands(parse("cat 0< in.py"))
    assert [w.text for w in cmd.words] == ["cat"] and _ops(cmd) == [("<", 0, "in.py")]
    (cmd,) = _commands(parse("cat 0 < in.py"))  # with a space, 0 is an argument
    assert [w.text for w in cmd.words] == ["cat", "0"] and _ops(cmd) == [("<", None, "in.py")]


def test_groups_subshells_and_control_structures() -> None:
    tree = parse("(cd a && cat x) | head; { cat y; } > z; if [ -f q ]; then cat q; else rm q; fi; "
                 "for f in $(ls); do cat $f; done; case $1 in a) cat a;; esac; f() { rm all; }")
    assert _names(tree) == [
        ("|", [("()", ["cd a", "cat x"]), "head"]),
        ("{}", ["cat y"]),
        ("{}", ["", "cat q", ("{}", ["rm q"])]),  # the test command has no words
        ("{}", [("{}", ["cat $f"])]),
        ("{}", [("{}", ["cat a"])]),
    ]  # function bodies do not run where they are defined
    group = tree.items[3]
    assert isinstance(group, Group) and _names(group.substitutions[0]) == ["ls"]


def test_substitutions_are_collected_from_words_assignments_and_targets() -> None:
    (cmd,) = _commands(parse("x=$(sed -i s/a/b/ q.py) cat `echo r.py` <(sort s) > \"$(mktemp)\""))
    assert [_names(s) for s in cmd.substitutions] == [["sed -i s/a/b/ q.py"], ["echo r.py"], ["sort s"], ["mktemp"]]
    assert [w.literal for w in cmd.words] == [True, False, False]


@pytest.mark.parametrize(
    ("raw", "text", "literal"),
    [
        ("a.py", "a.py", True),
        ('"c d.py"', "c d.py", True),
        ("'e f.py'", "e f.py", True),
        ("a\\ b.py", "a b.py", True),
        ('"a\\"b.py"', 'a"b.py', True),
        ("'it'\\''s.py'", "it's.py", True),
        ("$'g\\th'", "g\th", True),
        ('pre"mid"\'s\'', "premids", True),
        ('"$HOME/x"', "$HOME/x", False),
        ("~/x", "~/x", False),
        ("a*.py", "a*.py", False),
        ("'a*.py'", "a*.py", True),
        ("{a,b}.py", "{a,b}.py", False),
        ('"$(pwd)/a.py"', "$(pwd)/a.py", False),
        ("-5", "-5", True),
    ],
)
def test_words(raw: str, text: str, literal: bool) -> None:
    (cmd,) = _commands(parse(f"cat {raw}"))
    assert (cmd.words[1].text, cmd.words[1].literal, cmd.words[1].raw) == (text, literal, raw)


# (command, here-document bodies in order); every body was checked against bash
HEREDOCS: list[tuple[str, list[str]]] = [
    ("cat <<'EOF'\nhello\n  indented\n\nEOF", ["hello\n  indented\n\n"]),
    ("cat <<EOF\n  lead\\\ncont \\$x \\\\ \\` q\nEOF", ["  leadcont $x \\ ` q\n"]),
    ("cat <<-EOF\n\t\tx\n\ty\n\tEOF", ["x\ny\n"]),
    ("cat <<-'EOF'\n\tx\\\n\ty\n\tEOF", ["x\\\ny\n"]),
    ("cat <<EOF\n\n\nEOF", ["\n\n"]),  # the grammar's body node leaves blank lines out
    ("cat <<EOF\n\nfoo\n\nEOF", ["\nfoo\n\n"]),
    ("cat <<EOF\nEOF", [""]),
    ('cat << "END"\na \'b\' "c"\nEND', ['a \'b\' "c"\n']),
    ("cat <<\\EOF\n$x\nEOF", ["$x\n"]),
    ("cat <<EOF | cat \\\n  -\n\nz\nEOF", ["\nz\n"]),
    ("cd /tmp && cat <<'EOF' 2>&1 | cat\nq\nEOF", ["q\n"]),
    ("cat <<'EOF'; echo -n\nr\nEOF", ["r\n"]),
    ("cat <<'EOF' > a && cat a\nx\nEOF\ncat <<'EOF2'\ny\nEOF2", ["x\n", "y\n"]),
]


def _bodies(tree: Sequence) -> list[str]:
    return [r.body for c in _commands(tree) for r in c.redirects if r.body is not None]


@pytest.mark.parametrize(("command", "bodies"), HEREDOCS, ids=[f"heredoc{i:02d}" for i in range(len(HEREDOCS))])
def test_heredoc_bodies_are_what_bash_reads(command: str, bodies: list[str], tmp_path: Path) -> None:
    assert _bodies(parse(command)) == bodies
    if shutil.which("bash"):
        out = subprocess.run(["bash", "-c", command], check=False, capture_output=True, text=True, timeout=10,
                             cwd=tmp_path).stdout
        assert out == "".join(bodies)


def test_rest_of_a_heredoc_line_is_moved_back() -> None:
    tree = parse("cat <<EOF | python - && echo done\nx\nEOF")
    assert _names(tree) == [("|", ["cat", "python -"]), "echo done"]
    tree = parse("cat <<'EOF' > f.py && python f.py || echo no\nx\nEOF")
    assert _names(tree) == ["cat", "python f.py", "echo no"]
    cat = _commands(tree)[0]
    assert [r.op for r in cat.redirects] == ["<<", ">"] and cat.redirects[0].body == "x\n"
    tree = parse("cat <<'EOF' | tail -5 | wc -l && echo x || echo y\nx\nEOF")
    assert _names(tree) == [("|", ["cat", "tail -5", "wc -l"]), "echo x", "echo y"]
    tree = parse("cd x && cat <<EOF | python -\nx\nEOF")
    assert _names(tree) == ["cd x", ("|", ["cat", "python -"])]


def test_issue_346_rewrite_redirection_then_pipe_and_semicolon() -> None:
    """tree-sitter-bash #346: a here-document line continued by a redirection and
    ``|``, or by ``;``, has an ERROR node; the rewrite parses."""
    tree = parse("python - <<'EOF' 2>&1 | tail -5 ; echo 'a;b'\nprint(1)\nEOF")
    assert _names(tree) == [("|", ["python -", "tail -5"]), "echo a;b"]  # the - given back too
    python = _commands(tree)[0]
    assert python.redirects == [Redirect(">&", 2, 1), Redirect("<<", None, None, "print(1)\n")]
    tree = parse("cat <<'EOF' > f.md; cat f.md\n``code`` stays in a quoted body;\nEOF")
    assert _names(tree) == ["cat", "cat f.md"]
    assert _bodies(tree) == ["``code`` stays in a quoted body;\n"]


def test_empty_backticks_rewrite() -> None:
    """Two recorded commands (sqlfluff-2419 reasoner #16, #45) quote RST in
    ``python3 -c "..."``: ````x```` is an empty command substitution to bash,
    which tree-sitter-bash cannot parse; it expands to nothing."""
    (cmd,) = _commands(parse('python3 -c "\n# use ``COALESCE``\nx = 1\n" 2>&1'))
    assert cmd.words[2] == Word("\n# use COALESCE\nx = 1\n", True, '"\n# use COALESCE\nx = 1\n"')
    (cmd,) = _commands(parse("echo '``' \"``\""))  # single quotes keep them
    assert [w.text for w in cmd.words] == ["echo", "``", ""]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("cat a.py && (echo unclosed", "missing ')'"),
        ("if then fi", "syntax error at line 1"),
        ("cat <<EOF\nno end", "line 1"),
        # grammar gaps left (bash accepts them): two here-documents of one command,
        # a here-document opened inside ( ... ) on its line, <>
        ("cat <<A <<B\na\nA\nb\nB", "syntax error"),
        ("cat <<'A' && cat <<'B'\na\nA\nb\nB", "syntax error"),
        ("(cd /testbed && python - <<EOF) | tail -5\nx\nEOF", "syntax error"),
        ("cat <>rw", "syntax error"),
    ],
)
def test_syntax_errors(command: str, message: str) -> None:
    with pytest.raises(BashSyntaxError) as exc:
        parse(command)
    assert message in exc.value.message


def test_words_the_grammar_drops_are_given_back() -> None:
    """tree-sitter-bash drops a lone ``-`` before a redirection with no ERROR node
    (27 recorded commands, ``python -m sqlfluff lint - 2>&1``); the converter gives
    it back, and text dropped otherwise is a syntax error, never lost silently."""
    import tree_sitter
    import tree_sitter_bash

    from app.adapters.bash_syntax import _dropped_text

    for command in ("python - 2>&1", "python - <<'EOF'\nx\nEOF", "sqlfluff lint - 2>&1 | head"):
        raw = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language())).parse(command.encode())
        assert not raw.root_node.has_error
        assert _dropped_text(raw.root_node, command.encode(), []) == "text dropped by the grammar at line 1: '-'"
    assert [w.text for w in _commands(parse("python - 2>&1"))[0].words] == ["python", "-"]
    assert [w.text for w in _commands(parse("python - <<'EOF'\nx\nEOF"))[0].words] == ["python", "-"]
    assert [w.text for w in _commands(parse("echo a - 'b' 2>/dev/null"))[0].words] == ["echo", "a", "-", "b"]


def test_comments_only() -> None:
    assert parse("# only a comment\n  # another").items == []


def test_long_chains_and_deep_nesting_never_raise_anything_else() -> None:
    """An agent's command is untrusted input: a 3000-command ``&&`` chain is
    flattened without recursion; nesting beyond Python's stack is a syntax error."""
    tree = parse(" && ".join(f"cat f{i}.py" for i in range(3000)))
    assert len(tree.items) == 3000
    with pytest.raises(BashSyntaxError, match="nested too deeply"):
        parse("$(" * 400 + "cat a" + ")" * 400)
