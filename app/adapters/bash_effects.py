"""What a bash command read and wrote: the raw material of bindings and invalidation.

mini-swe-agent gives its model one tool, ``bash(command)``. To bind a tool
result to the artifact it shows (eq. 5, seed 000 section 4.7.1) and to mark
earlier observations historical when the agent edits a file (section 4.7.2),
ctxd needs each command's file reads and writes. This module infers them from
the command text alone: it parses the command with tree-sitter-bash through
:mod:`app.adapters.bash_syntax` (54% of the recorded commands are compound:
``&&``, ``;``, pipes, ``cd x && ...``, heredocs, redirections, subshells), walks
the syntax tree, and interprets the simple commands it knows. Standard library +
tree-sitter only.

Entry points
------------
* :func:`command_effects` -> :class:`CommandEffects` for one command.
* :class:`SessionEffects` runs it over a session's commands in order, keeping
  ``known_sources`` (text written to a path by a heredoc, ``echo``, ``cp`` of a
  known file) and the artifacts seen so far (to expand tree writes).
* How much of the recorded commands it interprets: :func:`ctxd_tools.bash_coverage.coverage_report`.

Artifacts
---------
Normalised paths: relative to the repository root (``/testbed``) when inside
it (``pydicom/config.py``; the root itself is ``"."``), absolute otherwise
(``/tmp/fix.py``). ``cd DIR`` inside a compound command moves the working
directory for the rest of that list (not out of a subshell or pipeline stage);
``cd`` to a non-literal place (``cd $X``, ``cd -``, bare ``cd``) makes it
unknown, and relative paths after it cannot be resolved.

Reads (an observation shows the file's content)
-----------------------------------------------
* ``cat``/``tac``/``nl``/``less``/``more`` FILE...: whole file (range None).
* ``sed -n`` with only ``A,Bp`` / ``Np`` / ``A,+Np`` commands (``;``-separated,
  or several ``-e``): one :class:`Read` per range ``"A:B"`` (1-based, inclusive;
  ``B < A`` prints line A only). Any other ``sed`` script without ``-i``: whole
  file, tool ``sed -n`` or ``sed``.
* ``head [-n N | -N] FILE``: range ``"1:N"`` (default 10); ``head -c`` or a
  negative count: whole file.
* ``tail ... FILE``: whole file (range None). Decision: the line numbers of the
  last N lines depend on the file's length, which the command does not say; a
  range is only given when it is exact.
* ``grep`` PATTERN FILE...: whole file per FILE. With ``-r``/``-R`` the operands
  are searched as directories and give no read, except an operand whose last
  component has a suffix (``pydicom/filewriter.py``), taken as a file.
* ``awk PROGRAM FILE``: ``NR>=a && NR<=b`` / ``NR==a,NR==b`` / ``NR==a`` (with no
  action or a plain ``print``) give ``"a:b"``; other programs the whole file.
* ``wc``, ``diff``, ``cmp``, ``hexdump``/``xxd``/``od``/``strings``: whole file.
* ``git diff [REV] [--] FILE...`` (working tree against the index or one
  revision): whole file; with two revisions or ``A..B`` it reads no working
  file. ``git blame [-L a,b] FILE``: range ``"a:b"`` or whole file.
* A stage of a pipeline that reads its stdin reads no file (``grep -n f a.py |
  head -5`` reads ``a.py`` once, by grep). ``< FILE`` on a reading tool is a read
  of FILE. Reads whose stdout goes to a file or ``/dev/null`` (``> x``, ``&> x``,
  on the command or on the pipeline's last stage) show nothing and are dropped;
  so are reads inside ``$(...)``.
* Python scripts and other programs are not reads.

Writes
------
* Redirections ``>``, ``>>``, ``>|``, ``&>``, ``N> FILE`` (not ``/dev/*``; ``2>&1``
  is no file). A redirection truncates before the command runs, so it is ordered
  before the command's own reads.
* ``cat > F <<EOF``, ``cat <<'EOF' > F``, ``echo TEXT > F``, ``tee [-a] F <<EOF``:
  writes F and records its exact text (:attr:`Write.content`; appends extend a
  known text), so a later ``python F`` or ``git apply F`` can be analysed.
* ``sed -i``/``--in-place``: each FILE. ``cp SRC... DST``/``mv SRC... DST``: DST
  (``DST/basename(SRC)`` when DST ends in ``/``, is ``.``/``..``, there are
  several sources or ``-t DIR``); ``mv`` writes SRC too (it is gone). ``rm``,
  ``touch``: each operand. ``-r`` makes them tree writes.
* ``patch [-pN] [-d DIR] [-i F | < F | <<EOF]`` and ``git apply [-pN] F``: the
  files named by the patch's ``--- / +++`` headers (and ``rename from/to``),
  when the patch text is known (inline heredoc, or written earlier in the
  session: ``known_sources``). ``patch`` without ``-p`` keeps the basename (GNU
  rule); ``git apply`` strips 1 and resolves against the repository root.
  ``--dry-run``, ``git apply --check/--stat/--numstat/--summary`` (without
  ``--apply``) and ``git apply --cached`` write nothing.
* ``git checkout [REV] [--] PATH...``/``git restore PATH...``: each PATH
  (``.`` = a tree write); without ``--`` an operand is a path only when it has a file
  suffix or the session has seen it as an artifact: a ref is never taken for a file
  (``git checkout origin/main`` is a switch). ``git stash [push|save|pop|apply]``, ``git
  checkout REV`` (a switch), ``git checkout -b|-B NAME START`` and ``git switch -c NAME
  START`` (a new branch at a start point), ``git switch``, ``git reset --hard|--merge|--keep``,
  ``git merge/rebase/cherry-pick/revert/pull/am``: a tree write over the
  repository root. ``git clean`` (not ``-n``): tree write over the directory.
* Formatters that rewrite in place (also as ``python -m``): ``sqlfluff fix``, ``black``, ``isort``,
  ``autopep8 -i``, ``yapf -i``, ``ruff --fix``/``ruff format``: each path.
* In-place writers by rule (:data:`_INPLACE`), also behind a launcher (``npx``, ``pnpm dlx``,
  ``yarn``, ``bunx``, ``uvx``, ``pipx run``, ``poetry run``, ``uv run``...): ``perl``/``ruby -i``
  (the files after the script), formatters and fixers run with their in-place switch
  (``prettier --write``, ``gofmt -w``, ``shfmt -w``, ``clang-format -i``, ``eslint --fix``,
  ``rubocop -a``, ``yq -i``, ``codespell -w``...), those that rewrite by default unless asked
  to check (``rustfmt``, ``mdformat``, ``pyupgrade``, ``dos2unix``, ``sd``, ``swiftformat``...),
  and ``format``/``fmt``/``fix`` subcommands (``cargo fmt``, ``go fmt``, ``deno fmt``,
  ``terraform fmt``, ``dotnet format``, ``biome format --write``...), then any other program
  run with ``--write``, ``--fix``, ``--in-place``, ``--inplace``, ``--replace`` or
  ``--overwrite``: each file operand (a directory operand, or none, is a tree write over it
  or the working directory).
* A Python script, only when its source is known -- ``python -c CODE``,
  ``python - <<EOF`` / ``python <<EOF``, or ``python F`` with F in
  ``known_sources`` -- and it opens a literal path for writing. The source is
  parsed with :mod:`ast`: ``open(p, 'w'|'a'|'x'|'r+'...)`` (also ``io.open``,
  ``codecs.open``, ``mode=``), ``Path(p).write_text/write_bytes/touch/unlink``,
  ``Path(p).open('w')``, ``os.remove/unlink/rename/replace``,
  ``shutil.copy/copy2/copyfile/move``, ``fileinput.input(p, inplace=True)``.
  "Literal" admits string constants, names assigned exactly once to one,
  ``os.path.join``, ``+``, f-strings and ``Path(...) / ...`` of literals.
  Non-literal paths are ignored (a known gap, on purpose: test scripts write
  temporary files all the time). ``bash F``/``sh F``/``bash -c``/``bash <<EOF``
  with a known script are walked like the outer command.
* Writes whose target is not literal (``> $f``, ``sed -i ... $(...)``,
  ``xargs sed -i``, ``find -exec rm``/``-delete``, a patch whose text is
  unknown) become **tree writes** over the directory the tool works in
  (:attr:`Write.tree`). A tree write covers the artifact and everything under
  it; :class:`SessionEffects` expands it to the artifacts the session has seen
  there. Seed 000 section 4.7.1: when edges are incomplete, safety favours
  over-invalidation -- but only over what is known, never "everything".
* Writes are reported whether or not the command succeeded: a failed ``sed -i``
  or a timed-out script may still have written (section 4.7.2).

Unparsed
--------
``parsed=False`` with a ``reason`` and no reads or writes (bind to nothing
rather than to everything): syntax errors (an ERROR or MISSING node in the
tree-sitter-bash tree, reason ``tree-sitter-bash: ...``), a relative write after
an unknown ``cd``, commands that are empty or only comments. All 2494 recorded
commands parse; the grammar gaps worked around and those left are listed in
:mod:`app.adapters.bash_syntax`.
"""

from __future__ import annotations

import ast as pyast
import json
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.adapters.bash_syntax import (
    BashSyntaxError,
    Command,
    Group,
    Node,
    Pipeline,
    Redirect,
    Word,
    parse,
)
from app.adapters.bash_syntax import (
    Sequence as Script,
)
from app.domain.text import split_lines

__all__ = [
    "ROOT",
    "CallEffects",
    "CommandEffects",
    "Read",
    "SessionEffects",
    "Write",
    "command_effects",
    "command_of",
    "patch_targets",
    "python_writes",
]

