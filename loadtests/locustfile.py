"""Locust scenario: simulated agents replaying real mini-swe-agent trajectories against ctxd.

Each simulated user picks a trace, creates a session (``POST /v1/sessions``), posts the
trace's events in order (``POST /v1/sessions/{id}/events``) and, wherever the recorded
agent called its model, fetches the assembled request (``GET /v1/sessions/{id}/request``)
-- the same plan as ``ctxd replay`` (:func:`ctxd_tools.miniswe.replay_plan`), driven by
Locust's HttpUser client. When a trace is done (or ``--ctxd-max-calls`` is reached) the
user starts over with another trace and a new session.

Requests are named by route, so the statistics group as ``/v1/sessions``,
``/v1/sessions/[id]/events`` and ``/v1/sessions/[id]/request``. A response counts as a
failure when its status is unexpected, its body is not the expected JSON, or (GET) the
manifest's token total exceeds the budget's input limit (eq. 1).

Options (command line or environment):

``--ctxd-traces`` / ``CTXD_LOAD_TRACES``
    Comma-separated trace files, directories or glob patterns (default: every
    ``*.traj.json`` in ``../shared/traces/miniswe`` next to the repository, else
    ``/work/shared/traces/miniswe``).
``--ctxd-profile`` / ``CTXD_LOAD_PROFILE``
    Model profile of the sessions (default ``qwen3``).
``--ctxd-format`` / ``CTXD_LOAD_FORMAT``
    Wire format of the GETs (default ``openai``).
``--ctxd-max-calls`` / ``CTXD_LOAD_MAX_CALLS``
    Stop a replay after this many model calls and start a new session (0 = whole trace).
``--ctxd-think`` / ``CTXD_LOAD_THINK``
    Seconds a user waits after each GET, standing in for the model's latency (default 0).

Run: ``locust -f loadtests/locustfile.py --headless -u 4 -r 2 -t 60s --host http://127.0.0.1:8000``
(see loadtests/README.md).
"""

from __future__ import annotations

import glob
import itertools
import os
import threading
from pathlib import Path
from typing import Any

import gevent
from locust import HttpUser, constant, events, task
from locust.exception import StopUser

from ctxd_tools.miniswe import ModelCall, PostEvents, Step, load_trajectory, replay_plan, session_create_body
from ctxd_tools.traces import resolve_trace, traces_dir

ROUTE_SESSIONS = "/v1/sessions"
ROUTE_EVENTS = "/v1/sessions/[id]/events"
ROUTE_REQUEST = "/v1/sessions/[id]/request"


def trace_files(spec: str) -> list[Path]:
    """Trace files named by ``spec`` (comma-separated files, directories, glob patterns; a file
    name alone is looked up as ``ctxd replay`` does, :func:`ctxd_tools.traces.resolve_trace`)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()] or [str(traces_dir())]
    found: list[Path] = []
    for part in parts:
        path = Path(part).expanduser()
        if path.is_dir():
            found.extend(sorted(path.glob("*.traj.json")))
        elif any(ch in part for ch in "*?["):
            found.extend(Path(p) for p in sorted(glob.glob(part)))
        else:
            found.append(resolve_trace(part))  # a path, or a file name in the shared traces
    return found


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]  # locust's EventHook is unannotated
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--ctxd-traces", type=str, env_var="CTXD_LOAD_TRACES", default="",
                        help="comma-separated trace files, directories or globs (default: the shared traces)")
    parser.add_argument("--ctxd-profile", type=str, env_var="CTXD_LOAD_PROFILE", default="qwen3",
                        help="model profile of the replayed sessions")
    parser.add_argument("--ctxd-format", type=str, env_var="CTXD_LOAD_FORMAT", default="openai",
                        help="wire format of the GETs: openai, anthropic or tokens")
    parser.add_argument("--ctxd-max-calls", type=int, env_var="CTXD_LOAD_MAX_CALLS", default=0,
                        help="model calls per replayed session before starting a new one (0 = whole trace)")
    parser.add_argument("--ctxd-think", type=float, env_var="CTXD_LOAD_THINK", default=0.0,
                        help="seconds to wait after each GET (stands in for the model call)")
    parser.add_argument("--ctxd-api-key", type=str, env_var="CTXD_API_KEY", default="",
                        help="API key sent as 'Authorization: Bearer' (ctxd keys create --tenant NAME; needed when "
                             "the server requires keys: CTXD_AUTH); a file path is read")


class _Plans:
    """Parsed trajectories, loaded once per process and shared by the users."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: list[tuple[str, dict[str, Any], tuple[Step, ...]]] | None = None
        self._next = itertools.count()

    def load(self, spec: str, profile: str) -> None:
        with self._lock:
            if self._loaded is not None:
                return
            files = trace_files(spec)
            if not files:
                raise RuntimeError(f"no trajectories found for --ctxd-traces {spec!r}")
            loaded = []
            for path in files:
                traj = load_trajectory(path)
                loaded.append((traj.instance_id, session_create_body(traj, profile=profile), replay_plan(traj)))
            self._loaded = loaded

    def pick(self) -> tuple[str, dict[str, Any], tuple[Step, ...]]:
        """Round robin over the traces, so concurrent users replay different ones."""
        assert self._loaded is not None
        return self._loaded[next(self._next) % len(self._loaded)]


