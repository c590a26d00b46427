"""What each field of the session memo saves on a warm GET (select, in process).

``python -m ctxd_tools.bench_memo [--traces N] [--fields NAME ...]``

Shared traces are replayed through the real service functions (the bench harness of
:mod:`ctxd_tools.bench`: schema validation, ``ingest_events``, ``assemble_request`` on a
real SQLite database, the shipped qwen3 profile, select), one session per configuration:
the whole memo (twice, which gives the noise floor) and, per field of
:class:`app.domain.session_memo.SessionMemo`, the memo with that field reset to empty
before every GET (the GET then derives that artefact again, as it would with no such
memo). The configurations run in lockstep: at every model call of the trace each
session's GET runs back to back, in rotating order, so load on the machine hits them
alike. The garbage collector is held during a call's GETs and run between calls
(untimed): a full collection walks every configuration's memo and would land on whichever
GET triggers it. Every GET of every configuration must serve the same body (the memo
changes no result). Prints ms per GET and what the field saves: ``1 - whole / without``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time
from pathlib import Path
from typing import Any

#: fields that are not artefacts a GET derives: the warm-up's switch and the summarizer's input
NOT_TIMED = frozenset({"nbytes", "warm_profile", "forecast"})


def _reset(memo: Any, name: str) -> None:
    f = next(f for f in dataclasses.fields(memo) if f.name == name)
    setattr(memo, name, f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)


def measure(traces: list[Path], fields: list[str], *, quiet: bool = False) -> dict[str, tuple[float, int]]:
    """{configuration: (seconds of its GETs, GETs)}; configurations ``whole``, ``whole 2``
    and each of ``fields``."""
    from app.services.memo import AssemblyMemo
    from app.tokenizers.loading import MeterRegistry
    from app.tokenizers.segments import LocalLRUCache
    from ctxd_tools.bench import _body_digest, harness
    from ctxd_tools.miniswe import ModelCall, PostEvents, load_trajectory, replay_plan, session_create_body

    configs = ["whole", "whole 2", *fields]
    seconds = dict.fromkeys(configs, 0.0)
    gets = 0
    with harness() as h:
        # each configuration is a server of its own: its meters (the previous request's
        # encoding, the segment cache) and its memo
        meters = {c: MeterRegistry(LocalLRUCache(64 * 1024 * 1024)) for c in configs}
        for registry in meters.values():  # the tokenizers load before anything is timed
            registry.get(h.profiles.get("qwen3"))
        for number, trace in enumerate(traces, 1):
            traj = load_trajectory(trace)
            memos = {c: AssemblyMemo(max_bytes=8 << 30) for c in configs}
            sids = {c: h.create_session(session_create_body(traj, profile="qwen3")) for c in configs}
            calls = 0
            for step in replay_plan(traj, infer_bindings=True):
                if isinstance(step, PostEvents):
                    for c in configs:
                        h.memos[id(meters[c])] = memos[c]
                        h.post_events(sids[c], step.events, meters=meters[c])
                elif isinstance(step, ModelCall):
                    calls += 1
                    bodies = set()
                    order = configs[calls % len(configs):] + configs[:calls % len(configs)]
                    gc.collect()
                    gc.disable()
                    for c in order:
                        h.memos[id(meters[c])] = memos[c]
                        if c in fields:
                            _reset(memos[c].leaf_cache(sids[c]), c)
                        took, out = h.timed_get(meters[c], sids[c])
                        seconds[c] += took
                        bodies.add(_body_digest(dict(out.request)))
                    gc.enable()
                    if len(bodies) != 1:
                        raise AssertionError(f"{trace.name} call {calls}: the configurations served different bodies")
            gets += calls
            if not quiet:
                print(f"  [{number}/{len(traces)}] {trace.name}: {calls} GETs x {len(configs)} configurations",
                      file=sys.stderr, flush=True)
    return {c: (s, gets) for c, s in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    from app.domain.session_memo import SessionMemo
    from ctxd_tools.traces import SUFFIX, TracesNotFound, traces_dir

    parser = argparse.ArgumentParser(prog="python -m ctxd_tools.bench_memo",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--traces", type=int, default=6, help="how many shared traces, spread over sizes (default 6)")
    parser.add_argument("--fields", nargs="*", help="only these memo fields (default: all)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    names = [f.name for f in dataclasses.fields(SessionMemo) if f.name not in NOT_TIMED]
    fields = args.fields or names
    unknown = sorted(set(fields) - set(names))
    if unknown:
        parser.error(f"not a timed SessionMemo field: {', '.join(unknown)} (one of {', '.join(names)})")
    try:
        files = sorted(traces_dir().glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_size)
    except TracesNotFound as exc:  # it says where it looked
        parser.error(str(exc))
    step = max(1, len(files) // args.traces)
    traces = files[step // 2::step][:args.traces]
    t0 = time.perf_counter()
    got = measure(traces, fields, quiet=args.quiet)
    whole_s, n = got["whole"]
    whole2_s, _ = got["whole 2"]
    whole = min(whole_s, whole2_s)
    print(f"{len(traces)} traces, {n} warm GETs per configuration, {time.perf_counter() - t0:.0f} s; "
          f"whole memo {1000 * whole_s / n:.2f} and {1000 * whole2_s / n:.2f} ms/GET "
          f"(noise {abs(whole_s - whole2_s) / whole:.1%})")
    print(f"{'field reset before each GET':30} {'ms/GET':>8} {'saves':>7}")
    for name in fields:
        s, _ = got[name]
        print(f"{name:30} {1000 * s / n:8.2f} {1 - whole / s:7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
