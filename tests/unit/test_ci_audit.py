"""The pip-audit report of .ci/run (.ci/audit.py, issue 13 item 7): reported, never failing;
an unreachable vulnerability service is said as such, not as "no vulnerabilities"."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _audit() -> ModuleType:
    sys.path.insert(0, str(ROOT / ".ci"))  # audit.py imports its sibling licenses.py
    try:
        spec = importlib.util.spec_from_file_location("ci_audit", ROOT / ".ci" / "audit.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / ".ci"))


audit = _audit()


def test_findings_are_listed_with_their_fixes() -> None:
    report = {"dependencies": [
        {"name": "jinja2", "version": "3.1.2", "vulns": [
            {"id": "GHSA-h5c8-rqwp-cp95", "aliases": ["CVE-2024-22195"], "fix_versions": ["3.1.3"]}]},
        {"name": "httpx", "version": "0.28.1", "vulns": []},
        {"name": "ctxd-private", "skip_reason": "Dependency not found on PyPI"},
    ], "fixes": []}
    lines = audit.summarize(report, 3)
    assert lines[0] == "VULNERABLE jinja2 3.1.2: GHSA-h5c8-rqwp-cp95 (CVE-2024-22195); fixed in 3.1.3"
    assert lines[1] == "2 of 3 runtime packages audited, 1 skipped, 1 known vulnerabilities in 1 packages"
    assert lines[2] == "skipped ctxd-private: Dependency not found on PyPI"


def test_every_package_skipped_means_the_service_is_unreachable() -> None:
    report = {"dependencies": [{"name": n, "skip_reason": f"Dependency not found on PyPI and could not be "
                                                          f"audited: {n} (1.0)"} for n in ("a", "b")]}
    (line,) = audit.summarize(report, 2)
    assert line.startswith("vulnerability service unreachable: 0 of 2 packages audited (")
    assert "no known vulnerabilities" not in line.lower()
