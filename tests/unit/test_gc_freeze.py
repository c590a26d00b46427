"""``ctxd serve``'s worker freezes its start-up objects out of the collected generations
once the tokenizer is loaded (app/main.py ``served_app``: no later full collection scans
~190k start-up objects, which took ~120-280 ms in the middle of a request); an app built
by ``create_app`` for another host (tests, an embedding application) freezes nothing.

Peers' threads: gen2 collections over the start-up heap stalling a Python server for
100-400 ms (sgl-project/sglang#9241 and #30693, LMCache/LMCache#4245)."""

from __future__ import annotations

import gc
import inspect
from pathlib import Path

from fastapi.testclient import TestClient

from app import cli
from app.main import create_app
from app.settings import Settings


def test_the_served_app_freezes_its_start_up_objects_before_it_is_ready(tmp_path: Path) -> None:
    gc.unfreeze()
    try:
        with TestClient(create_app(Settings(data_dir=tmp_path / "embedded"))) as client:
            client.app.state.ctxd.tokenizer_ready.wait(120)
            assert client.get("/readyz").status_code == 200
            assert gc.get_freeze_count() == 0, "an embedded app freezes nothing"
        with TestClient(create_app(Settings(data_dir=tmp_path / "served"), freeze_gc=True)) as client:
            client.app.state.ctxd.tokenizer_ready.wait(120)
            assert client.get("/readyz").status_code == 200
            assert gc.get_freeze_count() > 50_000
            frozen = gc.get_freeze_count()
            assert client.get("/healthz").status_code == 200
            assert gc.get_freeze_count() == frozen, "frozen once, at start-up"
    finally:
        gc.unfreeze()


def test_ctxd_serve_runs_the_served_app() -> None:
    assert '"app.main:served_app"' in inspect.getsource(cli._cmd_serve)
