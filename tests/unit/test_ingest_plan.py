"""The POST path's pure plan (app/domain/ingest.py ``plan_ingest``): no database, the
session state given, the rows, results and artifacts decided."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from app.domain.errors import EventConflict, InvalidEvent, PayloadTooLarge
from app.domain.ingest import IngestState, PostedEvent, StoredEvent, canonical_event, fingerprint, plan_ingest


def ev(**data: Any) -> PostedEvent:
    return PostedEvent.from_json(data)


def test_a_batch_appends_in_seq_order_with_payloads_behind_handles() -> None:
    state = IngestState(session_id="s", last_seq=4)
    plan = plan_ingest(state, [
        ev(event_id="m", kind="message", role="assistant", content="look",
           tool_calls=[{"call_id": "c1", "name": "bash", "arguments": "{}"}]),
        ev(event_id="r", kind="tool_result", call_id="c1", payload="out\n", exit_code=0, binding=None, conditions={}),
        ev(event_id="w", kind="artifact_write", artifact="a.py", content_hash="h"),
    ])
    assert [(e.seq, e.event_id) for e in plan.events] == [(5, "m"), (6, "r"), (7, "w")]
    assert plan.last_seq == 7 and [r.status for r in plan.results] == ["created"] * 3
    assert plan.new_calls == [("c1", 5, 6)] and plan.answers == []
    handle = hashlib.sha256(b"out\n").hexdigest()
    assert plan.events[1].body["handle"] == handle and plan.payloads[handle] == b"out\n"
    assert plan.new_outputs == [handle] and plan.rendered_texts == {handle: "out\n"}
    assert plan.artifacts == {"a.py": (1, "h")} and plan.results[2].revision == 1
    assert plan.appended == {"message": 1, "tool_result": 1, "artifact_write": 1}


def test_duplicates_answer_the_stored_seq_and_a_changed_body_conflicts() -> None:
    write = ev(event_id="w", kind="artifact_write", artifact="a.py", content_hash=None)
    stored = StoredEvent(fingerprint(canonical_event(write.as_json())), 3, revision=2)
    state = IngestState(session_id="s", last_seq=3, existing={"w": stored})
    plan = plan_ingest(state, [write, write])
    assert [(r.seq, r.status, r.revision) for r in plan.results] == [(3, "duplicate", 2)] * 2
    assert plan.events == [] and plan.last_seq == 3
    with pytest.raises(EventConflict):
        plan_ingest(state, [ev(event_id="w", kind="artifact_write", artifact="b.py", content_hash=None)])


def test_refusals_name_the_event() -> None:
    state = IngestState(session_id="s", last_seq=0, calls={"done": 2})
    with pytest.raises(InvalidEvent, match="names no earlier tool call"):
        plan_ingest(state, [ev(event_id="r", kind="tool_result", call_id="nope", payload="", conditions={})])
    with pytest.raises(InvalidEvent, match="already has a result"):
        plan_ingest(state, [ev(event_id="r", kind="tool_result", call_id="done", payload="", conditions={})])
    with pytest.raises(InvalidEvent, match="has no parent"):
        plan_ingest(state, [ev(event_id="c", kind="conclusion", text="done")])
    with pytest.raises(PayloadTooLarge):
        plan_ingest(state, [ev(event_id="d", kind="document", text="x" * 11)], max_payload_bytes=10)


def test_a_conclusion_goes_back_to_the_parent_and_reads_get_the_servers_revisions() -> None:
    state = IngestState(session_id="child", last_seq=1, parent_id="parent", parent_last_seq=9,
                        calls={"c": None}, artifacts={"a.py": (3, "h3")})
    plan = plan_ingest(state, [
        ev(event_id="r", kind="tool_result", call_id="c", payload="x", conditions={},
           binding={"artifact": "a.py", "kind": "file", "revision": None, "content_hash": "other", "range": None}),
        ev(event_id="k", kind="conclusion", text="it works"),
    ])
    binding = plan.events[0].body["binding"]
    assert binding["revision"] == 4 and binding["external_change"] is True  # a whole read contradicting h3
    assert plan.artifacts == {"a.py": (4, "other")} and plan.answers == [("c", 2)]
    parent_event, conclusion = plan.events[1], plan.events[2]
    assert (parent_event.session_id, parent_event.seq, parent_event.kind) == ("parent", 10, "child_conclusion")
    assert conclusion.body["parent_seq"] == 10 and conclusion.seq == 3
    assert [e.event_id for e in plan.session_events()] == ["r", "k"]
    assert plan.parents[0].last_seq == 10
