"""Where a trajectory named on the command line is: the one lookup of ``ctxd replay``,
``ctxd bench`` and ``ctxd eval`` (standard library only, so it costs no import time).

The shared mini-swe-agent traces are ``../shared/traces/miniswe`` next to the repository
(or next to the working directory), else ``/work/shared/traces/miniswe``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["SUFFIX", "TracesNotFound", "resolve_trace", "shared_trace_dirs", "traces_dir"]

SUFFIX = ".traj.json"


class TracesNotFound(FileNotFoundError):
    """No shared traces directory (or no trajectory of that name) was found."""


def shared_trace_dirs() -> list[Path]:
    """The places looked at for the shared traces, in order."""
    repo = Path(__file__).resolve().parents[1]
    return [repo.parent / "shared" / "traces" / "miniswe",
            Path.cwd().parent / "shared" / "traces" / "miniswe",
            Path("/work/shared/traces/miniswe")]


def traces_dir(*, first: str | Path | None = None) -> Path:
    """The first of ``first`` (if given) and :func:`shared_trace_dirs` that holds a
    ``*.traj.json``. Raises TracesNotFound naming every place looked at."""
    candidates = ([Path(first).expanduser()] if first else []) + shared_trace_dirs()
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.glob("*" + SUFFIX)):
            return candidate
    raise TracesNotFound("no shared traces found in " + ", ".join(map(str, candidates)) + "; pass a path")


def resolve_trace(arg: str | Path) -> Path:
    """A trajectory (or a folder of them) named on the command line: the path itself if it
    exists, else a file of that name in the shared traces directory (:func:`traces_dir`),
    the ``.traj.json`` suffix optional, so ``pydicom__pydicom-901__chat`` works from any
    working directory.

    Raises TracesNotFound (a FileNotFoundError) naming every place looked at."""
    path = Path(arg).expanduser()
    if path.exists():
        return path
    try:
        directory: Path | None = traces_dir()
    except TracesNotFound:
        directory = None
    names = [path.name] if path.name.endswith(SUFFIX) else [path.name, path.name + SUFFIX]
    if directory is not None and path.name:
        for name in names:
            if (directory / name).is_file():
                return directory / name
    where = f" nor {' or '.join(names)} in the shared traces directory {directory}" if directory else \
        " and no shared traces directory was found (" + ", ".join(map(str, shared_trace_dirs())) + ")"
    raise TracesNotFound(f"no trajectory {str(arg)!r}: not a file or folder{where}")
