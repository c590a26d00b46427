"""The licence gate of .ci/run (.ci/licenses.py, issue 13 item 7): no GPL/AGPL in the runtime
dependency closure; LGPL/MPL allowed (dynamically loaded, replaceable packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _gate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_licenses", ROOT / ".ci" / "licenses.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ci_licenses"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


gate = _gate()


@pytest.mark.parametrize(("text", "verdict"), [
    ("MIT", gate.PERMISSIVE),
    ("MIT License", gate.PERMISSIVE),
    ("BSD-3-Clause", gate.PERMISSIVE),
    ("Apache-2.0 AND BSD-2-Clause", gate.PERMISSIVE),
    ("Apache Software License; MIT License", gate.PERMISSIVE),
    ("GPL-3.0-only", gate.FORBIDDEN),
    ("GPL-2.0-or-later", gate.FORBIDDEN),
    ("AGPL-3.0-only", gate.FORBIDDEN),
    ("GNU General Public License v3 (GPLv3)", gate.FORBIDDEN),
    ("GNU Affero General Public License v3", gate.FORBIDDEN),
    ("MIT AND GPL-3.0-only", gate.FORBIDDEN),          # both apply: the strictest
    ("GPL-2.0-only OR MIT", gate.PERMISSIVE),          # an alternative is offered
    ("GNU General Public License (GPL); MIT License", gate.PERMISSIVE),
    ("LGPL-3.0-only", gate.WEAK),                      # psycopg
    ("GNU Lesser General Public License v3 (LGPLv3)", gate.WEAK),
    ("GNU Library or Lesser General Public License (LGPL)", gate.WEAK),
    ("MPL-2.0 AND (Apache-2.0 OR MIT)", gate.WEAK),    # orjson: AND binds tighter than OR
    ("(MPL-2.0 AND Apache-2.0) OR MIT", gate.PERMISSIVE),
    ("GPL-2.0-only WITH Classpath-exception-2.0", gate.FORBIDDEN),
    ("UNKNOWN", gate.UNKNOWN),
    ("", gate.UNKNOWN),
])
def test_classify(text: str, verdict: str) -> None:
    assert gate.classify(text) == verdict


def test_runtime_closure_is_the_dependencies_not_the_test_extra() -> None:
    closure = gate.runtime_closure("ctxd")
    assert "ctxd" not in closure
    for runtime in ("fastapi", "sqlalchemy", "psycopg", "psycopg-binary", "transformers", "uvloop"):
        assert runtime in closure, runtime  # uvloop: through uvicorn[standard]
    for test_only in ("pytest", "hypothesis", "locust", "schemathesis", "mypy", "ruff", "pip-audit"):
        assert test_only not in closure, test_only


def test_gate_passes_on_ctxd_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert gate.main([]) == 0
    out = capsys.readouterr().out
    assert "psycopg" in out and gate.WEAK in out
    assert " 0 forbidden" in out


def test_every_forbidden_package_is_named_not_only_the_first() -> None:
    table = [gate.Package(n, "1.0", lic, gate.classify(lic)) for n, lic in
             (("a", "MIT"), ("b", "GPL-3.0-only"), ("c", "LGPL-3.0-only"), ("d", "AGPL-3.0-or-later"))]
    lines, status = gate.report(table)
    assert status == 1
    assert lines[-2] == "4 runtime packages: 1 permissive, 1 weak copyleft (allowed), 0 unknown, 2 forbidden"
    assert lines[-1] == "GPL/AGPL in the runtime dependencies: b (GPL-3.0-only), d (AGPL-3.0-or-later)"
