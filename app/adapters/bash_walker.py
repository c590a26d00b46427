"""The walk over a command's syntax tree (:class:`_Walker`): pipelines, groups, subshells,
substitutions and redirections, then each simple command by its program (readers, writers,
formatters, in-place writers, launchers, ``xargs``, ``find``, ``python``, nested shells), with
``patch`` and ``git`` in :mod:`app.adapters.bash_patches`. Rules in :mod:`app.adapters.bash_effects`."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any, Final

from app.adapters.bash_patches import _PatchCommands
from app.adapters.bash_programs import (
    _FORMATTERS,
    _GENERIC_RULE,
    _GENERIC_SWITCHES,
    _INPLACE,
    _LAUNCH_SUBCOMMANDS,
    _LAUNCHERS,
    _PYTHON,
    _READ_ONLY,
    _READERS,
    _RUNNERS,
    _SIMPLE_WRITERS,
    _WRAPPERS,
)
from app.adapters.bash_python import python_writes
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
from app.adapters.bash_values import (
    _STDIN_PIPE,
    Read,
    Write,
    _absolute,
    _Arg,
    _covers,
    _Ctx,
    _has,
    _last,
    _looks_like_file,
    _Name,
    _options,
)

_MAX_DEPTH: Final = 3  # nested bash scripts / -c strings


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


_OUT_OPS: Final = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})


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


class _Walker(_PatchCommands):
    """One command's walk: :meth:`walk_all` over its syntax tree records into ``events``
    (bookkeeping in :class:`app.adapters.bash_values._Recorder`)."""

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
