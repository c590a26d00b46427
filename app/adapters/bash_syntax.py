"""Bash command text -> a small syntax tree, parsed with tree-sitter-bash.

:mod:`app.adapters.bash_effects` infers what a command read and wrote from this
tree. The parser is tree-sitter with the tree-sitter-bash grammar (both MIT,
pinned to exact versions in ``pyproject.toml``: the inference depends on the
grammar). A command is *parsed* when its tree holds no ERROR and no MISSING node;
otherwise :func:`parse` raises :class:`BashSyntaxError`.

The tree-sitter tree is normalised into the shell's own structure:

* :class:`Sequence` -- commands run one after the other (``;``, ``&&``, ``||``,
  newlines; the operators are not kept: effects are inferred for every branch).
* :class:`Pipeline` -- stages joined by ``|`` / ``|&``.
* :class:`Group` -- ``( ... )`` (``subshell``), ``{ ...; }`` and the bodies of
  ``if`` / ``while`` / ``until`` / ``for`` / ``case`` (every branch, in text
  order), with the redirections of the whole construct.
* :class:`Command` -- a simple command: its words, its redirections, and the
  command and process substitutions found in its words, assignments and
  redirection targets (:attr:`Command.substitutions`).

Grammar shapes fixed here (tree-sitter-bash 0.25.1):

* Redirections written after a list or pipeline (``a && b > f``) hang on the
  whole list in the grammar; bash gives them to the last command, and so does
  this tree.
* ``echo > f g`` gives ``g`` as a second redirection destination; it is an
  argument of the command.
* Whatever follows a here-document's delimiter on its line (``cat <<EOF | python -
  && echo ok``) is nested inside the here-document node; it is moved back: the
  pipeline continues the command, ``&&`` / ``||`` continue the list.
* The body of a here-document is the source text between the line after the
  operator and the delimiter line (leading tabs removed for ``<<-``; under an
  unquoted delimiter ``\\<newline>`` joins lines): the grammar's body node
  leaves out leading blank lines.
* ``cat 0< f`` reads as an argument ``0`` and ``< f``; it is descriptor 0.
* A lone ``-`` right before a redirection (``python - <<'EOF'``, ``lint - 2>&1``)
  is dropped without an ERROR node; it is given back. Any other source text no
  node covers is a :class:`BashSyntaxError`: nothing is lost silently.

Two known grammar gaps are worked around by rewriting the text and parsing
again, only when the first parse fails, and keeping the result only when the
rewrite parses cleanly; both rewrites leave the inferred effects unchanged:

* empty backtick substitutions (two backticks, as in ``python3 -c "...``x``..."``
  quoting reStructuredText: bash reads an empty command substitution there, the
  grammar an ERROR) are removed -- they expand to nothing; 2 of the recorded
  commands need it;
* on a here-document's first line, redirections followed by ``|`` are moved
  before the ``<<`` operator and ``;`` becomes ``&&`` (tree-sitter-bash issue
  #346: ``python - <<'EOF' 2>&1 | tail``, ``cat <<'EOF' > f; python f``).
  Redirections of other descriptors than 0 commute with the here-document,
  and the inference walks every item of a list whatever its operator.

Left as parse errors (bash accepts them): ``<>`` (the grammar has no such
operator), two here-documents opened on one line (``cat <<A <<B``, ``cat <<'A' &&
cat <<'B'``), a here-document opened inside ``( ... )`` or ``if ... fi`` on one
line, nesting deeper than Python's stack.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Final

import tree_sitter
import tree_sitter_bash

__all__ = [
    "BashSyntaxError",
    "Command",
    "Group",
    "Node",
    "Pipeline",
    "Redirect",
    "Sequence",
    "Word",
    "parse",
]


class BashSyntaxError(ValueError):
    """The command does not parse: ``message`` names the first ERROR or MISSING
    node and its line and column (1-based)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Word:
    """A shell word. ``text`` is the word after quote removal, with expansions
    kept as written (``"$HOME/x"`` -> ``$HOME/x``); ``literal`` is True when the
    program receives exactly ``text``: no parameter, command, process or
    arithmetic expansion, no leading ``~``, no unquoted glob or brace pattern.
    ``raw`` is the source text."""

    text: str
    literal: bool
    raw: str


