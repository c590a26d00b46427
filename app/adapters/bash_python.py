"""The files a Python script writes, read from its source with :mod:`ast`
(:func:`python_writes`; rules in :mod:`app.adapters.bash_effects`, "Writes")."""

from __future__ import annotations

import ast as pyast
import posixpath
from collections import Counter
from typing import Final

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
