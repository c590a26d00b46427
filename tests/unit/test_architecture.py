"""DESIGN.md section 4: ``app.domain`` imports nothing of the app (import-linter contract in
pyproject.toml) and nothing outside the standard library."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contract() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    done = subprocess.run([exe], cwd=ROOT, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_domain_uses_only_the_standard_library() -> None:
    stdlib = set(sys.stdlib_module_names)
    for path in (ROOT / "app" / "domain").rglob("*.py"):  # subpackages too (app/domain/compaction)
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            for name in names:
                top = name.split(".")[0]
                assert top in stdlib or top == "app" and name.startswith("app.domain"), f"{path.name} imports {name}"
