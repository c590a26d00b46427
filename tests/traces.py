"""Where the shared real trajectories are: ``CTXD_TRACES_DIR``, else ``../shared/traces/miniswe``
next to the repository, else ``/work/shared/traces/miniswe`` (CI may clone elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = [
    os.environ.get("CTXD_TRACES_DIR", ""),
    str(Path(__file__).resolve().parents[2] / "shared" / "traces" / "miniswe"),
    "/work/shared/traces/miniswe",
]

TRACES_DIR = next((Path(c) for c in _CANDIDATES if c and Path(c).is_dir() and any(Path(c).glob("*.traj.json"))),
                  Path(_CANDIDATES[-1]))
TRACE_FILES = sorted(TRACES_DIR.glob("*.traj.json"))
