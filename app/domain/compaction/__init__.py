"""Deterministic compaction techniques (seed 000 section 4.5.1, tables 5 and 6, listing 1;
seed 004 part B: compaction as a designed, measurable, lossy projection).

Each technique is a pure function from a raw payload (``str``) or an earlier technique's
output (:class:`Compacted`) to a :class:`Compacted`: the new text, the raw line span behind
each of its lines, and the lineage, one :class:`Transform` per technique applied (kind,
params, stats, input and output bytes and lines, kept and omitted raw line ranges, and the
handle of the raw payload, readable with ``GET /v1/handles/{handle}?lines=a:b``). A
technique that changes nothing returns its input unchanged.

Not yet wired into ``select``: nothing in the request path calls these functions yet.
"""

from app.domain.compaction.diff import fold_diff
from app.domain.compaction.digest import ToolDigest, digest_tool_result, tool_digest
from app.domain.compaction.lineage import (
    MARKER_RE,
    Compacted,
    Span,
    Transform,
    as_source,
    handle_of,
    split_lines,
)
from app.domain.compaction.outline import outline_python
from app.domain.compaction.patterns import PROTECTED_RE, is_protected
from app.domain.compaction.poll import dedup_repeats
from app.domain.compaction.slicing import slice_failures
from app.domain.compaction.terminal import strip_terminal

__all__ = [
    "MARKER_RE",
    "PROTECTED_RE",
    "Compacted",
    "Span",
    "ToolDigest",
    "Transform",
    "as_source",
    "dedup_repeats",
    "digest_tool_result",
    "fold_diff",
    "handle_of",
    "is_protected",
    "outline_python",
    "slice_failures",
    "split_lines",
    "strip_terminal",
    "tool_digest",
]
