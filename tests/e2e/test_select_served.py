"""Select served end to end on a real trace (qwen3, HTTP through the TestClient): every
event accounted for in every manifest as verbatim, head + tail or folded; every handle the
manifest and the trunk name reads back its exact bytes (``GET /v1/handles``), index
payloads included; each request's count equals apply_chat_template on the served body;
passes per call within the issue's target; the record API returns the trunk's record."""

from __future__ import annotations

import hashlib
import json
import re

from fastapi.testclient import TestClient

from ctxd_tools import miniswe
from tests.traces import TRACE_FILES

TRACE = next(f for f in TRACE_FILES if f.name == "pydicom__pydicom-901__chat.traj.json")


def test_select_lineage_and_handles_served(sqlite_client: TestClient, qwen3_ids) -> None:
    client = sqlite_client
    traj = miniswe.load_trajectory(TRACE)
    r = client.post("/v1/sessions", json=miniswe.session_create_body(traj))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    posted: dict[str, dict] = {}
    calls = passes = 0
    named: set[str] = set()
    for step in miniswe.replay_plan(traj, infer_bindings=True):
        if isinstance(step, miniswe.PostEvents):
            assert client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)}).status_code == 200
            posted.update({e["event_id"]: e for e in step.events})
            continue
        got = client.get(f"/v1/sessions/{sid}/request").json()
        body, manifest = got["request"], got["manifest"]
        calls += 1
        passes += manifest["compaction"]["pass"]
        assert manifest["tokens"]["total"] == len(qwen3_ids(body)) <= manifest["budget"]["input_limit"]
        trunk = body["messages"][1]["content"]
        entries = [*manifest["items"], *manifest["elided"]]
        ranged = {s for r in manifest.get("ranges", ()) for s in range(r["seq_from"], r["seq_to"] + 1)}
        seq_of = {eid: n for n, eid in enumerate(posted, start=1)}  # the server numbers events as posted
        listed = {e["event_id"] for e in entries}
        assert listed | {eid for eid, n in seq_of.items() if n in ranged} == set(posted), "every event is accounted"
        for r in manifest.get("ranges", ()):
            assert set(r["representations"]) == {"folded"} and r["index"] in manifest["layout"]["elision_index"]
            assert r["seq_to"] < manifest["layout"]["cut_seq"]
        for e in entries:
            assert e["representation"] in ("verbatim", "head_tail", "folded", "not_rendered", "tombstone"), e
            if e["representation"] == "tombstone":
                assert e["handle"][:12] in "\n".join(str(m.get("content")) for m in body["messages"][2:])
                named.add(e["handle"])
            if e["representation"] == "folded":
                assert e["zone"] == "trunk" and "pass" in e["why"]
                if e["kind"] == "tool_result":
                    assert e["handle"][:12] in trunk or any(e["handle"] in client.get(f"/v1/handles/{h}").text
                                                            for h in manifest["layout"]["elision_index"])
                    named.add(e["handle"])
            if e["representation"] == "head_tail":
                named.add(e["handle"])
        named.update(manifest["layout"]["elision_index"])
    assert passes >= 1 and passes / calls <= 0.2
    payloads = {hashlib.sha256(e["payload"].encode()).hexdigest(): e["payload"].encode()
                for e in posted.values() if e["kind"] == "tool_result"}
    for handle in named:
        data = client.get(f"/v1/handles/{handle}").content
        assert hashlib.sha256(data).hexdigest() == handle, "every handle returns its bytes exactly"
        if handle in payloads:
            assert data == payloads[handle]
        else:  # an index payload: JSON naming the folded groups' turn and result handles
            index = json.loads(data)
            assert all(re.fullmatch(r"[0-9a-f]{64}", c["result"]) for g in index for c in g["calls"])
    record = client.get(f"/v1/sessions/{sid}/record").json()
    assert record["text"] == client.get(f"/v1/sessions/{sid}/request").json()["request"]["messages"][1]["content"]
