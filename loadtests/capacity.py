"""Capacity of ctxd on this machine (issue 13 item 8): prints the tables of docs/operations.md.

Run from the repository root::

    .venv/bin/python -m loadtests.capacity                    # ~5 min
    .venv/bin/python -m loadtests.capacity --seconds 20 --agents 1,2 --workers 1

1. **GETs per second and p95**: PostgreSQL + Redis + ``ctxd serve --workers W`` started
   natively (ctxd_tools/native_stack.py), the Locust scenario (loadtests/locustfile.py) with 1, 2 and 4
   simulated agents replaying real traces as closed loops (no think time) for ``--seconds``
   each. GETs/s per worker = GETs/s / W.
2. **Memo hit rate with and without session affinity**: two single-worker servers on one
   PostgreSQL + Redis; ``--affinity-agents`` agents (ctxd_tools/loadgen.py) send every request of
   a session to the same server (pinned), then each request to a random one. The hit rate is
   ``ctxd_assembly_memo_total{result="hit"}`` / all, summed over both servers: the share of
   GETs whose session's previous request was served by the same process, which then reads
   only the new events instead of rebuilding the previous request from the database.

Figures depend on the machine: the header prints its cores and load average.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ctxd_tools.loadgen import Agents, run_locust
from ctxd_tools.native_stack import Ctxd, Postgres, Redis
from ctxd_tools.traces import traces_dir

TRACES = ("pvlib__pvlib-python-1072__reasoner", "pydicom__pydicom-901__chat", "marshmallow-code__marshmallow-1343__chat",
          "pvlib__pvlib-python-1154__chat")
GET = "/v1/sessions/[id]/request"


def _traces() -> list[Path]:
    return [traces_dir() / f"{name}.traj.json" for name in TRACES]


def _memo_counts(base: str) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{base}/metrics", timeout=30).text
    out = {"hit": 0.0, "miss": 0.0}
    for result, value in re.findall(r'^ctxd_assembly_memo_total\{result="(hit|miss)"\} ([0-9.e+]+)$', text, re.MULTILINE):
        out[result] += float(value)
    return out


def capacity(workers: list[int], agents: list[int], seconds: int, max_calls: int) -> list[dict[str, Any]]:
    rows = []
    with Postgres() as pg, Redis() as redis, tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            with Ctxd(workers=w, env={"CTXD_DATABASE_URL": pg.url, "CTXD_REDIS_URL": redis.url}) as server:
                for n in agents:
                    stats, _failed, _ = run_locust(server.base, users=n, seconds=seconds, traces=_traces(),
                                                  csv_prefix=Path(tmp) / f"w{w}-u{n}", max_calls=max_calls)
                    get, total = stats[GET], stats["Aggregated"]
                    rows.append({"workers": w, "agents": n, "gets_per_s": float(get["Requests/s"]),
                                 "gets_per_s_per_worker": float(get["Requests/s"]) / w,
                                 "get_p50_ms": float(get["50%"]), "get_p95_ms": float(get["95%"]),
                                 "requests_per_s": float(total["Requests/s"]), "failures": int(total["Failure Count"])})
                    print(_row(rows[-1]), flush=True)
    return rows


def affinity(agents: int, seconds: int, max_calls: int) -> list[dict[str, Any]]:
    rows = []
    with Postgres() as pg, Redis() as redis:
        env = {"CTXD_DATABASE_URL": pg.url, "CTXD_REDIS_URL": redis.url}
        with Ctxd(workers=1, env=env) as a, Ctxd(workers=1, env=env) as b:
            for routing in ("pinned", "random"):
                before = [_memo_counts(s.base) for s in (a, b)]
                run = Agents([a.base, b.base], _traces(), agents=agents, routing=routing, max_calls=max_calls,
                             seed=1).run(seconds)
                after = [_memo_counts(s.base) for s in (a, b)]
                hits = sum(x["hit"] - y["hit"] for x, y in zip(after, before))
                misses = sum(x["miss"] - y["miss"] for x, y in zip(after, before))
                s = run.summary()["request"]
                rows.append({"routing": routing, "gets": int(s["requests"]), "hits": int(hits), "misses": int(misses),
                             "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
                             "get_p50_ms": s["p50_ms"], "get_p95_ms": s["p95_ms"], "failures": int(s["failures"])})
                print(f"affinity {routing}: {rows[-1]}", flush=True)
    return rows


def _row(r: dict[str, Any]) -> str:
    return (f"| {r['workers']} | {r['agents']} | {r['gets_per_s']:.1f} | {r['gets_per_s_per_worker']:.1f} | "
            f"{r['get_p50_ms']:.0f} | {r['get_p95_ms']:.0f} | {r['requests_per_s']:.1f} | {r['failures']} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=30, help="seconds per Locust run (default %(default)s)")
    p.add_argument("--agents", default="1,2,4", help="simulated agents per run (default %(default)s)")
    p.add_argument("--workers", default="1,2", help="ctxd workers (default %(default)s)")
    p.add_argument("--max-calls", type=int, default=20, help="GETs per session before a new one (default %(default)s)")
    p.add_argument("--affinity-agents", type=int, default=4, help="agents of the memo measurement (default %(default)s)")
    p.add_argument("--affinity-seconds", type=int, default=30, help="seconds per routing (default %(default)s; 0: skip)")
    args = p.parse_args(argv)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at start; "
          f"Locust, the servers, PostgreSQL and Redis share these cores")
    print("| workers | agents | GETs/s | GETs/s per worker | GET p50 ms | GET p95 ms | all requests/s | failures |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    capacity([int(x) for x in args.workers.split(",")], [int(x) for x in args.agents.split(",")], args.seconds,
             args.max_calls)
    if args.affinity_seconds > 0:
        rows = affinity(args.affinity_agents, args.affinity_seconds, args.max_calls)
        print()
        print(f"memo hit rate, 2 single-worker servers, {args.affinity_agents} agents, {args.affinity_seconds} s each:")
        print("| routing | GETs | memo hits | misses | hit rate | GET p50 ms | GET p95 ms | failures |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['routing']} | {r['gets']} | {r['hits']} | {r['misses']} | {r['hit_rate']:.1%} | "
                  f"{r['get_p50_ms']:.0f} | {r['get_p95_ms']:.0f} | {r['failures']} |")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
