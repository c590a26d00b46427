"""Domain events of a shared trajectory, numbered as the server numbers them (no server):
seqs 1.., artifact revisions counting each artifact's writes, a binding without a revision
bound to the artifact's current revision. For pure-domain tests of the evidence layer on
real trajectories (the API tests post the same events over HTTP)."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from app.domain.types import (
    ArtifactWriteEvent,
    Binding,
    Constraint,
    Contract,
    Event,
    HypothesisEvent,
    MessageEvent,
    ObligationEvent,
    StepEvent,
    ToolCall,
    ToolResultEvent,
)
from ctxd_tools.miniswe import load_trajectory, session_create_body, trajectory_events


def _handle(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def to_domain(events: list[dict[str, Any]]) -> list[Event]:
    """API event bodies (as POSTed) -> domain events, as ingestion would store them."""
    out: list[Event] = []
    revisions: dict[str, int] = {}
    for seq, e in enumerate(events, start=1):
        kind = e["kind"]
        if kind == "message":
            calls = tuple(ToolCall(c["call_id"], c["name"], c["arguments"] if isinstance(c["arguments"], str)
                                   else json.dumps(c["arguments"])) for c in e.get("tool_calls") or [])
            out.append(MessageEvent(seq=seq, event_id=e["event_id"], role=e["role"], content=e.get("content") or "",
                                    handle=_handle(json.dumps(e, sort_keys=True)), reasoning=e.get("reasoning"),
                                    tool_calls=calls))
        elif kind == "tool_result":
            b = e.get("binding")
            binding = None if b is None else Binding(artifact=b["artifact"], kind=b.get("kind", "file"),
                                                     revision=b.get("revision", revisions.get(b["artifact"], 0)),
                                                     range=b.get("range"), content_hash=b.get("content_hash"))
            out.append(ToolResultEvent(seq=seq, event_id=e["event_id"], call_id=e["call_id"], payload=e["payload"],
                                       handle=_handle(e["payload"]), exit_code=e.get("exit_code"), binding=binding,
                                       conditions=dict(e.get("conditions") or {})))
        elif kind == "artifact_write":
            revisions[e["artifact"]] = revisions.get(e["artifact"], 0) + 1
            out.append(ArtifactWriteEvent(seq=seq, event_id=e["event_id"], artifact=e["artifact"],
                                          revision=revisions[e["artifact"]], content_hash=e.get("content_hash")))
        elif kind == "step":
            out.append(StepEvent(seq=seq, event_id=e["event_id"], text=e["text"]))
        elif kind == "hypothesis":
            out.append(HypothesisEvent(seq=seq, event_id=e["event_id"], key=e["key"], text=e["text"],
                                       status=e.get("status", "working"), depends_on=tuple(e.get("depends_on") or ())))
        elif kind == "obligation":
            out.append(ObligationEvent(seq=seq, event_id=e["event_id"], key=e["key"], text=e["text"],
                                       status=e.get("status", "open")))
        else:
            raise ValueError(kind)
    return out


def contract_of(body: dict[str, Any]) -> Contract:
    c = body["contract"]
    return Contract(goal=c["goal"], constraints=tuple(Constraint(x["id"], x["text"]) for x in c.get("constraints", [])),
                    contract_version=int(c.get("contract_version", 1)))


@cache
def trace_session(path: Path) -> tuple[Contract, tuple[Event, ...]]:
    """(contract, domain events with inferred bindings and writes) of one shared trajectory."""
    traj = load_trajectory(path)
    return contract_of(session_create_body(traj)), tuple(to_domain(trajectory_events(traj, infer_bindings=True)))
