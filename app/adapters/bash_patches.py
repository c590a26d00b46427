"""Patches and git: the files a unified diff changes (:func:`patch_targets`) and the walker's
handlers of ``patch`` and ``git`` (diff, blame, checkout / restore, stash, reset, clean,
switch, merge, rebase, apply, mv, rm), rules in :mod:`app.adapters.bash_effects`."""

from __future__ import annotations

import posixpath
import re
from typing import Final

from app.adapters.bash_values import (
    _absolute,
    _Arg,
    _Ctx,
    _has,
    _last,
    _looks_like_file,
    _options,
    _Recorder,
)
from app.domain.text import split_lines

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


#: a tag or version ref (v1.2.0, 2.31.0-rc1, release-1.4): never a file for git checkout
_VERSION_REF: Final = re.compile(r"(?:[A-Za-z_-]*[-_/]?)?v?\d+(?:\.\d+)+(?:[-+.]?[A-Za-z0-9]+)*")


class _PatchCommands(_Recorder):
    """The walker's ``patch`` and ``git`` handlers (:class:`app.adapters.bash_walker._Walker`
    dispatches to them by program name)."""

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
