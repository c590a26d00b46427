"""Digests of every request body and manifest ctxd serves over the shared traces, for a golden
test that holds a refactor to "no response changes" (tests/golden/test_golden_requests.py).

Each trace is replayed through the in-process API (a FastAPI TestClient on a fresh SQLite
database) as an agent would post it, with fixed session ids, the payload token counts settled
before each GET (the counter runs in the POST's own thread) and the summarizer off. At every
model call it GETs the openai request; after the last call also the anthropic and tokens ones.
What is hashed: the request body as served, and the manifest without the keys that name a
stored row or a time (``id``, ``session_id``, ``*_at``).

Regenerate (only when a response is meant to change) with
``python -m tests.golden.requests_golden --write``."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

GOLDEN_FILE = Path(__file__).with_name("requests.json")
#: traces replayed under mistral-tekken besides all of them under qwen3 (the first few by name)
MISTRAL_TRACES = 4
_DROPPED = {"id", "session_id"}
#: the session id the next create gets (replay_digests pushes one per trace)
_NEXT_IDS: list[str] = []


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _DROPPED and not k.endswith("_at")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _digest(body: dict[str, Any]) -> str:
    """16 hex digits of the sha256 of the request as served and of its manifest, stripped."""
    h = hashlib.sha256(orjson.dumps(body["request"], option=orjson.OPT_SORT_KEYS))
    h.update(b"\x00")
    h.update(orjson.dumps(_strip(body["manifest"]), option=orjson.OPT_SORT_KEYS))
    return h.hexdigest()[:16]


@contextmanager
def golden_client() -> Iterator[Any]:
    """A TestClient on a fresh data directory whose next session id is the one
    :func:`replay_digests` sets (from the trace and profile, so a trace's requests do not
    depend on which others ran before it) and whose payload counts run inside the POST
    that queues them."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    ids = _NEXT_IDS
    with tempfile.TemporaryDirectory(prefix="ctxd-golden-") as data_dir, \
            mock.patch("app.services.sessions.uuid", mock.Mock(uuid4=lambda: mock.Mock(hex=ids.pop()))), \
            TestClient(create_app(Settings(data_dir=Path(data_dir))), raise_server_exceptions=True) as client:
        client.app.state.ctxd.payload_counter.close()  # from now on a submit counts in the caller's thread
        yield client


def replay_digests(client: Any, trace: Path, profile: str) -> list[str]:
    """The digests of every request served while replaying ``trace`` under ``profile``."""
    from ctxd_tools import miniswe

    traj = miniswe.load_trajectory(trace)
    _NEXT_IDS.append(hashlib.sha256(f"{profile}/{trace.name}".encode()).hexdigest()[:32])
    r = client.post("/v1/sessions", json={**miniswe.session_create_body(traj), "profile": profile})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    out: list[str] = []
    for step in miniswe.replay_plan(traj, infer_bindings=True):
        if isinstance(step, miniswe.PostEvents):
            r = client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)})
            assert r.status_code == 200, r.text
        else:
            r = client.get(f"/v1/sessions/{sid}/request")
            assert r.status_code == 200, r.text
            out.append(_digest(r.json()))
    for fmt in ("anthropic", "tokens"):
        r = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
        assert r.status_code == 200, r.text
        out.append(f"{fmt}:{_digest(r.json())}")
    return out


def cases(traces: list[Path]) -> list[tuple[str, Path]]:
    names = sorted(traces)
    return [("qwen3", t) for t in names] + [("mistral-tekken", t) for t in names[:MISTRAL_TRACES]]


def key(profile: str, trace: Path) -> str:
    return f"{profile}/{trace.name}"


def main(argv: list[str] | None = None) -> int:
    from tests.traces import TRACE_FILES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN_FILE}")
    args = parser.parse_args(argv)
    golden: dict[str, list[str]] = {}
    todo = cases(TRACE_FILES)
    with golden_client() as client:
        for n, (profile, trace) in enumerate(todo, 1):
            golden[key(profile, trace)] = replay_digests(client, trace, profile)
            print(f"[{n}/{len(todo)}] {key(profile, trace)}: {len(golden[key(profile, trace)])} requests",
                  file=sys.stderr, flush=True)
    text = json.dumps(golden, indent=0, sort_keys=True) + "\n"
    if args.write:
        GOLDEN_FILE.write_text(text)
        print(f"wrote {GOLDEN_FILE}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
