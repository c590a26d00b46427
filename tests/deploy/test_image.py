"""The service image (issue 13 item 4), without a Docker engine.

Fast: the Dockerfile is parsed: two stages, the runtime one copies only the builder's venv,
runs as a non-root user, checks /readyz, and the builder installs the hashed lock then ctxd
as a wheel (no editable install). Slow: the builder's RUN steps are replayed in a temporary
directory (the paths of the image mapped to it), then the installed package, away from the
source tree, runs ``ctxd migrate``, ``ctxd serve`` and the image's HEALTHCHECK command; the
eval extra is absent and ``ctxd eval`` says how to install it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ctxd_tools.native_stack import free_port
from tests.deploy.conftest import REPO
from tests.traces import TRACES_DIR

DOCKERFILE = REPO / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    stage: str
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions in order with the name of their stage (``FROM ... AS name``); comment
    lines dropped, backslash continuations joined (the parser directive is a comment)."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    out: list[Instruction] = []
    stage = ""
    for logical in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        if not logical.strip():
            continue
        keyword, _, args = logical.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            found = re.search(r"\sAS\s+(\S+)", args, re.IGNORECASE)
            stage = found.group(1) if found else args
        out.append(Instruction(stage, keyword, " ".join(args.split())))
    return out


def _stage(instructions: list[Instruction], name: str, keyword: str) -> list[str]:
    return [i.args for i in instructions if i.stage == name and i.keyword == keyword]


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_two_stages_and_the_runtime_copies_only_the_builders_venv(dockerfile: list[Instruction]) -> None:
    assert [i.stage for i in dockerfile if i.keyword == "FROM"] == ["builder", "runtime"]
    assert _stage(dockerfile, "runtime", "COPY") == ["--from=builder /opt/ctxd /opt/ctxd"]
    assert _stage(dockerfile, "runtime", "RUN") and all("pip" not in r for r in _stage(dockerfile, "runtime", "RUN"))


def test_runtime_runs_as_a_non_root_user_and_checks_readiness(dockerfile: list[Instruction]) -> None:
    users = _stage(dockerfile, "runtime", "USER")
    assert users and users[-1].split(":")[0] not in ("root", "0")
    [health] = _stage(dockerfile, "runtime", "HEALTHCHECK")
    assert "/readyz" in health and "CMD" in health
    [cmd] = _stage(dockerfile, "runtime", "CMD")
    assert cmd.startswith('["ctxd", "serve"')


def test_builder_installs_the_hashed_lock_and_a_wheel_not_an_editable(dockerfile: list[Instruction]) -> None:
    runs = " && ".join(_stage(dockerfile, "builder", "RUN"))
    assert "pip install --require-hashes --no-deps -r requirements.lock -r requirements-build.lock" in runs
    # the build tools come from the hashed build lock, not from an isolated, unpinned download
    assert "pip wheel --no-deps --no-build-isolation" in runs
    assert re.search(r"pip install --no-deps --no-index \S+\.whl", runs)
    assert " -e " not in runs and "--editable" not in runs
    copies = [a.split()[:-1] for a in _stage(dockerfile, "builder", "COPY")]
    copied = [source for sources in copies for source in sources]
    assert copies.index(["requirements.lock", "requirements-build.lock"]) < next(
        i for i, c in enumerate(copies) if "app" in c)  # own layer
    assert all((REPO / source).exists() for source in copied), copied
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert not set(copied) & ignored


@pytest.mark.slow
def test_the_builder_steps_install_a_service_that_migrates_serves_and_is_healthy(
        dockerfile: list[Instruction], tmp_path: Path) -> None:
    src, venv, wheels, run = tmp_path / "src", tmp_path / "opt-ctxd", tmp_path / "wheels", tmp_path / "run"
    for d in (src, run):
        d.mkdir()
    for args in _stage(dockerfile, "builder", "COPY"):
        *sources, _dest = args.split()
        for source in sources:
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, src / source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(REPO / source, src / source)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python").symlink_to(sys.executable)  # the image's `python` (3.11)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env |= {"PATH": f"{venv}/bin:{shim}:{env.get('PATH', '')}", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for step in _stage(dockerfile, "builder", "RUN"):
        command = step.replace("/opt/ctxd", str(venv)).replace("/wheels", str(wheels))
        done = subprocess.run(["sh", "-c", command], check=False, cwd=src, env=env, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, f"RUN {step}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    python = str(venv / "bin" / "python")

    # the package is the installed wheel, not the source tree; no eval extra
    probe = "import app, importlib.util as u; print(app.__file__); print(u.find_spec('matplotlib') is None)"
    where = subprocess.run([python, "-c", probe], cwd=run, env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    assert where[0].startswith(str(venv / "lib")) and where[1] == "True"
    env |= {"CTXD_DATA_DIR": str(tmp_path / "data")}
    ctxd = str(venv / "bin" / "ctxd")
    migrated = subprocess.run([ctxd, "migrate"], check=False, cwd=run, env=env, capture_output=True, text=True,
                              timeout=300)
    assert migrated.returncode == 0 and "head" in migrated.stdout, migrated.stdout + migrated.stderr
    evaluated = subprocess.run([ctxd, "eval", str(TRACES_DIR / "pvlib__pvlib-python-1072__reasoner.traj.json"),
                                "--out", str(tmp_path / "eval")], check=False, cwd=run, env=env,
                               capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 1 and "pip install 'ctxd[eval]'" in " ".join(evaluated.stderr.split())

    port = free_port()
    [health] = _stage(dockerfile, "runtime", "HEALTHCHECK")
    healthcheck = shlex.split(health.split("CMD", 1)[1].strip().strip("[]").replace('", "', '" "'))
    healthcheck = [python] + [part.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for part in healthcheck[1:]]
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([ctxd, "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=run, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while subprocess.run(healthcheck, check=False, env=env, capture_output=True, timeout=30).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.5)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        created = httpx.post(f"http://127.0.0.1:{port}/v1/sessions", json={"contract": {"goal": "g"}}, timeout=30)
        assert created.status_code == 201, created.text
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    assert (tmp_path / "data").is_dir()
