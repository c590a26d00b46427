"""New-user friction (issue 8 item 7): ``ctxd --version``, ``serve --help`` lists the CTXD_
settings (generated from app/settings.py; the README table equals it), a bad CTXD_ value is
a usage error, one trace lookup for replay / bench / eval, the start-up log line names the
data directory's absolute path and the database URL without password, ``ctxd-eval/`` is
ignored by git."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli import EXACTNESS_PACKAGES, build_parser, main
from app.main import create_app
from app.settings import Settings, settings_help
from ctxd_tools.eval.replay import discover_traces
from ctxd_tools.traces import TracesNotFound, resolve_trace
from tests.traces import TRACES_DIR

REPO = Path(__file__).resolve().parents[2]
SMALL = "pvlib__pvlib-python-1072__reasoner.traj.json"


def _ctxd(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ctxd", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "app.cli"]
    return subprocess.run([*cmd, *args], check=False, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


# --------------------------------------------------------------------------- --version


def test_version_names_ctxd_and_the_pinned_tokenizer_packages() -> None:
    """Before: ``ctxd --version`` was a usage error (exit 2). After: exit 0 and one line."""
    done = _ctxd("--version")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith(f"ctxd {version('ctxd')} (")
    for name in EXACTNESS_PACKAGES:
        assert f"{name} {version(name)}" in line
    assert f"Python {sys.version_info.major}.{sys.version_info.minor}." in line


# --------------------------------------------------------------------------- settings


def _serve_help() -> str:
    return build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]


def test_serve_help_lists_every_setting_with_its_description() -> None:
    """Before: ``serve --help`` named no CTXD_ variable. After: every Settings field, its
    default and its description, generated from the fields (one source)."""
    text = " ".join(_serve_help().split())  # help text is wrapped
    assert len(settings_help()) == len(Settings.model_fields) >= 10
    for env, default, description in settings_help():
        assert description, f"{env} has no description in app/settings.py"
        expected = f"{env} (default: {default})" if default else env
        assert expected in text and " ".join(description.split()) in text, env
    assert "CTXD_DATA_DIR (default: ./.data)" in text and "CTXD_DEFAULT_PROFILE (default: qwen3)" in text


def test_serve_help_is_generated_from_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new field shows up without editing the CLI."""
    import app.settings as settings_module

    rows = settings_help() + [("CTXD_SOMETHING_NEW", "7", "a field added later")]
    monkeypatch.setattr(settings_module, "settings_help", lambda: rows)
    assert "CTXD_SOMETHING_NEW (default: 7)" in _serve_help() and "a field added later" in _serve_help()


