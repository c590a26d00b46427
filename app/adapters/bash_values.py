"""The values a bash command's walk records and the vocabulary it is read in (the parts of
:mod:`app.adapters.bash_effects`, whose docstring states the rules).

* :class:`Read`, :class:`Write`, :class:`CommandEffects`: what one command read and wrote.
* Artifact paths (normalised as in :mod:`app.adapters.bash_effects`), arguments and option parsing.
* :class:`_Recorder`: the state of one walk (the command, its root, the texts known so far)
  and the bookkeeping every command handler records through (reads, writes, tree writes).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

#: The repository root of the recorded agents (mini-swe-agent's working directory).
ROOT: Final = "/testbed"


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


# --------------------------------------------------------------------------- walk state


_STDIN_PIPE: Final = ("pipe", None)


@dataclass
class _Ctx:
    stdin: tuple[str, str | None] = ("none", None)  # none | pipe | text | file | unknown
    hidden: bool = False  # stdout goes to a file: reads show nothing
    in_subst: bool = False  # inside $(...): output is not the observation


class _Recorder:
    """One walk's state and bookkeeping: the reads, writes and names it met (``events``), the
    texts written so far in this command (``local``) over those known before it (``known``)."""

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

    def _tree(self, directory: str | None, tool: str) -> None:
        if directory is None:
            raise _Unsupported(f"{tool}: unknown directory")
        artifact = self.art(directory, None)
        assert artifact is not None
        self.write_artifact(artifact, tool, tree=True)

    def repo_root(self, cwd: str | None) -> str | None:
        if cwd is None:
            return None
        if cwd == self.root or cwd.startswith(self.root.rstrip("/") + "/"):
            return self.root
        return cwd

    # ---- reader operands

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
