"""The one start/ready/stop of the processes ctxd's tools and tests run (ctxd_tools/native_stack.py
``wait_ready``, ``stop``; used by ``ctxd bench --http``, ``ctxd_tools.native_stack.Ctxd``, the Prometheus
fixture and tests/in_thread.py): real processes, a real loopback HTTP server."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ctxd_tools.native_stack import NativeStackError, free_port, stop, wait_ready


@pytest.fixture()
def readyz() -> Iterator[tuple[str, list[int]]]:
    """A loopback server whose GET answers the statuses in the list, in order (then 200)."""
    statuses = [503, 503]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(statuses.pop(0) if statuses else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/readyz", statuses
    finally:
        server.shutdown()
        server.server_close()


def test_ready_after_503s_and_once_per_worker(readyz: tuple[str, list[int]]) -> None:
    url, statuses = readyz
    wait_ready(url, timeout=10)
    assert statuses == []
    statuses.extend([200, 503])
    wait_ready(url, timeout=10, times=3)  # 200, (503), 200, 200
    assert statuses == []


def test_not_ready_in_time_and_exited_early_name_the_server_and_its_log(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/readyz"  # nothing listens
    began = time.monotonic()
    with pytest.raises(NativeStackError, match=r"^prom was not ready in 0.5 s$"):
        wait_ready(url, timeout=0.5, what="prom")
    assert time.monotonic() - began < 5
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", "print('address in use'); raise SystemExit(1)"], stdout=out)
    began = time.monotonic()
    with pytest.raises(NativeStackError, match=r"^ctxd serve exited early: address in use"):
        wait_ready(url, timeout=60, alive=lambda: proc.poll() is None, what="ctxd serve", log=log)
    assert time.monotonic() - began < 10, "an exited process is not waited for until the timeout"


def test_stop_terminates_then_kills(tmp_path: Path) -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop(polite, 10) and polite.returncode == -signal.SIGTERM
    stubborn = subprocess.Popen([sys.executable, "-c", ("import signal, sys, time\n"
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True)\n"
                                 "time.sleep(60)")], stdout=subprocess.PIPE)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"up\n"
    assert not stop(stubborn, 0.5) and stubborn.returncode == -signal.SIGKILL
    assert stop(stubborn, 0.5), "an exited process is left as it is"


def test_stop_of_a_group_kills_the_children_left_behind(tmp_path: Path) -> None:
    """A supervisor that exits on SIGTERM but leaves a worker: the group's SIGKILL ends it."""
    pid_file = tmp_path / "child.pid"
    code = ("import os, signal, subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            f"signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert stop(proc, 10, group=True)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and _state(child) != "Z":
        assert time.monotonic() < deadline, "the worker left behind still runs"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
