"""Lint hygiene (issue 13 item 7): the pinned ruff with pyproject's config finds nothing in the
code .ci/run lints. (mypy strict, import-linter, the licence gate and pip-audit are .ci/run
phases; lint-imports also runs in tests/unit/test_architecture.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing() -> None:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run([exe, "check", "--no-cache", "--output-format", "concise",
                           "app", "tests", "loadtests", ".ci"],
                          cwd=ROOT, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