#: The repository root of the recorded agents (mini-swe-agent's working directory).
ROOT: Final = "/testbed"
_MAX_DEPTH: Final = 3  # nested bash scripts / -c strings


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Read:
    """A file whose content the command's output shows.

    ``range`` is ``"a:b"`` (1-based lines, inclusive) or None for the whole file.
    ``tool`` names the reader (``cat``, ``sed -n``, ``head``, ``grep``...).
    ``writes_before`` counts this command's writes covering the same artifact
    that ran before the read (``cat f && sed -i ... f`` read revision r, not r+1).
    """

    artifact: str
    range: str | None
    tool: str
    writes_before: int = 0


@dataclass(frozen=True)
class Write:
    """A file (or, with ``tree``, a directory and everything under it) the command
    may have changed. ``content`` is the file's whole text afterwards when the
    command states it exactly (heredoc, ``echo``, ``cp`` of a known file)."""

    artifact: str
    tool: str
    tree: bool = False
    content: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class CommandEffects:
    """Reads and writes of one command, each in execution order.

    ``parsed`` is False when the command could not be interpreted; then
    ``reads`` and ``writes`` are empty and ``reason`` says why. ``shows``: the artifact
    whose whole content is the command's entire standard output (:func:`whole_file_read`),
    else None.
    """

    parsed: bool
    reads: tuple[Read, ...] = ()
    writes: tuple[Write, ...] = ()
    reason: str | None = None
    shows: str | None = None
    #: artifacts named by a program ctxd neither knows as read-only nor interprets (its
    #: literal operands, in order): it may have rewritten them (:class:`SessionEffects`
    #: keeps those the session has met: ``CallEffects.touched``)
    names: tuple[str, ...] = ()


class _Unsupported(Exception):
    pass


@dataclass(frozen=True)
class _Name:
    """An artifact an unknown program names (collected into :attr:`CommandEffects.names`)."""

    artifact: str


# --------------------------------------------------------------------------- paths


def _artifact(path: str, cwd: str | None, root: str) -> str | None:
    """Normalised artifact name of ``path`` seen from ``cwd`` (None: unresolvable)."""
    if not path:
        return None
    if not path.startswith("/"):
        if cwd is None:
            return None
        path = posixpath.join(cwd, path)
    p = posixpath.normpath(path)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    if p == root:
        return "."
    if p.startswith(root.rstrip("/") + "/"):
        return p[len(root.rstrip("/")) + 1 :]
    return p


def _absolute(path: str, cwd: str | None) -> str | None:
    if path.startswith("/"):
        return posixpath.normpath(path)
    if cwd is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, path))


def _covers(tree: str, artifact: str) -> bool:
    """True when the tree write ``tree`` covers ``artifact``."""
    if tree == artifact:
        return True
    if tree == ".":
        return not artifact.startswith("/")
    return artifact.startswith(tree.rstrip("/") + "/")


def _looks_like_file(path: str) -> bool:
    """A path whose last component has a suffix (``x.py``), for operands that may be
    directories (``grep -r``, formatters). ``.``/``..`` and ``dir/`` are not."""
    if path.endswith("/"):
        return False
    name = posixpath.basename(path)
    return name not in ("", ".", "..") and "." in name.lstrip(".")


def _ignored_target(path: str) -> bool:
    return path.startswith(("/dev/", "/proc/")) or path in ("/dev", "/proc")


# --------------------------------------------------------------------------- words


@dataclass(frozen=True)
class _Arg:
    text: str
    literal: bool  # no expansion, no glob: the text is what the program receives


# --------------------------------------------------------------------------- options


def _options(
    args: Sequence[_Arg],
    takes: str = "",
    long_takes: Iterable[str] = (),
    *,
    numeric: bool = False,
    attached: str = "",
) -> tuple[list[tuple[str, str | None]], list[_Arg]]:
    """Split ``args`` into options and operands (GNU conventions).

    ``takes``: short options with an argument (``-n 5``, ``-n5``); ``attached``:
    short options whose argument can only be attached (sed ``-i.bak``);
    ``long_takes``: long options with an argument (``--lines 5``; ``--x=y`` always
    works); ``numeric``: ``-20`` means ``('#', '20')`` (head, tail). After ``--``
    everything is an operand.
    """
    long_set = set(long_takes)
    opts: list[tuple[str, str | None]] = []
    operands: list[_Arg] = []
    i = 0
    while i < len(args):
        a = args[i].text
        if a == "--":
            operands.extend(args[i + 1 :])
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, value = a[2:].partition("=")
            if eq:
                opts.append((name, value))
            elif name in long_set and i + 1 < len(args):
                opts.append((name, args[i + 1].text))
                i += 1
            else:
                opts.append((name, None))
        elif a.startswith("-") and len(a) > 1:
            body = a[1:]
            if numeric and body.isdigit():
                opts.append(("#", body))
            else:
                j = 0
                while j < len(body):
                    c = body[j]
                    if c in attached:
                        opts.append((c, body[j + 1 :] or None))
                        break
                    if c in takes:
                        value = body[j + 1 :]
                        if not value and i + 1 < len(args):
                            value = args[i + 1].text
                            i += 1
                        opts.append((c, value))
                        break
                    opts.append((c, None))
                    j += 1
        else:
            operands.append(args[i])
        i += 1
    return opts, operands


def _has(opts: Sequence[tuple[str, str | None]], *names: str) -> bool:
    return any(n in names for n, _ in opts)


def _last(opts: Sequence[tuple[str, str | None]], *names: str) -> str | None:
    value = None
    for n, v in opts:
        if n in names:
            value = v
    return value


# --------------------------------------------------------------------------- scripts


_SED_PRINT = re.compile(r"^\s*(\d+)\s*(?:,\s*(\+?)(\d+)\s*)?p\s*$")


def _sed_ranges(scripts: Sequence[str]) -> list[str] | None:
    """``["a:b", ...]`` when every sed command only prints line ranges, else None."""
    ranges: list[str] = []
    for script in scripts:
        for piece in re.split(r"[;\n]", script):
            if not piece.strip():
                continue
            m = _SED_PRINT.match(piece)
            if m is None:
                return None
            a = int(m.group(1))
            if m.group(3) is None:
                b = a
            elif m.group(2):
                b = a + int(m.group(3))
            else:
                b = max(a, int(m.group(3)))
            if a < 1:
                return None
            ranges.append(f"{a}:{b}")
    return ranges or None


_AWK_PRINT = r"\s*(?:\{\s*print(?:\s+\$0)?\s*;?\s*\}\s*)?$"
_AWK_BETWEEN = re.compile(r"^\s*NR\s*>=?\s*(\d+)\s*&&\s*NR\s*<(=?)\s*(\d+)" + _AWK_PRINT)
_AWK_PAIR = re.compile(r"^\s*NR\s*==\s*(\d+)\s*,\s*NR\s*==\s*(\d+)" + _AWK_PRINT)
_AWK_ONE = re.compile(r"^\s*NR\s*==\s*(\d+)" + _AWK_PRINT)


def _awk_range(program: str) -> str | None:
    m = _AWK_BETWEEN.match(program)
    if m:
        a, b = int(m.group(1)), int(m.group(3)) - (0 if m.group(2) else 1)
        if ">=" not in program.split("&&")[0]:
            a += 1
        return f"{a}:{b}" if 1 <= a <= b else None
    m = _AWK_PAIR.match(program)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        return f"{a}:{b}" if 1 <= a <= b else None
    m = _AWK_ONE.match(program)
    if m and int(m.group(1)) >= 1:
        return f"{m.group(1)}:{m.group(1)}"
    return None


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _header_path(text: str) -> str:
    path = text.split("\t", 1)[0].rstrip()
    if len(path) >= 2 and path[0] == path[-1] == '"':
        path = path[1:-1]
    return path


def _strip_components(path: str, strip: int | None) -> str | None:
    if strip is None:  # GNU patch without -p: the basename
        return posixpath.basename(path) or None
    parts = [p for p in path.split("/") if p]
    if len(parts) <= strip:
        return None
    return "/".join(parts[strip:])


def patch_targets(text: str, *, strip: int | None = 1) -> list[str] | None:
    """Files a unified diff changes, in order, after stripping ``strip`` leading
    path components (None: basename). A file's ``+++`` name is used unless it is
    ``/dev/null`` (a deletion: the ``---`` name); ``rename from/to`` adds both.
    Hunk bodies are skipped by their line counts, so a ``+++`` line inside a hunk
    is not a header. Lines end at "\\n" only, as patch(1) reads them (a trailing "\\r" of a
    CRLF diff is dropped; a form feed inside a line is content). Returns None when the
    text names no file."""
    lines = [line.rstrip("\n").removesuffix("\r") for line in split_lines(text)]
    found: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = _header_path(line[4:])
            new = _header_path(lines[i + 1][4:])
            name = old if new == "/dev/null" else new
            target = _strip_components(name, strip)
            if target:
                found.append(target)
            i += 2
            while i < len(lines):
                m = _HUNK.match(lines[i])
                if m is None:
                    break
                old_n = 1 if m.group(1) is None else int(m.group(1))
                new_n = 1 if m.group(2) is None else int(m.group(2))
                i += 1
                while i < len(lines) and (old_n > 0 or new_n > 0):
                    c = lines[i][:1]
                    if c in (" ", ""):
                        old_n -= 1
                        new_n -= 1
                    elif c == "-":
                        old_n -= 1
                    elif c == "+":
                        new_n -= 1
                    elif c != "\\":
                        break
                    i += 1
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
            continue
        if line.startswith(("rename from ", "rename to ")):
            name = line.split(" ", 2)[2].strip()
            if name:
                found.append(name)
        i += 1
    out = list(dict.fromkeys(found))
    return out or None