PLANS = _Plans()


class AgentReplayUser(HttpUser):
    """One simulated agent: replays trajectories back to back, a new session for each."""

    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.profile = getattr(opts, "ctxd_profile", "qwen3") if opts else "qwen3"
        self.fmt = getattr(opts, "ctxd_format", "openai") if opts else "openai"
        self.max_calls = int(getattr(opts, "ctxd_max_calls", 0) or 0) if opts else 0
        self.think = float(getattr(opts, "ctxd_think", 0.0) or 0.0) if opts else 0.0
        key = (getattr(opts, "ctxd_api_key", "") or "") if opts else ""
        if key and os.path.isfile(key):  # compose provisions the key into a file
            with open(key, encoding="utf-8") as f:
                key = f.read().strip()
        if key:
            self.client.headers["Authorization"] = f"Bearer {key}"
        try:
            PLANS.load(getattr(opts, "ctxd_traces", "") if opts else "", self.profile)
        except Exception as exc:  # a bad trace path: report once per user and stop it
            events.request.fire(  # type: ignore[no-untyped-call]  # locust's EventHook is unannotated
                request_type="SETUP", name="load traces", response_time=0, response_length=0, exception=exc,
                context={})
            raise StopUser() from exc

    @task
    def replay_trace(self) -> None:
        instance_id, create_body, plan = PLANS.pick()
        with self.client.post("/v1/sessions", json=create_body, name=ROUTE_SESSIONS, catch_response=True) as resp:
            if resp.status_code != 201:
                resp.failure(f"{instance_id}: create session -> {resp.status_code}: {resp.text[:300]}")
                return
            session_id = resp.json().get("id")
            if not isinstance(session_id, str) or not session_id:
                resp.failure(f"{instance_id}: no session id in {resp.text[:200]}")
                return
        calls = 0
        for step in plan:
            if isinstance(step, PostEvents):
                if not self._post_events(instance_id, session_id, step):
                    return
            elif isinstance(step, ModelCall):
                if self.max_calls and calls >= self.max_calls:
                    return
                if not self._get_request(instance_id, session_id, step):
                    return
                calls += 1
                if self.think > 0:
                    gevent.sleep(self.think)

    def _post_events(self, instance_id: str, session_id: str, step: PostEvents) -> bool:
        body = {"events": list(step.events)}
        with self.client.post(f"/v1/sessions/{session_id}/events", json=body, name=ROUTE_EVENTS,
                              catch_response=True) as resp:
            if resp.status_code not in (200, 201):
                resp.failure(f"{instance_id}: post events -> {resp.status_code}: {resp.text[:300]}")
                return False
            try:
                results = resp.json().get("results")
            except ValueError:
                resp.failure(f"{instance_id}: post events: response is not JSON")
                return False
            if not isinstance(results, list) or len(results) != len(step.events):
                resp.failure(f"{instance_id}: {len(step.events)} events sent, results {results!r:.200}")
                return False
        return True

    def _get_request(self, instance_id: str, session_id: str, step: ModelCall) -> bool:
        with self.client.get(f"/v1/sessions/{session_id}/request", params={"format": self.fmt}, name=ROUTE_REQUEST,
                             catch_response=True) as resp:
            if resp.status_code != 200:
                resp.failure(f"{instance_id} call {step.index}: get request -> {resp.status_code}: {resp.text[:300]}")
                return False
            try:
                body = resp.json()
                manifest = body["manifest"]
                total = int(manifest["tokens"]["total"])
                limit = int(manifest["budget"]["input_limit"])
                assert isinstance(body["request"], dict)
            except (ValueError, KeyError, TypeError, AssertionError) as exc:
                resp.failure(f"{instance_id} call {step.index}: unexpected body ({exc!r}): {resp.text[:200]}")
                return False
            if total > limit:
                resp.failure(f"{instance_id} call {step.index}: {total} tokens > input limit {limit} (eq. 1)")
                return False
        return True
