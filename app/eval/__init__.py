"""Evaluation of context policies (seed 000 section 4.8, seed 004 part B): ``ctxd eval``.

* :mod:`app.eval.policies` - ``append``, ``window``, ``select`` behind one interface.
* :mod:`app.eval.replay` - in-process replay of mini-swe-agent trajectories through the
  API's service functions; per-call records; a process pool and a progress bar.
* :mod:`app.eval.metrics` - cost, reuse, eq. 6 (constraint retention), eq. 7 (stale
  support), eq. 9 (compression), pairing, grounding: pure functions.
* :mod:`app.eval.report` - results.json, calls.jsonl, report.md and PNG plots.
* :mod:`app.eval.synthetic` - seed 000's notebooks 4.1-4.4 on unit-token sessions, with
  ctxd's own budget, layout, eviction and prefix-reuse code.

Usage: ``ctxd eval ../shared/traces/miniswe --policies append,window,select --out DIR``.
"""
