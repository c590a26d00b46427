"""Python source outline via ``ast`` (seed 000 section 4.5.1, table 6, "source outline";
seed 004 part B section 3.4.3: a structured extraction whose schema is designed, so its
loss is known).

Keeps the first line of the module docstring and, for every class and function at module
level and inside classes (nested classes included, functions nested in functions folded),
its decorator and signature lines exactly as written and the first line of its docstring;
every other line (bodies, imports, module-level statements) is folded. Each kept line is
prefixed with its line number in ``cat -n`` form (``{number:>6}\\t``), so gaps in the
numbering show where bodies were folded; a first marker line names the handle and the raw
lines covered. When the input is already numbered (``cat -n``, ``nl -ba``: every non-blank
line starts with digits and a tab), its lines are kept as they are.

Table 6: an outline keeps "signatures, types, and docstrings, with bodies folded" and can
silently drop "the implementation a repair must read, such as the notification path";
the folded lines stay readable by handle.

Falls back cleanly: text that does not parse as Python (after stripping a common
indentation, for fragments printed by ``sed -n``), or that has no class or function,
is returned unchanged.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings
from typing import Final

from app.domain.compaction.lineage import Compacted, Span, body_of, coerce, finish, marker, span_of, where

__all__ = ["KIND", "NUMBERED_RE", "outline_python", "parse_python"]

KIND: Final = "outline"
NUMBERED_RE: Final = re.compile(r"^ *(\d+)\t")
_QUOTES_ONLY: Final = re.compile(r"""^\s*[rRbBuU]?(?:\"\"\"|''')\s*$""")


def parse_python(source: str) -> ast.Module | None:
    """``ast.parse`` of ``source``, else of its dedented form; None if neither parses."""
    for candidate in (source, textwrap.dedent(source)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes in old sources
                return ast.parse(candidate)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def _docstring_line(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def _kept_lines(tree: ast.Module, code: list[str]) -> tuple[set[int], int]:
    """0-based indexes of the lines an outline keeps, and the number of classes and defs."""
    keep: set[int] = set()
    count = 0

    def doc(node: ast.AST) -> None:
        expr = _docstring_line(node)
        if expr is not None:
            first = expr.lineno - 1
            keep.add(first)
            if _QUOTES_ONLY.match(code[first]) and first + 1 < len(code):
                keep.add(first + 1)

    def visit(body: list[ast.stmt]) -> None:
        nonlocal count
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            count += 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            start = node.body[0].lineno
            header_end = start - 1 if start > node.lineno else node.lineno
            keep.update(range(first - 1, header_end))
            doc(node)
            if isinstance(node, ast.ClassDef):
                visit(node.body)

    doc(tree)
    visit(tree.body)
    return keep, count


def outline_python(value: str | Compacted, *, first_line: int = 1) -> Compacted:
    """Outline of a Python source (module docstring): signatures kept, bodies folded.

    ``first_line`` is the file line number of the input's first line (e.g. 100 for the
    output of ``sed -n '100,200p' f.py``), so the printed numbers are file line numbers;
    the marker also names the raw lines of the payload. Returns the input unchanged when it
    does not parse, has no class or def, or the outline is not shorter (UTF-8 bytes).
    Deterministic; idempotent (an outline does not parse as Python).

    Stats: ``definitions`` (classes and functions outlined), ``lines_kept``,
    ``lines_folded``.
    """
    inp = coerce(value)
    lines = inp.lines
    bodies = [body_of(line) for line in lines]
    numbered = any(NUMBERED_RE.match(b) for b in bodies) and all(NUMBERED_RE.match(b) or not b.strip() for b in bodies)
    code = [NUMBERED_RE.sub("", b, count=1) for b in bodies] if numbered else bodies
    tree = parse_python("\n".join(code))
    if tree is None:
        return inp
    keep, definitions = _kept_lines(tree, code)
    if definitions == 0:
        return inp
    kept = sorted(k for k in keep if k < len(lines))
    out: list[str] = [marker(f"Python outline ({where(span_of(inp.origins), inp.source)}): class and def lines with "
                             f"the first docstring line, bodies folded; "
                             f"{'numbered as in the input' if numbered else 'each line starts with its line number'}")]
    origins: list[Span | None] = [None]
    for k in kept:
        text = lines[k] if numbered else f"{first_line + k:>6}\t{lines[k]}"
        out.append(text)
        origins.append(inp.origins[k])
    result = finish(inp, out, origins, kind=KIND, params={"first_line": first_line, "numbered": numbered},
                    stats={"definitions": definitions, "lines_kept": len(kept), "lines_folded": len(lines) - len(kept)})
    if result is not inp and result.lineage[-1].output_bytes >= result.lineage[-1].input_bytes:
        return inp
    return result
