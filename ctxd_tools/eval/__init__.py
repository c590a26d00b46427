"""Evaluation of context policies (seed 000 section 4.8, seed 004 part B): ``ctxd eval``.

* :mod:`ctxd_tools.eval.policies` - ``append``, ``window``, ``select`` behind one interface.
* :mod:`ctxd_tools.eval.replay` - in-process replay of mini-swe-agent trajectories through the
  API's service functions; per-call records; a process pool and a progress bar.
* :mod:`ctxd_tools.eval.measures` - cost, reuse, eq. 6 (constraint retention), eq. 7 (stale
  support), eq. 9 (compression), pairing, grounding: pure functions.
* :mod:`ctxd_tools.eval.report` - results.json, calls.jsonl, report.md and PNG plots.
* :mod:`ctxd_tools.eval.synthetic` - seed 000's notebooks 4.1-4.4 on unit-token sessions, with
  ctxd's own budget, layout, eviction and prefix-reuse code.

Usage: ``ctxd eval ../shared/traces/miniswe --policies append,window,select --out DIR``.
"""
