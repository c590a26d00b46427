"""Simulated agents in threads, recording every request (the fault tests' load, issue 13 item 5).

Locust (``loadtests/locustfile.py``) measures throughput; the fault tests need more than
statistics: which requests failed and how, when each was sent, and every event id the
server acknowledged. :class:`Agents` replays real mini-swe-agent trajectories as
``ctxd replay`` does (``ctxd_tools.miniswe.replay_plan``), each agent a thread with its
own httpx clients, and keeps one :class:`Outcome` per HTTP request.

* Routing over several servers (``bases``): ``pinned`` (a session always goes to the
  server of its agent: session affinity) or ``random`` (each request to a random server).
* A 503 is retried after its ``Retry-After`` (capped at ``max_retry_wait`` s): a POST is
  resent with the same event ids (idempotent), as a well-behaved client does. A 2xx POST
  adds its ``(session id, event id, seq)`` to ``acknowledged``.
* A transport error (connection refused or reset) is recorded and the agent waits a
  little and starts a new session, unless ``stop_on_transport_error``.

Standard library and httpx only; no gevent (locust's monkey-patching stays out of the
test process).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Agents", "Outcome", "percentile"]

ROUTES = {"session": "/v1/sessions", "events": "/v1/sessions/[id]/events", "request": "/v1/sessions/[id]/request"}


@dataclass
class Outcome:
    """One HTTP request: ``route`` (a key of ROUTES), ``status`` (0: transport error),
    ``error`` (the exception's name and text, or the problem's title), ``start`` / ``end``
    (``time.monotonic()`` seconds), ``base`` (the server), ``retry_after`` (the header, s)."""

    route: str
    status: int
    start: float
    end: float
    base: str
    error: str = ""
    retry_after: str | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by nearest rank; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


@dataclass
class _Plan:
    name: str
    create: dict[str, Any]
    steps: tuple[Any, ...]


@dataclass
class Agents:
    """``agents`` threads replaying ``traces`` against ``bases`` (see the module docstring).

    ``max_calls``: GETs per session before a new one (0: the whole trace). ``keep_alive``:
    False sends ``Connection: close`` (a new connection per request, so a multi-worker
    server spreads one session's requests over its workers). ``session_ids``: every
    session created; ``acknowledged``: every event acknowledged with a 2xx; ``bodies``: every
    GET's JSON when ``keep_bodies``; ``in_flight``: requests sent and not yet answered."""

    bases: Sequence[str]
    traces: Sequence[Path]
    agents: int = 2
    routing: str = "pinned"
    profile: str = "qwen3"
    fmt: str = "openai"
    max_calls: int = 0
    keep_alive: bool = True
    timeout: float = 120.0
    max_retry_wait: float = 1.0
    stop_on_transport_error: bool = False
    seed: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    acknowledged: set[tuple[str, str, int]] = field(default_factory=set)
    session_ids: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    keep_bodies: bool = False
    in_flight: int = 0

    def __post_init__(self) -> None:
        from ctxd_tools.miniswe import load_trajectory, replay_plan, session_create_body

        if self.routing not in ("pinned", "random"):
            raise ValueError(f"routing must be 'pinned' or 'random', got {self.routing!r}")
        self._plans = []
        for path in self.traces:
            traj = load_trajectory(path)
            self._plans.append(_Plan(traj.instance_id, session_create_body(traj, profile=self.profile),
                                     replay_plan(traj)))
        if not self._plans:
            raise ValueError("no traces")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._next = itertools.count()

    # -- running -------------------------------------------------------------------------
    def start(self) -> Agents:
        for i in range(self.agents):
            t = threading.Thread(target=self._agent, args=(i,), name=f"agent-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def stop(self, timeout: float = 300.0) -> None:
        """Ask every agent to stop after its current request, and wait for them."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def run(self, seconds: float) -> Agents:
        """Start, let them run ``seconds``, stop."""
        self.start()
        self._stop.wait(seconds)
        self.stop()
        return self

    def replay_once(self) -> Agents:
        """One agent, one pass over every trace, in this thread (no time bound)."""
        self._stop.clear()
        self._agent(0, once=True)
        return self

    # -- one agent -----------------------------------------------------------------------
    def _agent(self, index: int, *, once: bool = False) -> None:
        import httpx

        rng = random.Random(self.seed * 1000 + index)
        headers = {} if self.keep_alive else {"Connection": "close"}
        clients = {base: httpx.Client(base_url=base, timeout=self.timeout, headers=headers) for base in self.bases}
        try:
            for n in itertools.count():
                if self._stop.is_set() or (once and n >= len(self._plans)):
                    return
                plan = self._plans[n if once else next(self._next) % len(self._plans)]
                home = self.bases[(index + n) % len(self.bases)]
                result = self._replay(plan, clients, home, rng)
                if result == "transport" and self.stop_on_transport_error:
                    return
                if result != "ok":
                    self._stop.wait(0.2)
        finally:
            for c in clients.values():
                c.close()

    def _pick(self, clients: dict[str, Any], home: str, rng: random.Random) -> tuple[str, Any]:
        base = home if self.routing == "pinned" else rng.choice(list(self.bases))
        return base, clients[base]

    def _send(self, route: str, clients: dict[str, Any], home: str, rng: random.Random, method: str, path: str,
              **kwargs: Any) -> Any:
        """Send, retrying 503s after Retry-After; returns the final response, or None after a
        transport error. Every attempt is an Outcome."""
        import httpx

        while True:
            base, client = self._pick(clients, home, rng)
            with self._lock:
                self.in_flight += 1
            start = time.monotonic()
            try:
                resp = client.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                self._record(Outcome(route, 0, start, time.monotonic(), base, f"{type(exc).__name__}: {exc}"))
                return None
            finally:
                with self._lock:
                    self.in_flight -= 1
            outcome = Outcome(route, resp.status_code, start, time.monotonic(), base,
                              retry_after=resp.headers.get("retry-after"))
            if resp.status_code >= 400:
                outcome.error = resp.text[:300]
            self._record(outcome)
            if resp.status_code == 503 and not self._stop.is_set():
                try:
                    wait = float(resp.headers.get("retry-after") or 1)
                except ValueError:
                    wait = 1.0
                self._stop.wait(min(wait, self.max_retry_wait))
                continue
            return resp

    def _record(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)

    def _replay(self, plan: _Plan, clients: dict[str, Any], home: str, rng: random.Random) -> str:
        """Replay ``plan`` into a new session: "ok", "failed" (an error status) or "transport"."""
        from ctxd_tools.miniswe import ModelCall, PostEvents

        resp = self._send("session", clients, home, rng, "POST", "/v1/sessions", json=plan.create)
        if resp is None or resp.status_code != 201:
            return "transport" if resp is None else "failed"
        sid = resp.json()["id"]
        with self._lock:
            self.session_ids.append(sid)
        calls = 0
        for step in plan.steps:
            if self._stop.is_set():
                return "ok"
            if isinstance(step, PostEvents):
                resp = self._send("events", clients, home, rng, "POST", f"/v1/sessions/{sid}/events",
                                  json={"events": list(step.events)})
                if resp is None or resp.status_code not in (200, 201):
                    return "transport" if resp is None else "failed"
                acked = {(sid, r["event_id"], int(r["seq"])) for r in resp.json()["results"]}
                with self._lock:
                    self.acknowledged |= acked
            elif isinstance(step, ModelCall):
                if self.max_calls and calls >= self.max_calls:
                    return "ok"
                resp = self._send("request", clients, home, rng, "GET", f"/v1/sessions/{sid}/request",
                                  params={"format": self.fmt})
                if resp is None or resp.status_code != 200:
                    return "transport" if resp is None else "failed"
                if self.keep_bodies:
                    with self._lock:
                        self.bodies.append(resp.json())
                calls += 1
        return "ok"

    # -- figures -------------------------------------------------------------------------
    def summary(self) -> dict[str, dict[str, float]]:
        """Per route (and ``all``): requests, failures (status 0 or >= 500 but 503s
        answered with Retry-After, which a client retries), 503s, requests/s over the run,
        p50 and p95 in ms (successful requests)."""
        with self._lock:
            outcomes = list(self.outcomes)
        if not outcomes:
            return {}
        span = max(o.end for o in outcomes) - min(o.start for o in outcomes) or 1.0
        out: dict[str, dict[str, float]] = {}
        for route in (*ROUTES, "all"):
            rows = [o for o in outcomes if route in ("all", o.route)]
            ok = [o.seconds * 1e3 for o in rows if 200 <= o.status < 300]
            out[route] = {"requests": len(rows), "failures": sum(1 for o in rows if is_failure(o)),
                          "503": sum(1 for o in rows if o.status == 503), "rps": len(rows) / span,
                          "ok_rps": len(ok) / span, "p50_ms": percentile(ok, 0.5), "p95_ms": percentile(ok, 0.95)}
        return out


def is_failure(o: Outcome) -> bool:
    """A failed request: a transport error, a 5xx other than a 503 with Retry-After, or a
    4xx (the replayed traces are valid)."""
    if o.status == 0:
        return True
    if o.status == 503:
        return o.retry_after is None
    return o.status >= 400


#: Locust's statistics rows of the scenario (loadtests/locustfile.py), then the total.
LOCUST_ROUTES = (*ROUTES.values(), "Aggregated")


def run_locust(host: str, *, users: int, seconds: int, csv_prefix: Path, traces: Sequence[Path] = (),
               max_calls: int = 0, extra: Sequence[str] = (), timeout: float | None = None
               ) -> tuple[dict[str, dict[str, str]], list[dict[str, str]], str]:
    """Run ``loadtests/locustfile.py`` headless against ``host`` (a subprocess: locust's gevent
    monkey-patching stays out of this process) with ``users`` simulated agents spawned at once,
    for ``seconds``. Returns (Locust's ``_stats.csv`` rows by name, the ``_failures.csv`` rows,
    its output). Raises RuntimeError when locust exits non-zero for another reason than
    failed requests (exit status 1)."""
    import csv
    import subprocess
    import sys

    locustfile = Path(__file__).resolve().parents[1] / "loadtests" / "locustfile.py"
    cmd = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", str(users), "-r", str(users),
           "-t", f"{seconds}s", "--stop-timeout", "30", "--host", host, "--only-summary", "--csv", str(csv_prefix),
           "--ctxd-max-calls", str(max_calls), *extra]
    if traces:
        cmd += ["--ctxd-traces", ",".join(str(p) for p in traces)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout or seconds + 300)
    output = done.stdout + done.stderr
    if done.returncode not in (0, 1):
        raise RuntimeError(f"locust exited {done.returncode}:\n{output[-4000:]}")
    with open(f"{csv_prefix}_stats.csv", newline="", encoding="utf-8") as f:
        stats = {row["Name"]: row for row in csv.DictReader(f)}
    failures_csv = Path(f"{csv_prefix}_failures.csv")
    failed: list[dict[str, str]] = []
    if failures_csv.exists():
        with failures_csv.open(newline="", encoding="utf-8") as f:
            failed = list(csv.DictReader(f))
    return stats, failed, output


def locust_table(stats: dict[str, dict[str, str]]) -> list[str]:
    """One line per route of Locust's statistics: requests, requests/s, p50, p95, max, failures."""
    lines = [f"{'route':<28} {'requests':>8} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'failures':>8}"]
    for name in LOCUST_ROUTES:
        row = stats.get(name)
        if row is None:
            continue
        lines.append(f"{name:<28} {row['Request Count']:>8} {float(row['Requests/s']):>7.1f} {row['50%']:>7} "
                     f"{row['95%']:>7} {float(row['Max Response Time']):>7.0f} {row['Failure Count']:>8}")
    return lines
