"""ctxd's offline tools, shipped in the same wheel as the service (:mod:`app`) and never
imported by it (an import-linter contract in pyproject.toml): the commands ``ctxd replay``,
``ctxd bench`` and ``ctxd eval`` import them inside their handlers, so ``ctxd serve`` does not.

* :mod:`ctxd_tools.traces` - where a trajectory named on the command line is.
* :mod:`ctxd_tools.miniswe` - the mini-swe-agent trajectory importer (events, replay plan).
* :mod:`ctxd_tools.bash_coverage` - how much of the recorded commands the bash effects interpret.
* :mod:`ctxd_tools.replay_http` - ``ctxd replay``: a trajectory driven against a running server.
* :mod:`ctxd_tools.bench`, :mod:`ctxd_tools.bench_http`, :mod:`ctxd_tools.bench_ingest` - ``ctxd bench``.
* :mod:`ctxd_tools.eval` - ``ctxd eval``: in-process replay under context policies, measures, report.
* :mod:`ctxd_tools.loadgen` - simulated agents in threads (the fault tests' load).
* :mod:`ctxd_tools.native_stack` - PostgreSQL, Redis and ``ctxd serve`` started natively on
  loopback (the load and fault tests, ``loadtests/capacity.py``).
"""