# ---- python


_OPEN_FUNCS: Final = frozenset({"open", "io.open", "codecs.open", "builtins.open"})
_PATH_CTORS: Final = frozenset({"Path", "pathlib.Path", "PosixPath", "pathlib.PosixPath"})
_PATH_WRITERS: Final = frozenset({"write_text", "write_bytes", "touch", "unlink"})
_OS_ONE: Final = frozenset({"os.remove", "os.unlink", "os.truncate"})
_OS_TWO: Final = frozenset({"os.rename", "os.replace", "shutil.move"})
_COPY: Final = frozenset({"shutil.copy", "shutil.copy2", "shutil.copyfile"})


def _dotted(node: pyast.expr) -> str | None:
    if isinstance(node, pyast.Name):
        return node.id
    if isinstance(node, pyast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class _PyEnv:
    """Names assigned exactly once in the script, to a literal string or path."""

    def __init__(self, tree: pyast.AST) -> None:
        stores: Counter[str] = Counter()
        single: dict[str, pyast.expr] = {}
        for node in pyast.walk(tree):
            if isinstance(node, pyast.Name) and isinstance(node.ctx, (pyast.Store, pyast.Del)):
                stores[node.id] += 1
            elif isinstance(node, (pyast.FunctionDef, pyast.AsyncFunctionDef, pyast.Lambda)):
                for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                    stores[a.arg] += 1
        for node in pyast.walk(tree):
            if isinstance(node, pyast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if isinstance(t, pyast.Name):
                    single[t.id] = node.value
            elif isinstance(node, pyast.AnnAssign) and isinstance(node.target, pyast.Name) and node.value:
                single[node.target.id] = node.value
        self._exprs = {k: v for k, v in single.items() if stores[k] == 1}
        self._busy: set[str] = set()

    def name(self, ident: str) -> pyast.expr | None:
        return self._exprs.get(ident)

    def string(self, node: pyast.expr | None) -> str | None:
        """The literal string value of ``node`` (paths included), else None."""
        if node is None:
            return None
        if isinstance(node, pyast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, pyast.Name):
            expr = self._exprs.get(node.id)
            if expr is None or node.id in self._busy:
                return None
            self._busy.add(node.id)
            try:
                return self.string(expr)
            finally:
                self._busy.discard(node.id)
        if isinstance(node, pyast.BinOp) and isinstance(node.op, pyast.Add):
            a, b = self.string(node.left), self.string(node.right)
            return a + b if a is not None and b is not None else None
        if isinstance(node, pyast.BinOp) and isinstance(node.op, pyast.Div):
            a, b = self.path(node.left), self.string(node.right)
            return posixpath.join(a, b) if a is not None and b is not None else None
        if isinstance(node, pyast.JoinedStr):
            out = []
            for v in node.values:
                if isinstance(v, pyast.Constant) and isinstance(v.value, str):
                    out.append(v.value)
                elif isinstance(v, pyast.FormattedValue) and v.conversion == -1 and v.format_spec is None:
                    s = self.string(v.value)
                    if s is None:
                        return None
                    out.append(s)
                else:
                    return None
            return "".join(out)
        if isinstance(node, pyast.Call):
            fn = _dotted(node.func)
            if fn in ("os.path.join", "posixpath.join") and node.args and not node.keywords:
                parts = [self.string(a) for a in node.args]
                if all(p is not None for p in parts):
                    return posixpath.join(*[p for p in parts if p is not None])
            if fn in _PATH_CTORS or fn == "str":
                return self.path(node)
        return None

    def path(self, node: pyast.expr) -> str | None:
        """The literal path of a ``Path(...)`` expression (or of a string)."""
        if isinstance(node, pyast.Call):
            fn = _dotted(node.func)
            if fn in _PATH_CTORS and not node.keywords:
                parts = [self.string(a) for a in node.args]
                if parts and all(p is not None for p in parts):
                    return posixpath.join(*[p for p in parts if p is not None])
                return None
            if fn == "str" and len(node.args) == 1:
                return self.path(node.args[0])
            return None
        return self.string(node)


def _arg(call: pyast.Call, index: int, *names: str) -> pyast.expr | None:
    if index < len(call.args) and not any(isinstance(a, pyast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg in names:
            return kw.value
    return None


def _writes_mode(mode: str | None) -> bool:
    return mode is not None and any(c in mode for c in "wax+")


def python_writes(source: str) -> list[str]:
    """Literal paths a Python script opens for writing (or removes, renames,
    copies onto), in source order; relative paths as written. A script that
    does not parse writes nothing (Python would fail before running it)."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return []
    env = _PyEnv(tree)
    found: list[tuple[int, int, str]] = []

    def add(node: pyast.AST, path: str | None) -> None:
        if path:
            found.append((getattr(node, "lineno", 0), getattr(node, "col_offset", 0), path))

    for node in pyast.walk(tree):
        if not isinstance(node, pyast.Call):
            continue
        fn = _dotted(node.func)
        if fn in _OPEN_FUNCS:
            mode_node = _arg(node, 1, "mode")
            mode = "r" if mode_node is None else env.string(mode_node)
            if _writes_mode(mode):
                add(node, env.string(_arg(node, 0, "file", "filename")))
        elif fn in _OS_ONE:
            add(node, env.string(_arg(node, 0, "path")))
        elif fn in _OS_TWO:
            add(node, env.string(_arg(node, 0, "src")))
            add(node, env.string(_arg(node, 1, "dst")))
        elif fn in _COPY:
            add(node, env.string(_arg(node, 1, "dst")))
        elif fn == "fileinput.input":
            inplace = next((k.value for k in node.keywords if k.arg == "inplace"), None)
            if isinstance(inplace, pyast.Constant) and inplace.value:
                target = _arg(node, 0, "files")
                if isinstance(target, (pyast.List, pyast.Tuple)):
                    for elt in target.elts:
                        add(node, env.string(elt))
                else:
                    add(node, env.string(target))
        elif isinstance(node.func, pyast.Attribute):
            method = node.func.attr
            receiver = node.func.value
            if isinstance(receiver, pyast.Name) and env.name(receiver.id) is not None:
                receiver = env.name(receiver.id)  # type: ignore[assignment]
            is_path = isinstance(receiver, pyast.Call) and _dotted(receiver.func) in _PATH_CTORS
            is_path = is_path or (isinstance(receiver, pyast.BinOp) and isinstance(receiver.op, pyast.Div))
            if not is_path:
                continue
            if method in _PATH_WRITERS:
                add(node, env.path(receiver))
            elif method == "open":
                mode_node = _arg(node, 0, "mode")
                mode = "r" if mode_node is None else env.string(mode_node)
                if _writes_mode(mode):
                    add(node, env.path(receiver))
            elif method in ("rename", "replace"):
                add(node, env.path(receiver))
                target = _arg(node, 0, "target")
                add(node, env.path(target) if target is not None else None)
    found.sort()
    return list(dict.fromkeys(p for _, _, p in found))


_PRINTF_ESCAPES: Final = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}


def _printf_text(args: Sequence[str]) -> str | None:
    """What ``printf FORMAT [ARG...]`` prints, when that is exact: a format with only
    plain text, the escapes ``\\n \\t \\\\ \\" \\'``, ``%%`` and ``%s`` (the format is reused
    until the arguments are used up, as bash does); anything else (other conversions,
    other escapes, ``-v``) is None."""
    if not args or args[0].startswith("-"):
        return None
    fmt, values = args[0], list(args[1:])
    pieces: list[str | None] = []  # None marks a %s
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "\\":
            escaped = _PRINTF_ESCAPES.get(fmt[i + 1 : i + 2])
            if escaped is None:
                return None
            pieces.append(escaped)
            i += 2
        elif c == "%":
            spec = fmt[i + 1 : i + 2]
            if spec == "%":
                pieces.append("%")
            elif spec == "s":
                pieces.append(None)
            else:
                return None
            i += 2
        else:
            pieces.append(c)
            i += 1
    slots = sum(1 for p in pieces if p is None)
    out: list[str] = []
    while True:
        for p in pieces:
            out.append(p if p is not None else (values.pop(0) if values else ""))
        if not values or not slots:
            return "".join(out)


# --------------------------------------------------------------------------- walker


_STDIN_PIPE: Final = ("pipe", None)
_READERS: Final = frozenset({"cat", "tac", "nl", "less", "more", "wc", "hexdump", "xxd", "od", "strings"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_WRAPPERS: Final = frozenset({"time", "nohup", "command", "exec", "builtin", "sudo", "nice", "stdbuf"})
_SIMPLE_WRITERS: Final = frozenset({"rm", "mv", "cp", "tee", "touch", "patch", "truncate", "dd"})
_FORMATTERS: Final = frozenset({"black", "isort", "autopep8", "yapf", "ruff", "sqlfluff"})


@dataclass
class _Ctx:
    stdin: tuple[str, str | None] = ("none", None)  # none | pipe | text | file | unknown
    hidden: bool = False  # stdout goes to a file: reads show nothing
    in_subst: bool = False  # inside $(...): output is not the observation


_OUT_OPS: Final = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
#: a tag or version ref (v1.2.0, 2.31.0-rc1, release-1.4): never a file for git checkout
_VERSION_REF: Final = re.compile(r"(?:[A-Za-z_-]*[-_/]?)?v?\d+(?:\.\d+)+(?:[-+.]?[A-Za-z0-9]+)*")


def _is_stdout_file(r: Redirect) -> bool:
    """A redirection of the command's stdout to a file (``> f``, ``&> f``, ``1>> f``)."""
    return r.op in _OUT_OPS and isinstance(r.target, Word) and (r.fd in (None, 1) or r.op.startswith("&"))


def _stdin_of(r: Redirect, art: Any, cwd: str | None) -> tuple[str, str | None] | None:
    """What a stdin redirection gives the command (``("text", body)``, ``("file",
    artifact)`` or ``("unknown", None)``); None when ``r`` does not redirect stdin."""
    if r.fd not in (None, 0):
        return None
    if r.op in ("<<", "<<-"):  # "expanded": bash expands $ and ` in it, so the text is not exact
        return ("text" if r.literal else "expanded", r.body)
    if r.op == "<<<" and isinstance(r.target, Word):
        return ("text", r.target.text + "\n") if r.target.literal else ("unknown", None)
    if r.op == "<" and isinstance(r.target, Word):
        artifact = art(r.target.text, cwd) if r.target.literal else None
        return ("file", artifact) if artifact else ("unknown", None)
    return None


class _Walker:
    def __init__(self, command: str, root: str, known: Mapping[str, str], depth: int = 0) -> None:
        self.src = command
        self.root = root
        self.known = known
        self.depth = depth
        self.local: dict[str, str | None] = {}
        self.events: list[Read | Write | _Name] = []

    # ---- bookkeeping

    def source_of(self, artifact: str | None) -> str | None:
        if artifact is None:
            return None
        if artifact in self.local:
            return self.local[artifact]
        return self.known.get(artifact)

    def art(self, path: str, cwd: str | None) -> str | None:
        return _artifact(path, cwd, self.root)

    def read(self, arg: _Arg, cwd: str | None, rng: str | None, tool: str, ctx: _Ctx) -> None:
        if ctx.hidden or ctx.in_subst or not arg.literal or arg.text == "-":
            return
        artifact = self.art(arg.text, cwd)
        if artifact is None or artifact.startswith(("/dev/", "/proc/")):
            return
        before = sum(1 for e in self.events if isinstance(e, Write) and
                     (e.artifact == artifact or (e.tree and _covers(e.artifact, artifact))))
        self.events.append(Read(artifact, rng, tool, before))

    def write_artifact(self, artifact: str, tool: str, *, tree: bool = False, content: str | None = None) -> None:
        if artifact.startswith(("/dev/", "/proc/")) or artifact in ("/dev", "/proc"):
            return
        self.events.append(Write(artifact, tool, tree, None if tree else content))
        if tree:
            for name in list(self.local) + list(self.known):
                if _covers(artifact, name):
                    self.local[name] = None
        else:
            self.local[artifact] = content

    def write(self, arg: _Arg, cwd: str | None, tool: str, *, tree: bool = False,
              content: str | None = None) -> None:
        if not arg.literal:
            self.unknown_write(cwd, tool)
            return
        if _ignored_target(arg.text):
            return
        artifact = self.art(arg.text, cwd)
        if artifact is None:
            raise _Unsupported(f"{tool}: relative path {arg.text!r} after a cd to an unknown directory")
        self.write_artifact(artifact, tool, tree=tree, content=content)

    def unknown_write(self, cwd: str | None, tool: str) -> None:
        """A write whose target is not known: tree write over the working directory."""
        if cwd is None:
            raise _Unsupported(f"{tool}: write to an unknown path in an unknown directory")
        artifact = self.art(cwd, None)
        assert artifact is not None
        self.write_artifact(artifact, tool, tree=True)

    def repo_root(self, cwd: str | None) -> str | None:
        if cwd is None:
            return None
        if cwd == self.root or cwd.startswith(self.root.rstrip("/") + "/"):
            return self.root
        return cwd

    # ---- tree walk

    def walk_all(self, script: Script, cwd: str | None) -> str | None:
        for node in script.items:
            cwd = self.walk(node, cwd, _Ctx())
        return cwd

    def walk(self, node: Node, cwd: str | None, ctx: _Ctx) -> str | None:
        if isinstance(node, Script):
            for item in node.items:
                cwd = self.walk(item, cwd, ctx)
            return cwd
        if isinstance(node, Pipeline):
            hidden = ctx.hidden or any(_is_stdout_file(r) for r in getattr(node.stages[-1], "redirects", ()))
            for k, stage in enumerate(node.stages):
                stdin = ctx.stdin if k == 0 else _STDIN_PIPE
                self.walk(stage, cwd, _Ctx(stdin=stdin, hidden=hidden, in_subst=ctx.in_subst))
            return cwd  # every stage runs in a subshell
        if isinstance(node, Group):
            self.substitutions(node.substitutions, cwd)
            inner = self.redirects(node.redirects, cwd, ctx)
            new_cwd = cwd
            for item in node.items:
                new_cwd = self.walk(item, new_cwd, inner)
            return cwd if node.subshell else new_cwd
        return self.command(node, cwd, ctx)

    def substitutions(self, bodies: Sequence[Node], cwd: str | None) -> None:
        """``$(...)`` and ``<(...)`` run before the command: their writes count,
        their output is no observation."""
        for body in bodies:
            self.walk(body, cwd, _Ctx(hidden=True, in_subst=True))

    def redirects(self, redirects: Sequence[Redirect], cwd: str | None, ctx: _Ctx,
                  content: str | None = None) -> _Ctx:
        """Apply redirections: record file writes (before the command runs) and
        return the context the command runs in (stdin, hidden stdout)."""
        out = _Ctx(stdin=ctx.stdin, hidden=ctx.hidden, in_subst=ctx.in_subst)
        stdout_targets = [r for r in redirects if _is_stdout_file(r)]
        for r in redirects:
            stdin = _stdin_of(r, self.art, cwd)
            if stdin is not None:
                out.stdin = stdin
            elif r.op in _OUT_OPS and isinstance(r.target, Word):
                arg = _Arg(r.target.text, r.target.literal)
                if r.fd in (None, 1) or r.op.startswith("&"):
                    out.hidden = True
                append = r.op in (">>", "&>>")
                # only a lone stdout target receives the command's (known) output
                text = content if len(stdout_targets) == 1 and r is stdout_targets[0] else None
                if text is not None and append:
                    prior = self.source_of(self.art(arg.text, cwd)) if arg.literal else None
                    text = prior + text if prior is not None else None
                self.write(arg, cwd, ">>" if append else ">", content=text)
        return out

    # ---- simple commands

    def command(self, node: Command, cwd: str | None, ctx: _Ctx) -> str | None:
        self.substitutions(node.substitutions, cwd)
        args = [_Arg(w.text, w.literal) for w in node.words]
        # the command's output text, for `cat <<EOF > f` and `echo x > f`
        content = self._stdout_text(args, cwd, ctx, node.redirects)
        inner = self.redirects(node.redirects, cwd, ctx, content)
        if not args:
            return cwd
        return self.run(args, cwd, inner)

    def _stdout_text(self, args: Sequence[_Arg], cwd: str | None, ctx: _Ctx,
                     redirects: Sequence[Redirect]) -> str | None:
        if not args or not all(a.literal for a in args):
            return None
        name = posixpath.basename(args[0].text)
        stdin = ctx.stdin
        for r in redirects:  # the command's own stdin redirection wins
            stdin = _stdin_of(r, self.art, cwd) or stdin
        if name == "cat":
            files = [a for a in args[1:] if a.text != "-"]
            if any(a.text.startswith("-") for a in args[1:] if a.text != "-"):
                return None
            if not files:
                if stdin[0] == "text":
                    return stdin[1]
                if stdin[0] == "file":
                    return self.source_of(stdin[1])
                return None
            texts = [self.source_of(self.art(a.text, cwd)) for a in files]
            return "".join(t for t in texts if t is not None) if all(t is not None for t in texts) else None
        if name == "echo":
            rest = [a.text for a in args[1:]]
            newline = "\n"
            while rest and re.fullmatch(r"-[neE]+", rest[0]):
                if "e" in rest[0]:
                    return None
                if "n" in rest[0]:
                    newline = ""
                rest = rest[1:]
            return " ".join(rest) + newline
        if name == "printf":
            return _printf_text([a.text for a in args[1:]])
        return None

    def run(self, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> str | None:
        """Interpret one simple command; returns the working directory after it."""
        name = posixpath.basename(args[0].text) if args[0].literal else ""
        rest = args[1:]
        if name in ("cd", "pushd"):
            operands = [a for a in rest if not a.text.startswith("-") or a.text == "-"]
            if not operands or not operands[0].literal or operands[0].text in ("-", "~"):
                return None
            return _absolute(operands[0].text, cwd)
        if name == "popd":
            return None
        if name in _WRAPPERS:
            return self.run(rest, cwd, ctx) if rest else cwd
        if name == "timeout":
            _, operands = _options(rest, "sk", ("signal", "kill-after"))
            return self.run(operands[1:], cwd, ctx) if len(operands) > 1 else cwd
        if name == "env":
            i = 0
            while i < len(rest) and (rest[i].text.startswith("-") or "=" in rest[i].text):
                i += 1
            return self.run(rest[i:], cwd, ctx) if i < len(rest) else cwd
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, name, rest, cwd, ctx)
        elif _PYTHON.match(name):
            self.python(rest, cwd, ctx)
        elif name and name not in _READ_ONLY and any(a.text.split("=", 1)[0] in _GENERIC_SWITCHES for a in rest):
            self.cmd_inplace(name, rest, cwd, ctx)
        elif name and name not in _READ_ONLY and name not in _RUNNERS and not name.endswith(".py"):
            self.names(rest, cwd)
        return cwd

    def names(self, args: Sequence[_Arg], cwd: str | None) -> None:
        """An unknown program's literal operands that resolve to artifacts: it may write them."""
        for a in args:
            if not a.literal or a.text.startswith("-") or "=" in a.text or a.text in (".", "..") \
                    or not ("/" in a.text or _looks_like_file(a.text)):
                continue  # an option, a value, or a bare word (a name, a pattern), not a path
            artifact = self.art(a.text, cwd)
            if artifact is not None and not artifact.startswith(("/dev/", "/proc/", "/tmp/")):
                self.events.append(_Name(artifact))

    # ---- readers

    def _stdin_file(self, ctx: _Ctx) -> _Arg | None:
        if ctx.stdin[0] == "file" and ctx.stdin[1]:
            path = ctx.stdin[1]
            return _Arg(path if path.startswith("/") else posixpath.join(self.root, path), True)
        return None

    def _files_or_stdin(self, operands: list[_Arg], ctx: _Ctx) -> list[_Arg]:
        if operands:
            return operands
        f = self._stdin_file(ctx)
        return [f] if f else []

    def cmd_reader(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        takes = {"nl": "bdfhilnsvw", "od": "AjNStw", "hexdump": "enfsL", "xxd": "cglos"}.get(name, "")
        _, operands = _options(args, takes)
        for f in self._files_or_stdin(operands, ctx):
            self.read(f, cwd, None, name, ctx)

    def cmd_head(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "nc", ("lines", "bytes"), numeric=True)
        rng: str | None = None
        if name == "head" and not _has(opts, "c", "bytes"):
            count = _last(opts, "n", "lines", "#")
            count = "10" if count is None else count
            if count.isdigit() and int(count) >= 1:
                rng = f"1:{int(count)}"
        for f in self._files_or_stdin(operands, ctx):
            self.read(f, cwd, rng, name, ctx)

    def cmd_sed(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "efl", ("expression", "file", "line-length"), attached="i")
        scripts = [v or "" for n, v in opts if n in ("e", "expression")]
        if not scripts and not _has(opts, "f", "file"):
            if not operands:
                return
            scripts = [operands[0].text]
            operands = operands[1:]
        if _has(opts, "i", "in-place"):
            for f in operands:
                self.write(f, cwd, "sed -i")
            return
        quiet = _has(opts, "n", "quiet", "silent")
        ranges = _sed_ranges(scripts) if quiet else None
        tool = "sed -n" if quiet else "sed"
        for f in self._files_or_stdin(operands, ctx):
            for rng in ranges or (None,):
                self.read(f, cwd, rng, tool, ctx)

    def cmd_grep(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(
            args, "efmABCdD",
            ("regexp", "file", "max-count", "after-context", "before-context", "context", "devices",
             "directories", "include", "exclude", "exclude-dir", "exclude-from", "label", "color",
             "colour", "binary-files", "group-separator"),
        )
        recursive = _has(opts, "r", "R", "recursive", "dereference-recursive") or \
            _last(opts, "d", "directories") == "recurse"
        if not _has(opts, "e", "regexp", "f", "file"):
            operands = operands[1:]  # the pattern
        files = operands if operands or recursive else self._files_or_stdin(operands, ctx)
        for f in files:
            if recursive and not _looks_like_file(f.text):
                continue  # a directory is no file artifact
            self.read(f, cwd, None, "grep", ctx)

    def cmd_awk(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "Fvf", ("field-separator", "assign", "file"))
        program = None
        if not _has(opts, "f", "file"):
            if not operands:
                return
            program = operands[0].text
            operands = operands[1:]
        operands = [a for a in operands if "=" not in a.text]  # var=value assignments
        rng = _awk_range(program) if program is not None else None
        for f in self._files_or_stdin(operands, ctx):
            self.read(f, cwd, rng, "awk", ctx)

    def cmd_diff(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "UCIFLSxX", ("unified", "context", "label", "exclude"))
        if _has(opts, "r", "recursive"):
            operands = [a for a in operands if _looks_like_file(a.text)]
        for f in operands:
            self.read(f, cwd, None, name, ctx)

    # ---- writers

    def cmd_tee(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "", ("output-error",))
        append = _has(opts, "a", "append")
        text = ctx.stdin[1] if ctx.stdin[0] == "text" else None
        if ctx.stdin[0] == "file":
            text = self.source_of(ctx.stdin[1])
        for f in operands:
            content = text
            if content is not None and append:
                prior = self.source_of(self.art(f.text, cwd)) if f.literal else None
                content = prior + content if prior is not None else None
            self.write(f, cwd, "tee", content=content)

    def _copy_targets(self, args: list[_Arg]) -> tuple[list[_Arg], list[tuple[_Arg, _Arg]], bool]:
        opts, operands = _options(args, "tSZ", ("target-directory", "suffix", "backup", "context"))
        recursive = _has(opts, "r", "R", "a", "recursive", "archive")
        target = _last(opts, "t", "target-directory")
        if target is not None:
            srcs, dst, as_dir = operands, _Arg(target, True), True
        elif len(operands) >= 2:
            srcs, dst = operands[:-1], operands[-1]
            as_dir = len(srcs) > 1 or dst.text.endswith("/") or posixpath.basename(dst.text) in (".", "..")
        else:
            return operands, [], recursive
        pairs = []
        for s in srcs:
            if as_dir:
                if not (s.literal and dst.literal):
                    pairs.append((s, _Arg(dst.text, False)))
                else:
                    pairs.append((s, _Arg(posixpath.join(dst.text, posixpath.basename(s.text.rstrip("/"))), True)))
            else:
                pairs.append((s, dst))
        return srcs, pairs, recursive

    def cmd_cp(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        _, pairs, recursive = self._copy_targets(args)
        for src, dst in pairs:
            content = None if recursive or not src.literal else self.source_of(self.art(src.text, cwd))
            if name == "mv":  # the source is gone; a directory moves with everything under it
                self.write(src, cwd, "mv", tree=not _looks_like_file(src.text))
                recursive = not _looks_like_file(dst.text)
            self.write(dst, cwd, name, tree=recursive, content=None if recursive else content)

    def cmd_rm(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args)
        recursive = _has(opts, "r", "R", "recursive")
        for f in operands:
            self.write(f, cwd, name, tree=recursive)

    def cmd_touch(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        _, operands = _options(args, "dtr", ("date", "reference"))
        for f in operands:
            self.write(f, cwd, name)

    def _patch_text(self, source: tuple[str, str | None] | _Arg | None, cwd: str | None) -> str | None:
        if isinstance(source, _Arg):
            return self.source_of(self.art(source.text, cwd)) if source.literal else None
        if source is None:
            return None
        kind, value = source
        if kind in ("text", "expanded"):
            return value
        if kind == "file":
            return self.source_of(value)
        return None

    def cmd_patch(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(
            args, "BdDFgioprVYz",
            ("prefix", "directory", "ifdef", "fuzz", "get", "input", "output", "strip", "reject-file",
             "version-control", "basename-prefix", "suffix", "backup-if-mismatch", "quoting-style"),
        )
        if _has(opts, "dry-run", "C", "check"):
            return
        strip_text = _last(opts, "p", "strip")
        strip = int(strip_text) if strip_text is not None and strip_text.isdigit() else None
        directory = _last(opts, "d", "directory")
        base = _absolute(directory, cwd) if directory is not None else cwd
        output = _last(opts, "o", "output")
        if output is not None:
            if output != "-":
                self.write(_Arg(output, True), cwd, "patch")
            return
        source: tuple[str, str | None] | _Arg | None = ctx.stdin
        patch_file = _last(opts, "i", "input")
        if patch_file is not None:
            source = _Arg(patch_file, True)
        elif len(operands) >= 2:
            source = operands[1]
        if operands:  # patch ORIGFILE [PATCHFILE]: only ORIGFILE changes
            self.write(operands[0], base, "patch")
            return
        text = self._patch_text(source, cwd)
        targets = patch_targets(text, strip=strip) if text is not None else None
        if targets is None:
            self.unknown_write(base, "patch")
            return
        for t in targets:
            self.write(_Arg(t, True), base, "patch")

    def cmd_git(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        i = 0
        while i < len(args) and args[i].text.startswith("-"):
            if args[i].text == "-C" and i + 1 < len(args):
                cwd = _absolute(args[i + 1].text, cwd) if args[i + 1].literal else None
                i += 1
            elif args[i].text == "-c":
                i += 1
            i += 1
        if i >= len(args):
            return
        sub, rest = args[i].text, args[i + 1 :]
        root = self.repo_root(cwd)
        if sub == "diff":
            self._git_diff(rest, cwd, ctx)
        elif sub == "blame":
            opts, operands = _options(rest, "LSCM")
            lines = _last(opts, "L")
            rng = None
            m = re.fullmatch(r"(\d+),(\d+)", lines or "")
            if m and 1 <= int(m.group(1)) <= int(m.group(2)):
                rng = f"{m.group(1)}:{m.group(2)}"
            if operands:
                self.read(operands[-1], cwd, rng, "git blame", ctx)
        elif sub in ("checkout", "restore"):
            self._git_checkout(sub, rest, cwd, root)
        elif sub == "stash":
            action = rest[0].text if rest and not rest[0].text.startswith("-") else "push"
            if action in ("push", "save", "pop", "apply"):
                if "--" in [a.text for a in rest]:
                    paths = [a for a in rest[[a.text for a in rest].index("--") + 1 :]]
                    for p in paths:
                        self.write(p, cwd, "git stash", tree=not _looks_like_file(p.text))
                else:
                    self._tree(root, "git stash")
        elif sub == "reset":
            if {"--hard", "--merge", "--keep"} & {a.text for a in rest}:
                self._tree(root, "git reset")
        elif sub == "clean":
            opts, operands = _options(rest, "eE")
            if not _has(opts, "n", "dry-run"):
                if operands:
                    for p in operands:
                        self.write(p, cwd, "git clean", tree=True)
                else:
                    self._tree(cwd, "git clean")
        elif sub == "switch" and rest and not {"--abort", "--quit"} & {a.text for a in rest}:
            self._tree(root, "git switch")  # a switch, with or without -c/-C NAME START, --detach REV
        elif sub in ("switch", "merge", "rebase", "cherry-pick", "revert", "pull", "am"):
            if not {"--abort", "--quit"} & {a.text for a in rest} or sub in ("rebase", "merge", "am"):
                self._tree(root, f"git {sub}")
        elif sub == "apply":
            self._git_apply(rest, cwd, root, ctx)
        elif sub == "mv":
            _, operands = _options(rest)
            for a in operands:
                self.write(a, cwd, "git mv")
        elif sub == "rm":
            opts, operands = _options(rest)
            if not _has(opts, "cached"):
                for a in operands:
                    self.write(a, cwd, "git rm", tree=_has(opts, "r"))

    def _tree(self, directory: str | None, tool: str) -> None:
        if directory is None:
            raise _Unsupported(f"{tool}: unknown directory")
        artifact = self.art(directory, None)
        assert artifact is not None
        self.write_artifact(artifact, tool, tree=True)

    def _is_path(self, a: _Arg, cwd: str | None) -> bool:
        """A git operand taken for a path (not a ref): not literal (a glob, a variable), a file
        suffix, or an artifact the session knows."""
        artifact = self.art(a.text, cwd) if a.literal else None
        if artifact is not None and (artifact in self.known or artifact in self.local):
            return True
        if not a.literal:
            return True
        return _looks_like_file(a.text) and not _VERSION_REF.fullmatch(a.text)

    @staticmethod
    def _pathlike(a: _Arg) -> bool:
        t = a.text
        return ".." not in t and ("/" in t or "." in t or not a.literal)

    def _git_diff(self, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        texts = [a.text for a in args]
        if "--cached" in texts or "--staged" in texts or "--no-index" in texts:
            return
        _opts, operands = _options(args, "OSGUM", ("output",))
        if "--" in texts:
            cut = texts.index("--")
            revs = [a for a in args[:cut] if not a.text.startswith("-")]
            paths = args[cut + 1 :]
        else:
            revs = [a for a in operands if not self._pathlike(a)]
            paths = [a for a in operands if self._pathlike(a)]
        if len(revs) >= 2 or any(".." in r.text for r in revs):
            return  # revision against revision: no working file
        for p in paths:
            if _looks_like_file(p.text):
                self.read(p, cwd, None, "git diff", ctx)

    def _git_checkout(self, sub: str, args: list[_Arg], cwd: str | None, root: str | None) -> None:
        texts = [a.text for a in args]
        tool = f"git {sub}"
        if sub == "restore":
            opts, paths = _options(args, "sp", ("source",))
            if _has(opts, "S", "staged") and not _has(opts, "W", "worktree"):
                return
        elif "--" in texts:
            cut = texts.index("--")
            paths = args[cut + 1 :]
            if not paths and [a for a in args[:cut] if not a.text.startswith("-")]:
                self._tree(root, tool)  # git checkout REV --: a switch
                return
        else:
            opts, operands = _options(args, "bB", ("orphan",))
            if _has(opts, "p", "patch"):
                return
            if _has(opts, "b", "B", "orphan"):
                # a new branch: at HEAD the tree stays; at a start point (origin/x, a tag, a commit) it moves
                if operands:
                    self._tree(root, tool)
                return
            # without "--" git takes an operand for a revision unless it is a path: one with a
            # file suffix, or an artifact the session has met; a ref is never taken for a file
            paths = [a for a in operands if a.text == "." or (self._pathlike(a) and self._is_path(a, cwd))]
            if len(paths) < len(operands) and operands and operands[0] not in paths:
                self._tree(root, tool)  # a switch to the revision (and its paths, if any)
                paths = [] if len(paths) == len(operands) - 1 and not paths else paths
            if not paths:
                return
        for p in paths:
            tree = (p.literal and not _looks_like_file(p.text)) or not p.literal
            if not p.literal:
                self.unknown_write(cwd, tool)
            else:
                self.write(p, cwd, tool, tree=tree)

    def _git_apply(self, args: list[_Arg], cwd: str | None, root: str | None, ctx: _Ctx) -> None:
        opts, operands = _options(args, "pC", ("directory", "include", "exclude", "build-fake-ancestor"))
        if _has(opts, "cached") and not _has(opts, "index"):
            return
        if _has(opts, "check", "stat", "numstat", "summary") and not _has(opts, "apply"):
            return
        strip_text = _last(opts, "p")
        strip = int(strip_text) if strip_text is not None and strip_text.isdigit() else 1
        directory = _last(opts, "directory")
        base = root
        if base is not None and directory:
            base = posixpath.normpath(posixpath.join(base, directory))
        sources: list[tuple[str, str | None] | _Arg] = list(operands) if operands else [ctx.stdin]
        for s in sources:
            if isinstance(s, _Arg) and s.text == "-":
                s = ctx.stdin
            text = self._patch_text(s, cwd)
            targets = patch_targets(text, strip=strip) if text is not None else None
            if targets is None:
                self._tree(base, "git apply")
                continue
            for t in targets:
                self.write(_Arg(t, True), base, "git apply")

    def cmd_formatter(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        if name == "sqlfluff":
            if not args or args[0].text != "fix":
                return
            args = args[1:]
            _, operands = _options(
                args, "pe",
                ("dialect", "rules", "exclude-rules", "templater", "ignore", "encoding", "config",
                 "processes", "logger", "format", "fixed-suffix", "bench", "FIX_EVEN_UNPARSABLE",
                 "disable-progress-bar", "extension", "write-output", "persist-timing"),
            )
        elif name == "ruff":
            texts = [a.text for a in args]
            if not args or (args[0].text != "format" and "--fix" not in texts):
                return
            _, operands = _options(args[1:] if args[0].text in ("check", "format") else args,
                                   "", ("config", "select", "ignore", "line-length", "target-version"))
        elif name in ("autopep8", "yapf"):
            opts, operands = _options(args, "", ("select", "ignore", "style", "max-line-length"))
            if not _has(opts, "i", "in-place"):
                return
        else:  # black, isort
            opts, operands = _options(args, "lplm", ("line-length", "target-version", "config", "profile",
                                                      "include", "exclude", "settings-path"))
            if _has(opts, "check", "diff", "c"):
                return
        for f in operands:
            if f.text == "-":
                continue
            self.write(f, cwd, f"{name} fix" if name == "sqlfluff" else name, tree=not _looks_like_file(f.text))

    def cmd_launcher(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        """``npx prettier --write x`` and the like: interpret the program launched."""
        rest = list(args)
        if name in _LAUNCH_SUBCOMMANDS:
            if not rest or rest[0].text not in _LAUNCH_SUBCOMMANDS[name]:
                if name == "yarn" and rest and posixpath.basename(rest[0].text) in _INPLACE:
                    self.run(rest, cwd, ctx)  # yarn runs a package's binary by its name
                return
            sub, rest = rest[0].text, rest[1:]
            if name == "uv" and sub == "tool" and rest and rest[0].text == "run":
                rest = rest[1:]
        while rest and rest[0].text.startswith("-"):  # the launcher's own options (npx --yes, -p pkg)
            flag = rest[0].text
            rest = rest[2:] if flag in ("-p", "--package", "--from", "--with") and len(rest) > 1 else rest[1:]
        if rest:
            self.run(rest, cwd, ctx)

    def cmd_inplace(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        """A program of :data:`_INPLACE` (or one run with a generic in-place switch): the files
        it names are written when its rule says it rewrites them (module docstring)."""
        rule = _INPLACE.get(name, _GENERIC_RULE)
        rest = list(args)
        if rule.subcommands:
            if not rest or rest[0].text not in rule.subcommands:
                return
            rest = rest[1:]
        opts, operands = _options(rest, rule.takes, rule.long_takes, attached=rule.attached)
        # single-dash long options too (terraform fmt -check, buildifier -mode=check)
        names = {n for n, _ in opts} | {a.text.lstrip("-").split("=", 1)[0] for a in rest if a.text.startswith("-")}
        if names & rule.checks:
            return
        if not (rule.default or names & rule.switches):
            return
        if rule.script_first and not names & {"e", "E"}:
            operands = operands[1:]  # perl / ruby: the program file, then the files it edits
        operands = operands[rule.skip:]
        tool = f"{name} (in place)"
        paths = [a for a in operands if a.text not in ("-", "./...", "...") and not a.text.startswith("-")]
        if not paths:
            if rule.tree_default and cwd is not None:
                self.unknown_write(cwd, tool)
            return
        for a in paths:
            if a.text.endswith("/..."):  # go ./pkg/...: that package tree
                self.write(_Arg(a.text[:-4] or ".", a.literal), cwd, tool, tree=True)
            else:
                self.write(a, cwd, tool, tree=not _looks_like_file(a.text))

    def cmd_xargs(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        _, inner = _options(args, "IiEeLlnPsda", ("replace", "eof", "max-lines", "max-args", "max-procs",
                                                   "max-chars", "delimiter", "arg-file"))
        # _options took the inner command's own options too: find the command word in args
        texts = [a.text for a in args]
        if not inner:
            return
        start = texts.index(inner[0].text)
        if self._is_writer(args[start:]):
            self.unknown_write(cwd, f"xargs {posixpath.basename(inner[0].text)}")

    def cmd_find(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        roots: list[_Arg] = []
        i = 0
        while i < len(args) and not args[i].text.startswith(("-", "(", "!")):
            roots.append(args[i])
            i += 1
        roots = roots or [_Arg(".", True)]
        writes = False
        texts = [a.text for a in args]
        if "-delete" in texts:
            writes = True
        for k, t in enumerate(texts):
            if t in ("-exec", "-execdir", "-ok", "-okdir"):
                end = k + 1
                while end < len(texts) and texts[end] not in (";", "+"):
                    end += 1
                if self._is_writer(args[k + 1 : end]):
                    writes = True
        if writes:
            for r in roots:
                if r.literal:
                    self.write(r, cwd, "find", tree=True)
                else:
                    self.unknown_write(cwd, "find")

    @staticmethod
    def _is_writer(argv: Sequence[_Arg]) -> bool:
        if not argv:
            return False
        name = posixpath.basename(argv[0].text)
        if name in _SIMPLE_WRITERS:
            return True
        if name == "sed":
            return any(a.text.startswith(("-i", "--in-place")) or
                       (a.text.startswith("-") and not a.text.startswith("--") and "i" in a.text)
                       for a in argv[1:])
        return False

    # ---- programs with a known source

    def python(self, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        source: str | None = None
        i = 0
        while i < len(args):
            a = args[i]
            t = a.text
            if t == "-c":
                source = args[i + 1].text if i + 1 < len(args) and args[i + 1].literal else None
                break
            if t.startswith("-c"):
                source = t[2:] if a.literal else None
                break
            if t == "-m" or t.startswith("-m"):
                module = t[2:] or (args[i + 1].text if i + 1 < len(args) else "")
                rest = args[i + (1 if t[2:] else 2) :]
                if module in _FORMATTERS:  # python -m sqlfluff fix x.sql
                    self.cmd_formatter(module, list(rest), cwd, ctx)
                return
            if t == "-":
                source = ctx.stdin[1] if ctx.stdin[0] in ("text", "expanded") else None
                break
            if t in ("-W", "-X", "--check-hash-based-pycs"):
                i += 2
                continue
            if t.startswith("-"):
                i += 1
                continue
            if not a.literal:
                return
            source = self.source_of(self.art(t, cwd))
            break
        else:  # no script: python reads its program from stdin
            source = ctx.stdin[1] if ctx.stdin[0] in ("text", "expanded") else None
        if source is None:
            return
        for path in python_writes(source):
            self.write(_Arg(path, True), cwd, "python")

    def cmd_shell(self, name: str, args: list[_Arg], cwd: str | None, ctx: _Ctx) -> None:
        if self.depth >= _MAX_DEPTH:
            return
        opts, operands = _options(args, "o", ())
        script: str | None
        if _has(opts, "c"):
            script = operands[0].text if operands and operands[0].literal else None
        elif operands:
            script = self.source_of(self.art(operands[0].text, cwd)) if operands[0].literal else None
        else:
            script = ctx.stdin[1] if ctx.stdin[0] in ("text", "expanded") else None
        if not script:
            return
        try:
            tree = parse(script)
        except BashSyntaxError:  # an unparsable script: its effects are unknown
            return
        sub = _Walker(script, self.root, {**self.known, **{k: v for k, v in self.local.items() if v is not None}},
                      self.depth + 1)
        sub.local.update(self.local)
        sub.walk_all(tree, cwd)
        for e in sub.events:
            if isinstance(e, Read):
                if not (ctx.hidden or ctx.in_subst):
                    before = sum(1 for w in self.events if isinstance(w, Write) and
                                 (w.artifact == e.artifact or (w.tree and _covers(w.artifact, e.artifact))))
                    self.events.append(Read(e.artifact, e.range, e.tool, before + e.writes_before))
            elif isinstance(e, Write):
                self.write_artifact(e.artifact, e.tool, tree=e.tree, content=e.content)
            else:
                self.events.append(e)


_Handler = Any
@dataclass(frozen=True)
class _InPlace:
    """How a program rewrites the files it names: ``switches`` (option names, short or long,
    that make it write in place), ``default`` (it writes unless a ``checks`` option asks it to
    only check), ``subcommands`` (it writes only under one of these first words), ``takes`` /
    ``long_takes`` / ``attached`` (options with a value, as :func:`_options` takes them),
    ``script_first`` (perl / ruby: without ``-e`` the first operand is the program), ``skip``
    (leading operands that are not files: ``sd FIND REPLACE FILE...``), ``tree_default`` (no
    file operand: it rewrites the working directory's tree, ``cargo fmt``)."""

    switches: frozenset[str] = frozenset()
    default: bool = False
    checks: frozenset[str] = frozenset()
    subcommands: frozenset[str] = frozenset()
    takes: str = ""
    long_takes: tuple[str, ...] = ()
    attached: str = ""
    script_first: bool = False
    skip: int = 0
    tree_default: bool = False


def _rule(switches: str = "", *, checks: str = "", subcommands: str = "", **kw: Any) -> _InPlace:
    return _InPlace(switches=frozenset(switches.split()), checks=frozenset(checks.split()),
                    subcommands=frozenset(subcommands.split()), **kw)


_COMMON_TAKES = ("config", "c", "ignore-path", "parser", "plugin", "log-level", "ext", "rule", "format", "output",
                 "cache-location", "config-path", "style", "resolve-plugins-relative-to", "max-warnings")
_FMT_CHECKS = "check c l list-different diff dry-run dryrun n lint"
#: programs that rewrite the files they name (module docstring, "In-place writers by rule")
_INPLACE: dict[str, _InPlace] = {
    "perl": _rule("i", takes="eEIMmlx0C", attached="i", script_first=True),
    "ruby": _rule("i", takes="eIrEC", attached="i", script_first=True),
    "prettier": _rule("write w", long_takes=_COMMON_TAKES),
    "gofmt": _rule("w", takes="r"), "goimports": _rule("w", takes="local"),
    "shfmt": _rule("w write", takes="ilf"),
    "clang-format": _rule("i", long_takes=("style", "assume-filename")),
    "eslint": _rule("fix", takes="fc", long_takes=_COMMON_TAKES),
    "stylelint": _rule("fix", long_takes=_COMMON_TAKES), "standard": _rule("fix"), "xo": _rule("fix"),
    "markdownlint": _rule("fix", takes="c", long_takes=_COMMON_TAKES),
    "rubocop": _rule("a A x autocorrect auto-correct autocorrect-all auto-correct-all fix-layout",
                     long_takes=_COMMON_TAKES),
    "codespell": _rule("w write-changes", takes="LSI"),
    "yq": _rule("i inplace", skip=1), "autoflake": _rule("i in-place"), "docformatter": _rule("i in-place"),
    "google-java-format": _rule("i replace"), "ktlint": _rule("F format"), "djlint": _rule("reformat"),
    "rustfmt": _rule(default=True, checks="check emit", long_takes=("edition", "config-path", "emit")),
    "mdformat": _rule(default=True, checks="check"), "pyupgrade": _rule(default=True),
    "add-trailing-comma": _rule(default=True), "reorder-python-imports": _rule(default=True),
    "swiftformat": _rule(default=True, checks="lint dryrun"), "buildifier": _rule(default=True, checks="mode"),
    "dos2unix": _rule(default=True, checks="n newfile"), "unix2dos": _rule(default=True, checks="n newfile"),
    "sponge": _rule(default=True, checks="a"), "ed": _rule(default=True), "ex": _rule(default=True),
    "sd": _rule(default=True, checks="p preview", takes="f", skip=2),
    "cargo": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt fix", tree_default=True),
    "go": _rule(default=True, checks="n", subcommands="fmt", tree_default=True),
    "deno": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt", tree_default=True),
    "dprint": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt", tree_default=True),
    "terraform": _rule(default=True, checks="check diff", subcommands="fmt", tree_default=True),
    "tofu": _rule(default=True, checks="check diff", subcommands="fmt", tree_default=True),
    "taplo": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt format", tree_default=True),
    "dotnet": _rule(default=True, checks="verify-no-changes", subcommands="format", tree_default=True),
    "mix": _rule(default=True, checks="check-formatted", subcommands="format", tree_default=True),
    "biome": _rule("write apply apply-unsafe fix", subcommands="format check lint", tree_default=True),
    "php-cs-fixer": _rule(default=True, checks="dry-run", subcommands="fix", tree_default=True),
}
#: the generic rule: any other program run with one of these switches rewrites what it names
_GENERIC_SWITCHES: Final = frozenset({"--write", "--fix", "--in-place", "--inplace", "--replace", "--overwrite"})
_GENERIC_RULE: Final = _rule("write fix in-place inplace replace overwrite", long_takes=_COMMON_TAKES)
#: programs known not to write the files they name, whatever their options (``grep --fix`` is no such thing)
_READ_ONLY: Final = frozenset({*_READERS, "ls", "echo", "printf", "grep", "rg", "ag", "which", "type", "stat", "file",
                               "du", "df", "pwd", "env", "date", "true", "false", "test", "[", "pip", "npm", "node",
                               "pytest", "tox", "nox", "make", "curl", "wget", "jq", "diff"})
#: interpreters, test runners and build tools: running a file (``python x.py``, ``pytest
#: tests/x.py``, ``node app.js``, ``make target``) does not count as naming it for a write
_RUNNERS: Final = frozenset({"python", "python3", "pytest", "py.test", "node", "deno", "bun", "ruby", "perl", "php",
                             "java", "javac", "go", "cargo", "rustc", "gcc", "g++", "cc", "clang", "clang++", "make",
                             "cmake", "ninja", "tox", "nox", "jest", "mocha", "vitest", "rspec", "phpunit", "dotnet",
                             "mvn", "gradle", "./gradlew", "gradlew", "tsc", "ts-node", "tsx", "coverage", "mypy",
                             "pyright", "pylint", "flake8", "ruff", "black", "isort", "bandit", "pip", "pip3",
                             "conda", "docker", "kubectl", "helm", "ssh", "scp", "rsync", "git", "svn", "hg",
                             "bazel", "buck", "lua", "Rscript", "julia", "swift", "kotlin", "scala", "elixir",
                             "erl", "ghc", "stack", "timeout", "watch", "strace", "valgrind", "gdb", "cd", "export",
                             "set", "unset", "alias", "source", "exit", "sleep", "kill", "ps", "chmod", "chown",
                             "ln", "mkdir", "rmdir", "tar", "zip", "unzip", "gzip", "gunzip", "xz", "open",
                             "code", "vim", "vi", "nano", "emacs", "less", "more", "man", "help", "history",
                             "sort", "uniq", "cut", "tr", "paste", "join", "column", "fold", "fmt", "expand",
                             "basename", "dirname", "realpath", "readlink", "md5sum", "sha256sum", "sha1sum",
                             "base64", "locate", "tree", "whereis", "id", "whoami", "uname", "hostname"})
#: launchers that run a program named after them; those listed here need the subcommand first
_LAUNCHERS: Final = frozenset({"npx", "bunx", "pnpx", "uvx", "pnpm", "yarn", "bun", "pipx", "poetry", "uv", "pdm",
                               "npm", "hatch", "rye"})
_LAUNCH_SUBCOMMANDS: Final = {"pnpm": frozenset({"dlx", "exec"}), "yarn": frozenset({"dlx", "exec"}),
                              "bun": frozenset({"x"}), "pipx": frozenset({"run"}), "poetry": frozenset({"run"}),
                              "uv": frozenset({"run", "tool"}), "pdm": frozenset({"run"}), "npm": frozenset({"exec"}),
                              "hatch": frozenset({"run"}), "rye": frozenset({"run"})}

_HANDLERS: dict[str, _Handler] = {
    **{n: _Walker.cmd_reader for n in _READERS},
    "head": _Walker.cmd_head,
    "tail": _Walker.cmd_head,
    "sed": _Walker.cmd_sed,
    "grep": _Walker.cmd_grep,
    "egrep": _Walker.cmd_grep,
    "fgrep": _Walker.cmd_grep,
    "awk": _Walker.cmd_awk,
    "gawk": _Walker.cmd_awk,
    "mawk": _Walker.cmd_awk,
    "diff": _Walker.cmd_diff,
    "cmp": _Walker.cmd_diff,
    "tee": _Walker.cmd_tee,
    "cp": _Walker.cmd_cp,
    "mv": _Walker.cmd_cp,
    "rm": _Walker.cmd_rm,
    "touch": _Walker.cmd_touch,
    "patch": _Walker.cmd_patch,
    "git": _Walker.cmd_git,
    "xargs": _Walker.cmd_xargs,
    "find": _Walker.cmd_find,
    "bash": _Walker.cmd_shell,
    "sh": _Walker.cmd_shell,
    "source": _Walker.cmd_shell,
    ".": _Walker.cmd_shell,
    **{n: _Walker.cmd_formatter for n in _FORMATTERS},
    **{n: _Walker.cmd_inplace for n in _INPLACE},
    **{n: _Walker.cmd_launcher for n in _LAUNCHERS},
}


# --------------------------------------------------------------------------- API


def command_effects(
    command: str,
    *,
    cwd: str = ROOT,
    known_sources: Mapping[str, str] | None = None,
    root: str = ROOT,
) -> CommandEffects:
    """Reads and writes of one bash ``command`` run in ``cwd``.

    ``known_sources`` maps an artifact (normalised as in the module docstring)
    to the text written to it earlier in the session, so that ``python F``,
    ``bash F`` and ``git apply F`` can be interpreted. ``root`` is the repository
    root that artifacts are relative to. Never raises on odd input: what cannot
    be interpreted is ``parsed=False`` with a ``reason``.
    """
    if not command.strip():
        return CommandEffects(parsed=False, reason="empty command")
    try:
        tree = parse(command)
    except BashSyntaxError as exc:
        return CommandEffects(parsed=False, reason=f"tree-sitter-bash: {exc.message}")
    if not tree.items:
        return CommandEffects(parsed=False, reason="no command (only comments)")
    walker = _Walker(command, root, known_sources or {})
    try:
        walker.walk_all(tree, posixpath.normpath(cwd))
    except _Unsupported as exc:
        return CommandEffects(parsed=False, reason=str(exc))
    except RecursionError:
        return CommandEffects(parsed=False, reason="nested too deeply")
    reads = tuple(e for e in walker.events if isinstance(e, Read))
    writes = tuple(e for e in walker.events if isinstance(e, Write))
    names = tuple(dict.fromkeys(e.artifact for e in walker.events if isinstance(e, _Name)))
    shows = _whole_file(tree, posixpath.normpath(cwd), root)
    return CommandEffects(parsed=True, reads=reads, writes=writes, names=names,
                          shows=shows if not writes and [(r.artifact, r.range) for r in reads] == [(shows, None)]
                          else None)


def _whole_file(tree: Script, cwd: str | None, root: str) -> str | None:
    """The artifact a command prints whole and alone: a list of simple commands, each
    ``cd DIR`` with a literal DIR but the last, ``cat FILE`` with one literal operand, no
    option, no redirection, no substitution (``cd /testbed && cat src/a.py``). Anything
    else (a pipe, ``cat -n``, two files, ``echo`` around it, ``2>&1``...) is None: its
    output is not exactly the file's text."""
    items = tree.items
    if not items or not all(isinstance(c, Command) and c.words and not c.redirects and not c.substitutions
                            and all(w.literal for w in c.words) for c in items):
        return None
    commands = [c for c in items if isinstance(c, Command)]
    for c in commands[:-1]:
        texts = [w.text for w in c.words]
        if texts[0] != "cd" or len(texts) != 2 or texts[1].startswith("-") or texts[1] == "~":
            return None
        cwd = _absolute(texts[1], cwd)
    texts = [w.text for w in commands[-1].words]
    if texts[0] != "cat" or len(texts) != 2 or texts[1].startswith("-"):
        return None
    artifact = _artifact(texts[1], cwd, root)
    return artifact if artifact is not None and not _ignored_target(artifact) else None


@dataclass(frozen=True)
class CallEffects:
    """:class:`CommandEffects` of one call in a session, plus the written
    artifacts after tree expansion (in order, one per write event to emit) and
    ``contents``: per entry of ``written``, the artifact's exact text after that write
    (heredoc, ``echo``, ``printf``, ``cp`` of a known file), None when unknown (empty for an
    unparsed call)."""

    effects: CommandEffects
    written: tuple[str, ...]
    contents: tuple[str | None, ...] = ()
    #: artifacts the session has met that an unknown program named and did not provably
    #: write: their earlier reads are possibly stale (a notice, not a tombstone)
    touched: tuple[str, ...] = ()


class SessionEffects:
    """Runs :func:`command_effects` over a session's commands in order.

    Keeps ``known_sources`` (artifact -> exact text, from writes with known
    content; any other write to the artifact forgets it) and ``seen`` (every
    artifact read or written so far, in first-seen order), which tree writes are
    expanded over: a tree write over ``src`` becomes one write per seen artifact
    under ``src``. All commands run from ``cwd`` (mini-swe-agent starts every
    command in a fresh shell in its working directory).
    """

    def __init__(self, *, cwd: str = ROOT, root: str = ROOT) -> None:
        self.cwd = cwd
        self.root = root
        self.known_sources: dict[str, str] = {}
        self.seen: dict[str, None] = {}

    def run(self, command: str | None) -> CallEffects:
        if command is None:
            return CallEffects(CommandEffects(parsed=False, reason="arguments carry no command"), ())
        effects = command_effects(command, cwd=self.cwd, known_sources=self.known_sources, root=self.root)
        for r in effects.reads:
            self.seen.setdefault(r.artifact)
        written: list[str] = []
        contents: list[str | None] = []
        for w in effects.writes:
            if w.tree:
                for name in list(self.seen):
                    if _covers(w.artifact, name):
                        written.append(name)
                        contents.append(None)
                        self.known_sources.pop(name, None)
                for name in list(self.known_sources):
                    if _covers(w.artifact, name):
                        self.known_sources.pop(name, None)
                continue
            written.append(w.artifact)
            contents.append(w.content)
            self.seen.setdefault(w.artifact)
            if w.content is not None:
                self.known_sources[w.artifact] = w.content
            else:
                self.known_sources.pop(w.artifact, None)
        touched = tuple(a for a in effects.names if a in self.seen and a not in written)
        return CallEffects(effects, tuple(written), tuple(contents), touched)


def command_of(arguments: str, argument: str = "command") -> str | None:
    """The string ``argument`` (default ``command``) of a shell tool call's JSON arguments
    (None if absent, not a string or not JSON)."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    command = value.get(argument) if isinstance(value, dict) else None
    return command if isinstance(command, str) else None
