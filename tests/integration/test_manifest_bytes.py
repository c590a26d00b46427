"""The save step's fast paths on every GET of a real trace (issue 9, speed): the manifest's
JSON built from the previous one's (reused item JSON and bytes, app/store/json_parts.py)
is ``to_json()``; the served manifest bytes are ``orjson.dumps`` of it with its id, and
what ``GET .../manifests/{id}`` rebuilds from the database; the stored row holds the very
bytes the slow path (the whole JSON for a keyframe, the full delta walk otherwise) would
store. Some GETs find no previous manifest in the memo (another worker, an evicted
session) and build from the stored one."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select

from app.store import delta
from app.store import repository as repo
from app.store.tables import ManifestRow
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.segments import LocalLRUCache
from ctxd_tools.bench import harness
from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body

TRACE = Path("/work/shared/traces/miniswe/pylint-dev__astroid-1333__chat.traj.json")


@pytest.mark.skipif(not TRACE.is_file(), reason=f"trace {TRACE.name} not found")
def test_every_manifest_is_served_and_stored_as_the_slow_path_would(monkeypatch: pytest.MonkeyPatch) -> None:
    real = repo.add_manifest
    saves: list[tuple[repo.StoredManifest | None, Any, repo.StoredManifest]] = []

    def kept(db: Any, manifest: Any, **kwargs: Any) -> repo.StoredManifest | None:
        saved = real(db, manifest, **kwargs)
        assert saved is not None
        saves.append((kwargs.get("base"), manifest, saved))
        return saved

    monkeypatch.setattr(repo, "add_manifest", kept)
    traj = load_trajectory(TRACE)
    gets = 0
    with harness() as h:
        meters = MeterRegistry(LocalLRUCache(256 * 1024 * 1024))
        sid = h.create_session(session_create_body(traj, profile="qwen3"))
        for step in replay_plan(traj):
            if isinstance(step, PostEvents):
                h.post_events(sid, step.events, meters=meters)
                continue
            if isinstance(step, ModelCall):
                gets += 1
                if gets % 7 == 0:  # the next base is read back from the database, without parts
                    h.memo_for(meters).forget(sid)
                _, out = h.timed_get(meters, sid)
                base, manifest, saved = saves[-1]
                whole = manifest.to_json()
                assert orjson.dumps(saved.data) == orjson.dumps(whole), f"GET {gets}"
                served = saved.json_bytes()
                assert served == orjson.dumps(whole | {"id": saved.id}) == out.manifest_bytes
                with h.factory() as db:
                    rebuilt = repo.get_manifest(db, sid, saved.id)
                    stored = db.execute(select(ManifestRow.data).where(ManifestRow.id == saved.id)).scalar_one()
                assert rebuilt is not None and orjson.dumps(rebuilt.to_json()) == served, f"GET {gets}"
                if saved.depth == 0:
                    slow = zlib.compress(orjson.dumps(whole), 6)
                else:
                    assert base is not None
                    slow = zlib.compress(orjson.dumps(delta.diff(base.data, whole) or {"{": {}}), 6)
                assert stored == slow, f"GET {gets}: stored bytes differ from the slow path's"
    from_memo = [b for b, _, _ in saves if b is not None and b.parts is not None]
    from_db = [b for b, _, _ in saves if b is not None and b.parts is None]
    assert gets == len(saves) > 100 and len(from_memo) > 100 and len(from_db) > 10
    assert any(m.elided or m.ranges for _, m, _ in saves), "the trace evicts under the profile"
    assert any(s.depth == 0 for b, _, s in saves if b is not None), "keyframes after deltas"
