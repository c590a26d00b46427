"""Where the shared real trajectories are: ``CTXD_TRACES_DIR``, else the places
:func:`ctxd_tools.traces.traces_dir` looks at (``../shared/traces/miniswe`` next to the
repository, ..., ``/work/shared/traces/miniswe``; CI may clone elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

from ctxd_tools.traces import TracesNotFound, traces_dir

try:
    TRACES_DIR = traces_dir(first=os.environ.get("CTXD_TRACES_DIR") or None)
except TracesNotFound:  # tests that need the traces skip on a missing file
    TRACES_DIR = Path("/work/shared/traces/miniswe")
TRACE_FILES = sorted(TRACES_DIR.glob("*.traj.json"))
