"""The module import graph of the service (``app``) and its offline tools (``ctxd_tools``):
no module is in an import cycle, the service loads none of the tools, and no two modules
share a file name across the split.

The graph is grimp's (import-linter builds its contracts on it): every import statement,
at module level, inside a function (a lazy import) or under ``TYPE_CHECKING``, so a cycle
closed by a lazy import counts too. A cycle is a strongly connected component of more than
one module (or a module importing itself).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

grimp = pytest.importorskip("grimp")  # import-linter's graph library (the test extra)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "ctxd_tools")


def import_graph(graph: Any) -> dict[str, set[str]]:
    """Every module of ``graph`` (a grimp ImportGraph) with the modules it imports."""
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def import_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and the modules that import
    themselves (Tarjan, iterative: the graph has a few hundred modules), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0

    def succ(v: str) -> list[str]:
        return sorted(edges.get(v, ()))

    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(succ(start)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ(w))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1 or v in edges.get(v, ()):
                        found.append(sorted(component))
    return sorted(found)


@pytest.fixture(scope="module")
def graph() -> Any:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_no_module_of_app_or_ctxd_tools_is_in_an_import_cycle(graph: Any) -> None:
    cycles = import_cycles(import_graph(graph))
    assert cycles == [], "import cycles (each a strongly connected component): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_detector_finds_a_cycle_added_to_the_real_graph(graph: Any) -> None:
    """The check above can fail: close a cycle through a lazy import (the service's bash
    effects importing the trajectory importer, which imports them) and it is found."""
    edges = import_graph(graph)
    assert "app.adapters.bash_effects" in edges["ctxd_tools.miniswe"]
    edges["app.adapters.bash_effects"].add("ctxd_tools.miniswe")
    assert any({"app.adapters.bash_effects", "ctxd_tools.miniswe"} <= set(c) for c in import_cycles(edges))
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"a"}, "b": set()}) == [["a"]]


def test_the_service_and_the_cli_load_no_tool_at_import() -> None:
    """``ctxd serve`` imports app.cli and app.main; the tools load only inside the commands
    that use them (``ctxd replay``, ``bench``, ``eval``)."""
    probe = ("import sys, app.cli, app.main; "
             "print(sorted(m for m in sys.modules if m == 'ctxd_tools' or m.startswith('ctxd_tools.')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split("\n")[-2] == "[]", done.stdout


#: Names the service uses once per layer for one concern (domain rule, service, route, store):
#: the only file names allowed twice. No tool module shares a name with any other module.
LAYERED_NAMES = {
    "ingest.py": {"app/domain", "app/store"},
    "preconditions.py": {"app/domain", "app/services"},
    "recall.py": {"app/domain", "app/services", "app/api/routes", "app/api/schemas"},
    "redaction.py": {"app/domain", "app/services"},
    "sessions.py": {"app/services", "app/api/schemas"},
    "tenancy.py": {"app/domain", "app/services", "app/api/routes", "app/store"},
}


def test_no_two_modules_share_a_file_name_apart_from_the_layered_concerns() -> None:
    paths = [p.relative_to(ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
             if p.name != "__init__.py" and "versions" not in p.parts]  # alembic revisions: numbered
    counts = Counter(p.name for p in paths)
    shared = {name: {p.parent.as_posix() for p in paths if p.name == name} for name, n in counts.items() if n > 1}
    assert {name: dirs for name, dirs in shared.items() if LAYERED_NAMES.get(name) != dirs} == {}
