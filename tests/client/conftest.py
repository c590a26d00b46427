"""The Python client (clients/python) against a real `ctxd serve`.

`.ci/run` and README's test command install the client (`pip install -e clients/python`);
when it is not installed (a venv made before it existed) its source directory is put on
the path, so these tests run either way."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
EXAMPLES = CLIENT / "examples"

if importlib.util.find_spec("ctxd_client") is None:
    sys.path.insert(0, str(CLIENT / "src"))
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


def example(name: str) -> ModuleType:
    """An example script of clients/python/examples, imported as a module."""
    spec = importlib.util.spec_from_file_location(f"ctxd_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ctxd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `ctxd serve` (subprocess) on a free loopback port, SQLite in a temp dir."""
    from ctxd_tools.bench_http import serve

    base = tmp_path_factory.mktemp("ctxd-client")
    with serve(data_dir=base / "data", log_path=base / "serve.log", ready_timeout=120) as url:
        yield url
