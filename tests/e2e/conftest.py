from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


@pytest.fixture(scope="session")
def sqlite_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("ctxd-e2e"))
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="session")
def postgres_client(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("ctxd-e2e-pg"), database_url=postgres_url)
    with TestClient(create_app(settings)) as client:
        yield client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ctxd() -> list[str]:
    exe = shutil.which("ctxd", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "app.cli"]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    """`ctxd serve` on a free loopback port with its own data dir. Its output goes to a file:
    a load test logs one access line per request, more than a pipe holds unread."""
    port = free_port()
    env = os.environ | {"CTXD_DATA_DIR": str(tmp_path / "data"), "CTXD_DATABASE_URL": "", "CTXD_REDIS_URL": "",
                        "HF_HUB_OFFLINE": "1"}
    log_path = tmp_path / "serve.log"
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen([*ctxd(), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None:
                    pytest.fail(f"ctxd serve exited early: {log_path.read_text(encoding='utf-8')[-4000:]}")
                time.sleep(0.3)
            else:
                pytest.fail("ctxd serve did not become ready in 90 s")
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                pytest.fail("ctxd serve did not stop within 30 s of SIGTERM")
