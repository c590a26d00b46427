"""PostgreSQL, Redis and ctxd started natively on loopback, for the load and fault tests
(issue 13 items 5 and 8) and ``loadtests/capacity.py``.

These machines have no Docker engine, so the production stack (PostgreSQL + Redis + ctxd
with N workers) is started from the Debian binaries, each in its own temporary directory
on a free loopback port, exactly as ``.ci/run`` starts its throwaway servers:

* :class:`Postgres`: ``initdb`` + ``pg_ctl start`` (as the ``postgres`` user when run as
  root: initdb refuses root), fsync off (throwaway data), a database ``ctxd``;
  :meth:`Postgres.stop` / :meth:`Postgres.start` restart it on the same port and data.
* :class:`Redis`: ``redis-server`` without persistence; :meth:`Redis.kill` is SIGKILL.
* :class:`Ctxd`: ``ctxd serve --workers N`` with ``CTXD_DATABASE_URL`` / ``CTXD_REDIS_URL``
  set; :meth:`Ctxd.stop` sends SIGTERM (graceful shutdown) and waits.

Every process the project starts and waits for (these, ``ctxd bench --http``'s server, the
tests' Prometheus and in-thread uvicorn) is made ready with :func:`wait_ready` (poll a URL
until it answers 200) and ended with :func:`stop` (a signal, a bounded wait, then SIGKILL).

Every class is a context manager that stops what it started (and removes its directory).
Standard library only at import (httpx is imported when a server is waited for).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["Ctxd", "NativeStackError", "Postgres", "Redis", "free_port", "have_postgres", "have_redis", "stop",
           "wait_ready"]


class NativeStackError(RuntimeError):
    """A native server could not be started or stopped (the message has its log's tail)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (chosen by the kernel)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, *, timeout: float, alive: Callable[[], bool] = lambda: True, times: int = 1,
               what: str = "the server", log: Path | None = None) -> None:
    """Poll ``GET url`` (every 0.2 s, 5 s per request) until it has answered 200 ``times``
    times (``times``: one per worker sharing a port); ``alive()`` says whether the server
    still runs (a process not yet exited, a thread still running).

    Raises NativeStackError "<what> exited early" once ``alive()`` is False, or "<what> was
    not ready in <timeout> s" after ``timeout`` seconds, with the tail of ``log``."""
    import httpx

    deadline = time.monotonic() + timeout
    ready = 0
    while ready < times:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                ready += 1
                continue
        except httpx.TransportError:
            pass
        if not alive() or time.monotonic() > deadline:
            state = "exited early" if not alive() else f"was not ready in {timeout:g} s"
            raise NativeStackError(f"{what} {state}" + (f": {_tail(log)}" if log is not None else ""))
        time.sleep(0.2)