def test_readme_configuration_table_equals_the_settings() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `CTXD_")]
    table = [(env.strip("`"), default.strip("`"), meaning) for env, default, meaning in rows]
    assert table == settings_help()


@pytest.mark.parametrize("env, value", [("CTXD_LOG_LEVEL", "loud"), ("CTXD_LOCAL_CACHE_BYTES", "lots"),
                                        ("CTXD_REDIS_TIMEOUT_SECONDS", "-1")])
def test_serve_with_a_bad_setting_is_a_usage_error(env: str, value: str, tmp_path: Path) -> None:
    """Before: "lots" was a pydantic traceback from inside uvicorn's factory call (exit 1);
    "loud" and -1 were accepted and the server ran. After: exit 2 and one message naming
    the setting; nothing binds."""
    import os

    done = _ctxd("serve", "--port", "1", env=os.environ | {env: value, "CTXD_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "invalid CTXD_ setting" in done.stderr and f"{env}={value!r}:" in done.stderr, "named by its variable"
    assert "Traceback" not in done.stderr


def test_log_level_is_case_insensitive() -> None:
    assert Settings(log_level="WARNING").log_level == "warning"


# --------------------------------------------------------------------------- trace lookup


needs_traces = pytest.mark.skipif(not (TRACES_DIR / SMALL).is_file(), reason=f"shared traces not found in {TRACES_DIR}")


@needs_traces
@pytest.mark.parametrize("name", [SMALL, SMALL.removesuffix(".traj.json"), f"some/where/else/{SMALL}"])
def test_one_lookup_finds_a_bare_name_from_any_directory(name: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_trace(name).resolve() == (TRACES_DIR / SMALL).resolve()
    # eval uses the same lookup as replay and bench
    assert [p.resolve() for p in discover_traces([name])] == [(TRACES_DIR / SMALL).resolve()]


@needs_traces
def test_eval_without_paths_takes_every_shared_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert [p.name for p in discover_traces([])] == sorted(p.name for p in TRACES_DIR.glob("*.traj.json"))
    assert discover_traces([str(TRACES_DIR), SMALL]) == discover_traces([])  # duplicates removed


@needs_traces
def test_unknown_trace_names_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TracesNotFound, match=re.escape(str(TRACES_DIR))) as info:
        discover_traces(["no-such-trace"])
    assert "no-such-trace.traj.json" in str(info.value)
    assert main(["eval", "no-such-trace", "--quiet", "--out", str(tmp_path / "out")]) == 2


@needs_traces
def test_ctxd_eval_accepts_a_bare_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``ctxd eval pvlib__pvlib-python-1072__reasoner.traj.json`` from any directory but
    the traces' was "error: no such file or folder" (exit 2). After: the shared trace is
    evaluated (16 model calls)."""
    monkeypatch.chdir(tmp_path)
    code = main(["eval", SMALL.removesuffix(".traj.json"), "--policies", "append", "--workers", "1", "--no-plots",
                 "--quiet", "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    assert "16 model calls x 1 policies over 1 traces" in " ".join(capsys.readouterr().err.split())
    assert (tmp_path / "out" / "report.md").is_file()


# --------------------------------------------------------------------------- start-up log


def test_startup_log_names_the_absolute_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Before: "ctxd ready: database sqlite:///..., profiles [...]" (no data directory, and not
    printed at all by ``ctxd serve``). After: the data directory's absolute path comes first."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.INFO, logger="ctxd")
    with TestClient(create_app(Settings(data_dir=Path("relative-data")))):
        pass
    ready = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ctxd starting")]
    absolute = tmp_path.resolve() / "relative-data"
    assert ready == [(f"ctxd starting: data directory {absolute}, database sqlite:///{absolute / 'ctxd.sqlite3'}, "
                     "profiles ['mistral-tekken', 'qwen3', 'qwen3-128k', 'qwen3-nothink']")]


def test_startup_log_hides_the_database_password(postgres_url: str, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_url)
    if url.password is None:  # the dev and CI servers trust loopback: any password is accepted
        url = url.set(password="s3cret-pw")
    caplog.set_level(logging.INFO, logger="ctxd")
    with TestClient(create_app(Settings(data_dir=tmp_path, database_url=url.render_as_string(hide_password=False)))):
        pass
    ready = " ".join(r.getMessage() for r in caplog.records if r.getMessage().startswith("ctxd starting"))
    assert url.password and url.password not in ready and ":***@" in ready and str(tmp_path.resolve()) in ready


# --------------------------------------------------------------------------- git


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_eval_output_is_ignored_by_git() -> None:
    paths = ["ctxd-eval/report.md", "ctxd-eval/results.json"]
    done = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, check=False, capture_output=True, text=True)
    assert done.stdout.split() == paths, f"ctxd-eval/ (ctxd eval's default --out) is not in .gitignore: {done}"


def test_eval_interactive_needs_no_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``ctxd eval --interactive`` draws no plots, so it runs on the service install (no
    ``eval`` extra). Before: it stopped with "ctxd eval's plots need matplotlib" (a fresh-user
    trial, following the README)."""
    import importlib.util

    interactive = TRACES_DIR.parent / "interactive"
    sessions = sorted(interactive.glob("*.json"))
    if not sessions:
        pytest.skip(f"no interactive sessions in {interactive}")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "matplotlib" else real(name, *a, **k))
    smallest = min(sessions, key=lambda p: p.stat().st_size)
    assert main(["eval", "--interactive", "--quiet", "--out", str(tmp_path), str(smallest)]) == 0
    assert "instruction retention" in (tmp_path / "interactive.md").read_text()
