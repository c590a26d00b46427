"""Drive a real trajectory through the HTTP API and check every served request."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fastapi.testclient import TestClient

from app.adapters import miniswe

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "miniswe"
TRACE_FILES = sorted(TRACES.glob("*.traj.json"))


@dataclass
class ReplayStats:
    trace: str
    requests: int = 0
    tokens: int = 0
    requests_with_elision: int = 0
    max_tokens: int = 0
    totals: list[int] = field(default_factory=list)


def replay_and_check(client: TestClient, path: Path, *, profile: str = "qwen3",
                     count_body: Callable[[dict[str, Any]], int] | None = None) -> ReplayStats:
    """Replay ``path``; for every request assert the DESIGN.md section 6 invariants."""
    traj = miniswe.load_trajectory(path)
    create = miniswe.session_create_body(traj, profile=profile)
    r = client.post("/v1/sessions", json=create)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    constraints = [c["text"] for c in create["contract"]["constraints"]]
    posted: dict[str, bytes] = {}
    checked: set[str] = set()
    stats = ReplayStats(trace=path.name)
    for step in miniswe.replay_plan(traj):
        if isinstance(step, miniswe.PostEvents):
            r = client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)})
            assert r.status_code == 200, r.text
            for e in step.events:
                if e["kind"] == "tool_result":
                    data = e["payload"].encode()
                    posted[hashlib.sha256(data).hexdigest()] = data
            continue
        r = client.get(f"/v1/sessions/{sid}/request?format=openai")
        assert r.status_code == 200, r.text
        body, manifest = r.json()["request"], r.json()["manifest"]
        total = manifest["tokens"]["total"]
        where = f"{path.name} call {step.index}"
        assert total <= manifest["budget"]["input_limit"], where
        assert sum(manifest["tokens"]["by_role"].values()) == total, where
        assert sum(manifest["tokens"]["by_zone"].values()) == total, where
        calls = [c["id"] for m in body["messages"] for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
        assert sorted(calls) == sorted(results), f"{where}: unpaired calls/results"
        text = "\n".join(m["content"] or "" for m in body["messages"])
        for constraint in constraints:
            assert constraint in text, f"{where}: constraint missing"
        for item in manifest["elided"]:
            handle = item["handle"]
            if handle in checked:
                continue
            got = client.get(f"/v1/handles/{handle}")
            assert got.status_code == 200, where
            assert hashlib.sha256(got.content).hexdigest() == handle, where
            if handle in posted:
                assert got.content == posted[handle], where
            checked.add(handle)
        if count_body is not None:
            assert count_body(body) == total, f"{where}: served count differs from apply_chat_template"
        stats.requests += 1
        stats.tokens += total
        stats.totals.append(total)
        stats.max_tokens = max(stats.max_tokens, total)
        stats.requests_with_elision += bool(manifest["elided"])
    return stats