def stop(proc: subprocess.Popen[Any], timeout: float, *, sig: int = signal.SIGTERM, group: bool = False) -> bool:
    """Send ``sig`` (SIGTERM: a graceful shutdown) to a running ``proc`` and wait up to
    ``timeout`` seconds; past it SIGKILL and wait. ``group``: the SIGKILL goes to the process
    group (``proc`` started with ``start_new_session=True``), and is sent after any stop, so
    workers left behind by a supervisor end too. Returns False when it had to be killed
    (True: it exited in time, or had already exited); ``proc.returncode`` is its status."""
    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
        except ProcessLookupError:
            pass

    in_time = True
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            in_time = False
            kill()
            proc.wait(timeout=10)
    if group:
        kill()
    return in_time


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) for x in Path(p).parent.name.split(".")
                                                                          if x.isdigit()])
    dirs = [Path(d) for d in found if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file()]
    if dirs:
        return dirs[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def have_postgres() -> bool:
    """Whether PostgreSQL's server binaries (initdb, pg_ctl) are installed."""
    return _pg_bin() is not None


def have_redis() -> bool:
    """Whether ``redis-server`` is installed."""
    return shutil.which("redis-server") is not None


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return ""


def _wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


class _Managed:
    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class Postgres(_Managed):
    """A throwaway PostgreSQL cluster: data in a temporary directory, listening on
    127.0.0.1:``port`` only (socket inside the directory), trust auth, database ``ctxd``.

    ``url``: the SQLAlchemy URL (``postgresql+psycopg://postgres@127.0.0.1:PORT/ctxd``).
    Raises NativeStackError when the binaries are missing or a step fails."""

    def __init__(self, *, port: int | None = None, max_connections: int = 200) -> None:
        bin_dir = _pg_bin()
        if bin_dir is None:
            raise NativeStackError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bin = bin_dir
        self.port = port or free_port()
        self.max_connections = max_connections
        self.dir: Path | None = None
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/ctxd"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, cwd=self.dir, check=False, capture_output=True, text=True, timeout=timeout)

    @property
    def log(self) -> Path:
        assert self.dir is not None
        return self.dir / "postgres.log"

    def start(self) -> None:
        """initdb on first use, then ``pg_ctl start`` (waits until it accepts connections)."""
        first = self.dir is None
        if first:
            self.dir = Path(tempfile.mkdtemp(prefix="ctxd-native-pg-"))
            (self.dir / "socket").mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres", "postgres")
                shutil.chown(self.dir / "socket", "postgres", "postgres")
            done = self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust",
                             "--encoding=UTF8", "--no-locale", "--no-sync")
            if done.returncode != 0:
                raise NativeStackError(f"initdb failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        assert self.dir is not None
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir / 'socket'} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off -c max_connections={self.max_connections}")
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.log), "-o", opts,
                         "-w", "-t", "60", "start")
        if done.returncode != 0:
            raise NativeStackError(f"PostgreSQL did not start: {done.stderr[-1000:]}\n{_tail(self.log)}")
        if first:
            done = self._run(str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d",
                             "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", "CREATE DATABASE ctxd")
            if done.returncode != 0:
                raise NativeStackError(f"CREATE DATABASE failed: {done.stderr[-1000:]}")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (fast: disconnects every client, aborts open transactions)."""
        if self.dir is None or not (self.dir / "data" / "postmaster.pid").exists():
            return
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", mode, "-w", "-t", "60", "stop")
        if done.returncode != 0:
            raise NativeStackError(f"PostgreSQL did not stop: {done.stderr[-1000:]}")

    def psql(self, sql: str) -> str:
        """Run ``sql`` in database ``ctxd``; its unaligned, tuples-only output."""
        done = self._run(str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "ctxd",
                         "-v", "ON_ERROR_STOP=1", "-At", "-c", sql)
        if done.returncode != 0:
            raise NativeStackError(f"psql failed: {done.stderr[-1000:]}")
        return done.stdout

    def close(self) -> None:
        try:
            self.stop("immediate")
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None


class Redis(_Managed):
    """A throwaway ``redis-server`` on 127.0.0.1:``port`` without persistence.
    ``url``: ``redis://127.0.0.1:PORT/0``. :meth:`kill` is SIGKILL (an outage),
    :meth:`start` brings it back on the same port."""

    def __init__(self, *, port: int | None = None) -> None:
        if not have_redis():
            raise NativeStackError("redis-server is not installed")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="ctxd-native-redis-"))
        log = self.dir / "redis.log"
        self.proc = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                      "--appendonly", "no", "--protected-mode", "yes", "--dir", str(self.dir),
                                      "--logfile", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not _wait_port(self.port, 20):
            self.kill()
            raise NativeStackError(f"redis-server did not listen on {self.port}: {_tail(log)}")

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-request, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def close(self) -> None:
        self.kill()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _serve_command(port: int, workers: int) -> list[str]:
    """``ctxd serve --workers N`` on loopback (issue 13 item 1)."""
    return [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers)]


class Ctxd(_Managed):
    """``ctxd serve`` with ``workers`` worker processes on a free loopback port, its data
    directory and log in a temporary directory; ``env`` adds settings (e.g.
    ``CTXD_DATABASE_URL``, ``CTXD_REDIS_URL``; with a database URL ``ctxd migrate`` runs
    first, as compose's one-shot migration job). ``base``: its URL. Started when ``/readyz``
    answers 200 (every worker shares the port; readiness is polled ``workers`` times).

    :meth:`stop` sends ``sig`` (SIGTERM: graceful shutdown) and waits up to ``timeout`` s."""

    def __init__(self, *, workers: int = 1, env: dict[str, str] | None = None, port: int | None = None,
                 ready_timeout: float = 180.0) -> None:
        self.workers = workers
        self.env = env or {}
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        assert self.dir is not None
        return self.dir / "serve.log"

    def start(self) -> None:

        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="ctxd-native-serve-"))
        env = os.environ | {"CTXD_DATA_DIR": str(self.dir / "data"), "CTXD_DATABASE_URL": "", "CTXD_REDIS_URL": "",
                            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CTXD_LOG_LEVEL": "warning",
                            "CTXD_HOST": "127.0.0.1"} | self.env
        with self.log.open("a", encoding="utf-8") as log:
            if env["CTXD_DATABASE_URL"]:  # the one-shot migration job, as compose runs it before the workers
                done = subprocess.run([sys.executable, "-m", "app.cli", "migrate"], env=env, check=False, stdout=log,
                                      stderr=subprocess.STDOUT, timeout=300)
                if done.returncode != 0:
                    raise NativeStackError(f"ctxd migrate failed: {_tail(self.log)}")
            self.proc = subprocess.Popen(_serve_command(self.port, self.workers), env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        proc = self.proc
        try:
            wait_ready(f"{self.base}/readyz", timeout=self.ready_timeout, alive=lambda: proc.poll() is None,
                       times=self.workers, what="ctxd serve", log=self.log)
        except NativeStackError:
            self.stop(signal.SIGKILL)
            raise

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the server (the supervisor when there are several workers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int | None:
        """Send ``sig`` and wait; kill the whole process group after ``timeout`` s. Returns the exit
        status (None if it was not running)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        stop(proc, timeout, sig=sig, group=True)
        return proc.returncode

    def close(self) -> None:
        self.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
