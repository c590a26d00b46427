"""Drive a real trajectory through the HTTP API and check every served request."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from ctxd_tools import miniswe


@dataclass
class ReplayStats:
    trace: str
    requests: int = 0
    tokens: int = 0
    requests_with_elision: int = 0
    max_tokens: int = 0
    totals: list[int] = field(default_factory=list)
    divergences: int = 0
    cached_tokens: int = 0
    tombstones: int = 0
    noticed: int = 0
    invalidation_divergences: int = 0
    appended_divergences: int = 0


def replay_and_check(client: TestClient, path: Path, *, profile: str = "qwen3",
                     template_ids: Callable[[dict[str, Any]], list[int]] | None = None,
                     infer_bindings: bool = False, invalidation: str = "auto",
                     before_get: Callable[[TestClient, str, int], None] | None = None,
                     after_get: Callable[[str, int, dict[str, Any]], None] | None = None) -> ReplayStats:
    """Replay ``path``; for every request assert the DESIGN.md section 6 invariants.
    ``infer_bindings``: post the inferred read bindings and artifact writes too (the
    ``select`` policy's events), so superseded reads are shown as tombstones or notices
    (``invalidation``: the session's ``metadata.invalidation``).

    With ``template_ids`` (OpenAI body -> ids of the official ``apply_chat_template``), the
    ``tokens`` format's ids must equal them exactly and the manifest's total must too.

    ``before_get(client, session_id, call_index)`` may post more events before each GET
    (issue 16: plans, a child session's conclusion); a user message it appends replaces the
    previous request's generation prompt, the only leaf divergence then allowed.
    ``after_get(session_id, call_index, response)`` checks each served response further."""
    traj = miniswe.load_trajectory(path)
    # the trace's bash tool is a declared shell tool: as recorded, the server infers the
    # bindings (issue 11 item 1); with the adapter's own (``infer_bindings``) it infers none
    create = miniswe.session_create_body(traj, profile=profile, infer_bindings=infer_bindings)
    if invalidation != "auto":
        create["metadata"] = {**create.get("metadata", {}), "invalidation": invalidation}
    r = client.post("/v1/sessions", json=create)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    constraints = [c["text"] for c in create["contract"]["constraints"]]
    posted: dict[str, bytes] = {}
    checked: set[str] = set()
    stats = ReplayStats(trace=path.name)
    for step in miniswe.replay_plan(traj, infer_bindings=infer_bindings):
        if isinstance(step, miniswe.PostEvents):
            r = client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)})
            assert r.status_code == 200, r.text
            for e in step.events:
                if e["kind"] == "tool_result":
                    data = e["payload"].encode()
                    posted[hashlib.sha256(data).hexdigest()] = data
            continue
        if before_get is not None:
            before_get(client, sid, step.index)
        r = client.get(f"/v1/sessions/{sid}/request?format=openai")
        assert r.status_code == 200, r.text
        if after_get is not None:
            after_get(sid, step.index, r.json())
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
        listed = [i["seq"] for i in manifest["items"] + manifest["elided"]]
        ranged = sum(r["events"] for r in manifest.get("ranges", ()))
        assert len(set(listed)) == len(listed) and len(listed) + ranged == manifest["last_seq"], \
            f"{where}: every event accounted for exactly once"
        assert client.get(f"/v1/sessions/{sid}/manifests/{manifest['id']}").json() == manifest, \
            f"{where}: the stored manifest (keyframe + deltas) reads back as served"
        for handle in manifest["layout"]["elision_index"]:
            assert handle[:12] in body["messages"][1]["content"], where
            index = client.get(f"/v1/handles/{handle}")
            assert index.status_code == 200 and hashlib.sha256(index.content).hexdigest() == handle, where
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
        if template_ids is not None:
            expected = template_ids(body)
            assert len(expected) == total, f"{where}: served count differs from apply_chat_template"
            tok = client.get(f"/v1/sessions/{sid}/request?format=tokens")
            assert tok.status_code == 200, tok.text
            assert tok.json()["request"]["prompt_token_ids"] == expected, f"{where}: segment ids differ"
        cache = manifest["cache"]
        if stats.requests and not cache["extends_previous"]:
            # append-stable leaf: only a budget action may break the prefix on these traces
            divergence = cache["first_divergence"]
            if divergence["reason"].startswith("invalidation:"):  # bindings from the adapter or the server
                # a tombstone replaces a superseded read in place, or a notice follows it (seed 000 table 9)
                stats.invalidation_divergences += 1
            elif before_get is not None and divergence["zone"] == "leaf" and "generation prompt" in \
                    divergence["reason"]:
                # a user message appended after the previous request (a plan version, a conclusion)
                assert divergence["token_offset"] >= cache["previous_tokens"] - 3, f"{where}: {divergence}"
                stats.appended_divergences += 1
            else:
                assert divergence["zone"] == "trunk" and divergence["reason"].startswith("budget"), f"{where}: {divergence}"
                assert manifest["layout"]["evicted_now"] > 0, where
            stats.divergences += 1
        elif stats.requests:
            assert cache["predicted_cached_tokens"] >= cache["previous_tokens"] - 16, f"{where}: reuse lost"
        stats.cached_tokens += cache["predicted_cached_tokens"]
        stats.requests += 1
        stats.tokens += total
        inv = manifest.get("invalidation") or {}
        stats.tombstones += inv.get("tombstones", 0)
        stats.noticed += inv.get("noticed", 0)
        stats.totals.append(total)
        stats.max_tokens = max(stats.max_tokens, total)
        stats.requests_with_elision += bool(manifest["elided"])
    return stats
