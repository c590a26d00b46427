"""A real trace replayed into a running ctxd through its HTTP API (a FastAPI TestClient or
an httpx.Client on ``ctxd serve``: the same calls), the way an agent would post it."""

from __future__ import annotations

from typing import Any

from ctxd_tools import miniswe
from tests.traces import TRACES_DIR


def replay_trace(client: Any, name: str, *, headers: dict[str, str] | None = None, base: str = "",
                 infer_bindings: bool = True) -> tuple[str, int]:
    """Create a session from the shared trajectory ``name`` (``*.traj.json`` in the traces
    directory), post its events in order (with the artifact writes and read bindings
    inferred from each bash command when ``infer_bindings``) and GET the request wherever
    the agent called its model. Returns (session id, calls made). Asserts every answer is 2xx."""
    traj = miniswe.load_trajectory(TRACES_DIR / name)
    r = client.post(f"{base}/v1/sessions", json=miniswe.session_create_body(traj), headers=headers)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    calls = 0
    for step in miniswe.replay_plan(traj, infer_bindings=infer_bindings):
        if isinstance(step, miniswe.PostEvents):
            r = client.post(f"{base}/v1/sessions/{sid}/events", json={"events": list(step.events)}, headers=headers)
        else:
            r = client.get(f"{base}/v1/sessions/{sid}/request", headers=headers)
            calls += 1
        assert r.status_code == 200, r.text
    return sid, calls
