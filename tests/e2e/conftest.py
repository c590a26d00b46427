from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

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


def ctxd() -> list[str]:
    exe = shutil.which("ctxd", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "app.cli"]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    """`ctxd serve` on a free loopback port with its own data dir (``tmp_path / "data"``),
    its output in ``tmp_path / "serve.log"`` (ctxd_tools.bench_http.serve)."""
    from ctxd_tools.bench_http import serve

    with serve(data_dir=tmp_path / "data", log_path=tmp_path / "serve.log", ready_timeout=90) as base:
        yield base
