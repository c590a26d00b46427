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

Parts
-----
This module states the rules and holds the entry points; the interpretation is in
:mod:`app.adapters.bash_values` (the values above, artifact paths, options, the walk's
bookkeeping), :mod:`app.adapters.bash_walker` (the walk over the syntax tree and the simple
commands), :mod:`app.adapters.bash_patches` (``patch``, ``git`` and :func:`patch_targets`),
:mod:`app.adapters.bash_python` (:func:`python_writes`) and :mod:`app.adapters.bash_programs`
(programs by name, the in-place rules).

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

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from app.adapters.bash_patches import patch_targets
from app.adapters.bash_python import python_writes
from app.adapters.bash_syntax import (
    BashSyntaxError,
    Command,
    parse,
)
from app.adapters.bash_syntax import (
    Sequence as Script,
)
from app.adapters.bash_values import (
    ROOT,
    CommandEffects,
    Read,
    Write,
    _absolute,
    _artifact,
    _covers,
    _ignored_target,
    _Name,
    _Unsupported,
)
from app.adapters.bash_walker import _Walker

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