@dataclass(frozen=True)
class Redirect:
    """One redirection. ``op`` is ``<``, ``>``, ``>>``, ``>|``, ``&>``, ``&>>``,
    ``>&``, ``<&``, ``<<``, ``<<-`` or ``<<<``; ``fd`` the explicit descriptor
    (``2>``) or None; ``target`` the file :class:`Word` (or the here-string), a
    descriptor number for ``>&N`` / ``<&N``, or None (``>&-``, here-documents);
    ``body`` the here-document text; ``literal``: the command reads exactly ``body``
    (False for a here-document under an unquoted delimiter whose text holds ``$`` or a
    backtick: bash expands them, and ``body`` keeps them as written)."""

    op: str
    fd: int | None = None
    target: Word | int | None = None
    body: str | None = None
    literal: bool = True


@dataclass
class Command:
    """A simple command: ``words`` (name first; empty for a bare assignment),
    ``redirects`` in text order, and ``substitutions``: the bodies of the
    ``$(...)``, backtick and ``<(...)`` / ``>(...)`` substitutions in its words,
    assignments and redirection targets, in text order."""

    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    substitutions: list[Node] = field(default_factory=list)


@dataclass
class Pipeline:
    """``a | b | c``: each stage reads the previous one's output."""

    stages: list[Node]


@dataclass
class Sequence:
    """Commands run in order (lists, the statements of a script)."""

    items: list[Node]


@dataclass
class Group:
    """A compound command: ``subshell`` for ``( ... )`` (a change of directory
    inside does not outlive it), else ``{ ...; }`` or a control structure.
    ``items`` run in order; ``redirects`` apply to the whole group;
    ``substitutions`` are those of its own words (``for x in $(ls)``)."""

    items: list[Node]
    subshell: bool = False
    redirects: list[Redirect] = field(default_factory=list)
    substitutions: list[Node] = field(default_factory=list)


Node = Command | Pipeline | Sequence | Group

_LANGUAGE: Final = tree_sitter.Language(tree_sitter_bash.language())
_LOCAL = threading.local()

_EXPANSIONS: Final = frozenset({
    "simple_expansion", "expansion", "command_substitution", "process_substitution",
    "arithmetic_expansion",
})
_SUBSTITUTIONS: Final = frozenset({"command_substitution", "process_substitution"})
_CONTROL: Final = frozenset({
    "if_statement", "elif_clause", "else_clause", "while_statement", "for_statement",
    "c_style_for_statement", "case_statement", "case_item", "do_group", "compound_statement",
})
_SKIPPED: Final = frozenset({"comment", "function_definition", "heredoc_body", "heredoc_end"})
_STATEMENTS: Final = frozenset({
    "command", "pipeline", "list", "subshell", "redirected_statement", "negated_command",
    "variable_assignment", "variable_assignments", "declaration_command", "unset_command",
    "test_command",
}) | _CONTROL


def _parser() -> tree_sitter.Parser:
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        parser = _LOCAL.parser = tree_sitter.Parser(_LANGUAGE)
    return parser


# --------------------------------------------------------------------------- parse


def parse(command: str) -> Sequence:
    """The syntax tree of ``command`` (a script: its statements in order).

    Raises :class:`BashSyntaxError` when the tree-sitter-bash tree has an ERROR
    or MISSING node, also after the workaround rewrites (module docstring).
    """
    root = _parser().parse(command.encode("utf-8")).root_node
    if root.has_error:
        rewritten = _rewrite(command)
        retry = _parser().parse(rewritten.encode("utf-8")).root_node if rewritten is not None else None
        if rewritten is None or retry is None or retry.has_error:
            raise BashSyntaxError(_first_error(root))
        command, root = rewritten, retry
    converter = _Converter(command)
    try:
        script = converter.script(root)
    except RecursionError:
        raise BashSyntaxError("nested too deeply") from None
    dropped = _dropped_text(root, converter.src, converter.recovered)
    if dropped is not None:
        raise BashSyntaxError(dropped)
    return script


