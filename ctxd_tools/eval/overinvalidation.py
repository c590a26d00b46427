"""Over-invalidation of the inferred bindings (issue 11 item 2): how often a write marks
observations of another artifact than its own, over trajectories.

The events ``select`` ingests (inferred bindings and writes) are turned into domain
values with the server's revision numbering (writes count from 1 per artifact; a binding
without a revision reads the current one) and given to
:func:`app.domain.invalidation.over_invalidation`. A write counts as over-invalidating
when it marks an observation with no binding to its artifact (the graph's edges are
exact, so never), or when it is a coarse write (a tree write expanded to an artifact the
command did not name) that marks an observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.domain.invalidation import UNKNOWN_KIND, ArtifactLedger, build_graph, over_invalidation
from app.domain.types import ArtifactWriteEvent, Binding, ToolResultEvent
from ctxd_tools import miniswe

__all__ = ["domain_events", "measure"]


def domain_events(events: Sequence[dict[str, Any]]) -> list[ArtifactWriteEvent | ToolResultEvent]:
    """Writes and tool results of posted events as domain values, numbered as the server
    numbers them (seq from 1 in posting order; revisions per artifact from 1)."""
    out: list[ArtifactWriteEvent | ToolResultEvent] = []
    ledger = ArtifactLedger()
    for seq, e in enumerate(events, start=1):
        if e["kind"] == "artifact_write":
            revision = ledger.write(e["artifact"], e.get("content_hash"))
            out.append(ArtifactWriteEvent(seq, e["event_id"], e["artifact"], revision, e.get("content_hash")))
        elif e["kind"] == "tool_result":
            b = e.get("binding")
            binding = None
            if b:
                rev = 0 if b.get("kind") == UNKNOWN_KIND else ledger.revision_of(
                    b["artifact"], revision=b.get("revision"), range=b.get("range"),
                    content_hash=b.get("content_hash"))
                binding = Binding(b["artifact"], b.get("kind") or "file", rev, b.get("range"), b.get("content_hash"))
            reads = [dict(r, revision=ledger.revision_of(r["artifact"], revision=r.get("revision"), range=r.get("range"),
                                                         content_hash=r.get("content_hash")))
                     for r in e.get("conditions", {}).get("reads", [])]
            out.append(ToolResultEvent(seq, e["event_id"], e["call_id"], e["payload"], handle=e["event_id"],
                                       binding=binding, conditions={"reads": reads} if reads else {}))
    return out


def measure(paths: Sequence[str | Path]) -> dict[str, Any]:
    """Over the trajectories: ``writes``, ``over`` (marked an unbound observation),
    ``coarse`` (coarse writes that marked something), ``marked`` (markings), ``rate`` =
    (over + coarse) / writes, and per trace the same counts."""
    total = {"writes": 0, "over": 0, "coarse": 0, "marked": 0}
    traces = {}
    for path in paths:
        traj = miniswe.load_trajectory(path)
        graph = build_graph(domain_events(miniswe.trajectory_events(traj, infer_bindings=True)))
        found = over_invalidation(graph, miniswe.coarse_writes(traj))
        counts = {"writes": found.writes, "over": found.over, "coarse": found.coarse, "marked": found.marked}
        traces[Path(path).name] = counts
        for k, v in counts.items():
            total[k] += v
    rate = (total["over"] + total["coarse"]) / total["writes"] if total["writes"] else 0.0
    return {"total": total | {"rate": rate}, "traces": traces}
