"""Assembly: the window and select policies' layout of the next request (a package).

The phases, by module: :mod:`~app.domain.assembly.grouping` (turn groups and the dependency
graph), :mod:`~app.domain.assembly.bounding` (tool outputs, documents and messages cut to
head + tail), :mod:`~app.domain.assembly.leaf` (leaf messages, the elision note, the
conversation, invalidation in the leaf), :mod:`~app.domain.assembly.views` (what is kept
per turn group in the session memo), :mod:`~app.domain.assembly.items` (manifest items),
:mod:`~app.domain.assembly.passes` (the fold and eviction search) and
:mod:`~app.domain.assembly.window` (:func:`assemble_window`, a short sequence of those
phases). The names imported from ``app.domain.assembly`` are re-exported here.
"""

from app.domain.assembly.base import BoundedResult
from app.domain.assembly.bounding import FittedGroup, bound_group, bound_tool_output, fit_newest_group
from app.domain.assembly.grouping import build_turn_groups, cached_graph, cached_states, cached_turn_groups
from app.domain.assembly.leaf import NOTE_MAX_GROUPS
from app.domain.assembly.views import warm_window
from app.domain.assembly.window import Assembly, assemble_window

__all__ = [
    "NOTE_MAX_GROUPS",
    "Assembly",
    "BoundedResult",
    "FittedGroup",
    "assemble_window",
    "bound_group",
    "bound_tool_output",
    "build_turn_groups",
    "cached_graph",
    "cached_states",
    "cached_turn_groups",
    "fit_newest_group",
    "warm_window",
]