_LEAVES: Final = frozenset({"heredoc_body", "heredoc_content", "string_content", "raw_string", "comment", "word"})


def _dropped_text(root: tree_sitter.Node, src: bytes, recovered: list[tuple[int, int]]) -> str | None:
    """A message naming source text that no node of the tree covers (the grammar
    dropped it without an ERROR node) and that the converter did not give back;
    None when there is none. Whitespace and ``\\<newline>`` are not text."""
    covered = bytearray(len(src))
    for start, stop in recovered:
        covered[start:stop] = b"\x01" * (stop - start)
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type in _LEAVES:
            covered[node.start_byte : node.end_byte] = b"\x01" * (node.end_byte - node.start_byte)
        else:
            stack.extend(node.children)
    i = 0
    while i < len(src):
        if covered[i] or src[i] in b" \t\r\n":
            i += 1
        elif src[i : i + 2] == b"\\\n":
            i += 2
        else:
            line = src.count(b"\n", 0, i) + 1
            word = src[i:].split(None, 1)[0].decode("utf-8", "replace")[:40]
            return f"text dropped by the grammar at line {line}: {word!r}"
    return None


def _first_error(root: tree_sitter.Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing:
            line, col = node.start_point
            return f"missing {node.type!r} at line {line + 1}, column {col + 1}"
        if node.type == "ERROR":
            line, col = node.start_point
            text = (node.text or b"").decode("utf-8", "replace").split("\n", 1)[0][:40]
            return f"syntax error at line {line + 1}, column {col + 1} near {text!r}"
        if node.has_error:
            stack.extend(reversed(node.children))
    return "syntax error"


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _has_expansion(node: tree_sitter.Node) -> bool:
    if node.type in _EXPANSIONS:
        return True
    return any(_has_expansion(c) for c in node.children)


_GLOB_CHARS: Final = "*?["


def _is_glob(raw: str) -> bool:
    """Unquoted ``* ? [`` or brace expansion (``{a,b}``, ``{1..3}``) in a raw word."""
    quote = ""
    escaped = False
    brace = 0
    for i, c in enumerate(raw):
        if escaped:
            escaped = False
            continue
        if c == "\\" and quote != "'":
            escaped = True
            continue
        if quote:
            if c == quote:
                quote = ""
            continue
        if c in "'\"":
            quote = c
        elif c in _GLOB_CHARS:
            return True
        elif c == "{":
            brace += 1
        elif c == "}" and brace and ("," in raw[:i] or ".." in raw[:i]):
            return True
    return False


_PLAIN: Final = re.compile(r"[^\s'\"`$\\<>|&;()]+")

_ANSI_C: Final = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
                  "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _unquote(raw: str) -> str:
    """Quote removal on a word's source text: ``'...'`` verbatim, ``"..."`` with
    ``\\`` escaping only ``$ ` " \\`` and newline, ``$'...'`` with C escapes, a
    backslash elsewhere escaping the next character (``\\<newline>`` joins lines).
    Expansions are left as written."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            if i + 1 < n and raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
        elif c == "'":
            j = raw.find("'", i + 1)
            j = n if j < 0 else j
            out.append(raw[i + 1 : j])
            i = j + 1
        elif c == "$" and raw.startswith("$'", i):
            i += 2
            while i < n and raw[i] != "'":
                if raw[i] == "\\" and i + 1 < n:
                    out.append(_ANSI_C.get(raw[i + 1], "\\" + raw[i + 1]))
                    i += 2
                else:
                    out.append(raw[i])
                    i += 1
            i += 1
        elif c == '"' or (c == "$" and raw.startswith('$"', i)):
            i += 1 if c == '"' else 2
            while i < n and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < n and raw[i + 1] in '$`"\\\n':
                    if raw[i + 1] != "\n":
                        out.append(raw[i + 1])
                    i += 2
                else:
                    out.append(raw[i])
                    i += 1
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _line_start(src: bytes, pos: int) -> int:
    return src.rfind(b"\n", 0, pos) + 1


class _Converter:
    """tree-sitter-bash nodes -> :data:`Node` (grammar shapes: module docstring)."""

    def __init__(self, source: str) -> None:
        self.src = source.encode("utf-8")
        self.after_heredoc = 0  # where the last here-document's delimiter line ends
        self.recovered: list[tuple[int, int]] = []  # byte ranges of words given back

    def script(self, root: tree_sitter.Node) -> Sequence:
        return Sequence(self.statements(root.named_children))

    def statements(self, nodes: list[tree_sitter.Node]) -> list[Node]:
        out: list[Node] = []
        for n in nodes:
            if n.type in _SKIPPED:
                continue
            node = self.statement(n)
            if isinstance(node, Sequence):
                out.extend(node.items)
            else:
                out.append(node)
        return out

    def statement(self, n: tree_sitter.Node) -> Node:
        t = n.type
        if t == "command":
            return self.command(n)
        if t == "list":  # left-nested: a && b && c is list(list(a, b), c); flattened without recursion
            items: list[tree_sitter.Node] = []
            stack = [n]
            while stack:
                x = stack.pop()
                if x.type == "list":
                    stack.extend(reversed(x.named_children))
                else:
                    items.append(x)
            return Sequence(self.statements(items))
        if t == "pipeline":
            return Pipeline(self.stages(n.named_children))
        if t == "redirected_statement":
            return self.redirected(n)
        if t == "negated_command":
            inner = self.statements(n.named_children)
            return inner[0] if len(inner) == 1 else Sequence(inner)
        if t == "subshell":
            return Group(self.statements(n.named_children), subshell=True)
        if t in _CONTROL:
            return self.control(n)
        # assignments, declarations, tests...: no command runs, but substitutions do
        return Command(substitutions=self.substitutions(n))

    def stages(self, nodes: list[tree_sitter.Node]) -> list[Node]:
        out: list[Node] = []
        for n in nodes:
            if n.type in _SKIPPED:
                continue
            node = self.statement(n)
            out.extend(node.stages if isinstance(node, Pipeline) else [node])
        return out

    def control(self, n: tree_sitter.Node) -> Group:
        items: list[Node] = []
        substitutions: list[Node] = []
        for i, c in enumerate(n.children):
            if not c.is_named or c.type in _SKIPPED:
                continue
            name = n.field_name_for_child(i)
            if c.type in _STATEMENTS:
                node = self.statement(c)
                items.extend(node.items if isinstance(node, Sequence) else [node])
            elif name in ("value", "initializer", "condition", "update") or c.type in _EXPANSIONS:
                substitutions.extend(self.substitutions(c))
        return Group(items, substitutions=substitutions)

    # ---- words

    def word(self, n: tree_sitter.Node) -> Word:
        raw = _text(n)
        literal = not (_has_expansion(n) or raw.startswith("~") or _is_glob(raw))
        return Word(_unquote(raw), literal, raw)

    def substitutions(self, n: tree_sitter.Node) -> list[Node]:
        """Bodies of the command/process substitutions under ``n`` (not nested ones:
        those belong to the substitution's own commands)."""
        if n.type in _SUBSTITUTIONS:
            return [Sequence(self.statements(n.named_children))]
        out: list[Node] = []
        for c in n.children:
            out.extend(self.substitutions(c))
        return out

    # ---- commands and redirections

    def command(self, n: tree_sitter.Node) -> Command:
        cmd = Command()
        for c in n.named_children:
            if c.type == "variable_assignment":
                cmd.substitutions.extend(self.substitutions(c))
            elif c.type in ("file_redirect", "herestring_redirect"):
                self.redirect(c, cmd)
            elif c.type == "command_name":
                word = c.named_children[0] if c.named_child_count == 1 else c
                cmd.words.append(self.word(word))
                cmd.substitutions.extend(self.substitutions(c))
            elif c.type not in _SKIPPED:
                cmd.words.append(self.word(c))
                cmd.substitutions.extend(self.substitutions(c))
        return cmd

    def redirect(self, n: tree_sitter.Node, owner: Command | Group) -> None:
        """Append the redirection ``n`` to ``owner`` (a file or here-string
        redirection; destinations after the first are the command's arguments)."""
        fd: int | None = None
        op = ""
        targets: list[tree_sitter.Node] = []
        for c in n.children:
            if c.type == "file_descriptor":
                fd = int(_text(c))
            elif not c.is_named:
                op = c.type
            elif c.type not in _SKIPPED:
                targets.append(c)
        for t in targets:
            owner.substitutions.extend(self.substitutions(t))
        if fd is None and isinstance(owner, Command) and owner.words and owner.words[-1].raw.isdigit():
            # the grammar reads `cat 0< f` as an argument 0 and `< f`; bash, as `0<`
            raw = owner.words[-1].raw.encode()
            start = n.start_byte - len(raw)
            if start > 0 and self.src[start : n.start_byte] == raw and self.src[start - 1 : start] in b" \t":
                fd = int(owner.words.pop().raw)
        target: Word | int | None = None
        if op == ">&-" or op == "<&-":
            op = op[:-1]
        elif targets:
            word = self.word(targets[0])
            target = int(word.text) if op in (">&", "<&") and word.literal and word.text.isdigit() else word
        owner.redirects.append(Redirect(op, fd, target))
        if isinstance(owner, Command):
            owner.words.extend(self.word(t) for t in targets[1:])

    def redirected(self, n: tree_sitter.Node) -> Node:
        body = n.child_by_field_name("body")
        node: Node = self.statement(body) if body is not None else Command()
        previous = body.end_byte if body is not None else n.start_byte
        for c in n.named_children:
            if c == body:
                continue
            owner = _last_command(node)
            self.recover(previous, c.start_byte, owner)
            previous = c.end_byte
            if c.type == "heredoc_redirect":
                node = self.heredoc(c, node, owner)
            elif c.type in ("file_redirect", "herestring_redirect"):
                self.redirect(c, owner)
        return node

    def recover(self, start: int, stop: int, owner: Command | Group) -> None:
        """Words the grammar drops without an ERROR node: a lone ``-`` right before
        a redirection (``python - <<'EOF'``, ``sqlfluff lint - 2>&1``: 27 of the
        recorded commands). Plain words between a command and its redirection are
        given back to the command; :func:`parse` rejects any other dropped text."""
        gap = self.src[start:stop].decode("utf-8", "surrogateescape").replace("\\\n", " ")
        if not gap.strip() or not isinstance(owner, Command):
            return
        words = gap.split()
        if all(_PLAIN.fullmatch(w) for w in words):
            owner.words.extend(Word(w, not _is_glob(w), w) for w in words)
            self.recovered.append((start, stop))

    def heredoc(self, n: tree_sitter.Node, node: Node, owner: Command | Group) -> Node:
        """Attach a here-document to ``owner`` (the last command of ``node``) and
        move the rest of its first line (nested in the grammar) back after it."""
        op = "<<"
        fd: int | None = None
        quoted = False
        anchor = n.start_byte  # end of the operator's line: the body starts on the next one
        end_node = None
        position = len(owner.redirects)  # redirections nested after it come after it
        stages: list[Node] = []
        after: list[Node] = []
        for i, c in enumerate(n.children):
            t = c.type
            if t not in ("heredoc_body", "heredoc_end"):
                anchor = max(anchor, c.end_byte)
            if t in ("<<", "<<-"):
                op = t
            elif t == "file_descriptor":
                fd = int(_text(c))
            elif t == "heredoc_start":
                quoted = any(q in _text(c) for q in "'\"\\")
            elif t == "heredoc_body":
                continue
            elif t == "heredoc_end":
                end_node = c
            elif t in ("file_redirect", "herestring_redirect"):
                self.redirect(c, owner)
            elif t == "pipeline":  # `| a | b && c`: a, b join the pipeline; c follows it
                parts = self.stages(c.named_children)
                if parts and isinstance(seq := parts[-1], Sequence) and seq.items:
                    parts.pop()
                    first = seq.items[0]
                    parts.extend(first.stages if isinstance(first, Pipeline) else [first])
                    after.extend(seq.items[1:])
                stages.extend(parts)
            elif c.is_named and n.field_name_for_child(i) == "right":
                right = self.statement(c)
                after.extend(right.items if isinstance(right, Sequence) else [right])
            elif c.is_named and t in _STATEMENTS:
                after.append(self.statement(c))
        body, literal = self.heredoc_body(anchor, end_node, op, quoted)
        owner.redirects.insert(position, Redirect(op, fd, None, body, literal))
        if stages:
            node = _extend_pipeline(node, stages)
        if after:
            node = Sequence([*(node.items if isinstance(node, Sequence) else [node]), *after])
        return node

    def heredoc_body(self, anchor: int, end: tree_sitter.Node | None, op: str, quoted: bool) -> tuple[str, bool]:
        """The here-document's text: the lines after the one holding byte ``anchor``
        (or after the previous here-document on that line) up to the delimiter
        line. Verbatim under a quoted delimiter (``<<'EOF'``); else ``\\<newline>``
        joins lines and ``\\`` escapes ``$ ` \\`` (bash), while expansions stay as
        written. (The grammar's ``heredoc_body`` node leaves out leading blank
        lines, so it is not used.) With it, whether the text is literal: quoted, or no
        unescaped ``$`` or backtick (bash would expand them)."""
        if end is None:
            return "", True
        newline = self.src.find(b"\n", anchor)
        start = max(newline + 1, self.after_heredoc) if newline >= 0 else len(self.src)
        stop = _line_start(self.src, end.start_byte)
        eol = self.src.find(b"\n", end.end_byte)
        self.after_heredoc = len(self.src) if eol < 0 else eol + 1
        if stop <= start:
            return "", True
        text = self.src[start:stop].decode("utf-8", "surrogateescape")
        if op == "<<-":
            text = "".join(line.lstrip("\t") for line in text.splitlines(keepends=True))
        if quoted:
            return text, True
        literal = _UNESCAPED_EXPANSION.search(text) is None
        return re.sub(r"\\(\n|[$`\\])", lambda m: "" if m.group(1) == "\n" else m.group(1), text), literal


#: ``$`` or a backtick preceded by an even number of backslashes: an expansion in an unquoted here-document
_UNESCAPED_EXPANSION: Final = re.compile(r"(?<!\\)(?:\\\\)*[$`]")


def _last_command(node: Node) -> Command | Group:
    """The command a redirection written after ``node`` belongs to: the last
    command of a list, the last stage of a pipeline."""
    while isinstance(node, (Sequence, Pipeline)):
        parts = node.items if isinstance(node, Sequence) else node.stages
        if not parts:
            empty = Command()
            parts.append(empty)
            return empty
        node = parts[-1]
    return node


def _extend_pipeline(node: Node, stages: list[Node]) -> Node:
    """``node`` with its last pipeline (or command) continued by ``stages``."""
    if isinstance(node, Sequence) and node.items:
        node.items[-1] = _extend_pipeline(node.items[-1], stages)
        return node
    if isinstance(node, Pipeline):
        node.stages.extend(stages)
        return node
    return Pipeline([node, *stages])


# --------------------------------------------------------------------------- rewrites


_REDIRECT_OPS: Final = ("&>>", "&>", ">>", ">&", ">|", ">")


def _rewrite(command: str) -> str | None:
    """``command`` with the two grammar-gap rewrites of the module docstring
    applied, or None when neither applies. A small scanner: quotes, escapes,
    comments, and here-document bodies (skipped, except that empty backticks in
    an unquoted body are removed too, as bash would expand them to nothing)."""
    out: list[str] = []
    i, n = 0, len(command)
    changed = False
    pending: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, quoted
    quote = ""
    while i < n:
        c = command[i]
        if quote == "'":
            out.append(c)
            quote = "" if c == "'" else quote
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            out.append(command[i : i + 2])
            i += 2
            continue
        if c == "`":
            if command.startswith("``", i):
                changed = True
                i += 2
                continue
            j = i + 1
            while j < n and command[j] != "`":
                j += 2 if command[j] == "\\" else 1
            out.append(command[i : j + 1])
            i = j + 1
            continue
        if quote == '"':
            out.append(c)
            quote = "" if c == '"' else quote
            i += 1
            continue
        if c in "'\"":
            quote = c
            out.append(c)
            i += 1
            continue
        if c == "#" and (i == 0 or command[i - 1] in " \t\n;&|("):
            j = command.find("\n", i)
            j = n if j < 0 else j
            out.append(command[i:j])
            i = j
            continue
        if command.startswith("<<<", i):
            out.append("<<<")
            i += 3
            continue
        if command.startswith("<<", i):
            heredoc = _heredoc_operator(command, i)
            if heredoc is None:
                out.append("<<")
                i += 2
                continue
            end, delimiter, strip, quoted = heredoc
            pending.append((delimiter, strip, quoted))
            line_end = command.find("\n", end)
            line_end = n if line_end < 0 else line_end
            operator = command[i:end]
            rest, moved = _rewrite_first_line(command[end:line_end])
            if rest is None:
                out.append(operator)
                i = end
                continue
            changed = changed or rest != command[end:line_end] or bool(moved)
            out.append(moved + operator + rest)
            i = line_end
            continue
        if c == "\n" and pending:
            out.append(c)
            i += 1
            for delimiter, strip, quoted in pending:
                while i < n:
                    j = command.find("\n", i)
                    j = n if j < 0 else j
                    line = command[i:j]
                    if not quoted and "``" in line:
                        line = line.replace("``", "")
                        changed = True
                    out.append(line + command[j : j + 1])
                    i = j + 1
                    if (line.lstrip("\t") if strip else line) == delimiter:
                        break
            pending = []
            continue
        out.append(c)
        i += 1
    return "".join(out) if changed else None


def _heredoc_operator(command: str, i: int) -> tuple[int, str, bool, bool] | None:
    """At ``<<`` in ``command[i:]``: (end of the delimiter word, delimiter after
    quote removal, ``<<-``, quoted delimiter), or None."""
    j = i + 2
    strip = command.startswith("-", j)
    j += strip
    while j < len(command) and command[j] in " \t":
        j += 1
    k = j
    while k < len(command) and command[k] not in " \t\n;&|<>()":
        if command[k] in "'\"":
            close = command.find(command[k], k + 1)
            if close < 0:
                return None
            k = close + 1
        else:
            k += 1
    word = command[j:k]
    if not word:
        return None
    return k, _unquote(word), strip, any(q in word for q in "'\"\\")


def _rewrite_first_line(rest: str) -> tuple[str | None, str]:
    """The text after a here-document's delimiter on its line, rewritten (module
    docstring), and the redirections moved before the operator. (None, "") when
    the line has a quote this scanner does not follow."""
    moved: list[str] = []
    i = 0
    # leading redirections of descriptors other than 0, when a pipe follows them
    while True:
        j = i
        while j < len(rest) and rest[j] in " \t":
            j += 1
        k = j
        while k < len(rest) and rest[k].isdigit():
            k += 1
        if k < len(rest) and rest[j:k] != "0":
            op = next((o for o in _REDIRECT_OPS if rest.startswith(o, k)), None)
            if op is not None:
                m = k + len(op)
                while m < len(rest) and rest[m] in " \t":
                    m += 1
                e = m
                while e < len(rest) and rest[e] not in " \t;&|<>()'\"`$":
                    e += 1
                if e > m:
                    moved.append(rest[j:e])
                    i = e
                    continue
        break
    tail = rest[i:]
    if moved and not tail.lstrip(" \t").startswith("|"):
        moved, tail = [], rest
    out: list[str] = []
    quote = ""
    for k, c in enumerate(tail):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == ";" and not tail.startswith(";;", k) and not (k and tail[k - 1] == ";"):
            c = " &&"
        elif c == "#" and (k == 0 or tail[k - 1] in " \t"):
            out.append(tail[k:])
            break
        out.append(c)
    if quote:
        return None, ""
    return "".join(out), "".join(m.strip() + " " for m in moved)
