"""Snapshot and compare the read/write inference of ``app.adapters.bash_effects``.

The inference depends on the bash parser and its grammar version; this tool
pins down what it says on real commands so a change of parser (bashlex ->
tree-sitter-bash, issue 11) or of grammar version can be reviewed command by
command.

    # what the current code infers on every recorded command, one JSON line each
    .venv/bin/python tests/tools/bash_effects_compare.py dump out.jsonl.gz [--traces DIR]
    # agreement of two snapshots, and every differing command
    .venv/bin/python tests/tools/bash_effects_compare.py compare old.jsonl.gz new.jsonl.gz [--json]
    # agreement of a snapshot with the current code (dump + compare)
    .venv/bin/python tests/tools/bash_effects_compare.py compare old.jsonl.gz - [--json]

Commands run through :class:`SessionEffects` in trajectory order, as the
mini-swe-agent adapter runs them (so ``known_sources`` from earlier calls count).
Per command, three things are compared: the reads (artifact, range, tool,
writes_before, in order), the writes (artifact, tool, tree, and the sha256 of the
known content), and the unknown flag (``parsed`` False). ``artifacts``
agreement compares only the sets of artifacts read and written.

The snapshot of the last bashlex version (commit before the move to
tree-sitter) is ``tests/tools/bash_effects_bashlex.jsonl.gz``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.adapters.bash_effects import SessionEffects, command_of
from ctxd_tools.miniswe import load_trajectory
from tests.traces import TRACES_DIR

BASELINE = Path(__file__).with_name("bash_effects_bashlex.jsonl.gz")


def snapshot(traces_dir: Path = TRACES_DIR) -> Iterator[dict[str, Any]]:
    """One record per recorded bash call: ``trace``, ``index`` (call number in the
    trace), ``command``, ``parsed``, ``reason``, ``reads``, ``writes``, ``written``."""
    for path in sorted(traces_dir.glob("*.traj.json")):
        traj = load_trajectory(path)
        session = SessionEffects()
        index = 0
        for m in traj.messages:
            if m["role"] != "assistant":
                continue
            for tc in m.get("tool_calls") or []:
                command = command_of(tc["function"]["arguments"])
                call = session.run(command)
                eff = call.effects
                yield {
                    "trace": path.name.removesuffix(".traj.json"),
                    "index": index,
                    "command": command,
                    "parsed": eff.parsed,
                    "reason": eff.reason,
                    "reads": [[r.artifact, r.range, r.tool, r.writes_before] for r in eff.reads],
                    "writes": [[w.artifact, w.tool, w.tree,
                                None if w.content is None else hashlib.sha256(w.content.encode()).hexdigest()[:16]]
                               for w in eff.writes],
                    "written": list(call.written),
                }
                index += 1


def write_snapshot(out: Path, traces_dir: Path = TRACES_DIR) -> int:
    n = 0
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for rec in snapshot(traces_dir):
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            n += 1
    return n


def read_snapshot(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _artifacts(rec: dict[str, Any]) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(r[0] for r in rec["reads"]), frozenset(w[0] for w in rec["writes"])


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    """Agreement figures of two snapshots of the same commands, and the differing
    commands (``differences``: trace, index, command, and both sides)."""
    key = lambda r: (r["trace"], r["index"])
    a = {key(r): r for r in old}
    b = {key(r): r for r in new}
    if set(a) != set(b) or any(a[k]["command"] != b[k]["command"] for k in a):
        raise SystemExit("the snapshots are not over the same commands")
    n = len(a)
    same = {"reads": 0, "writes": 0, "unknown": 0, "all": 0, "artifacts": 0}
    diffs = []
    for k in sorted(a):
        x, y = a[k], b[k]
        r, w, u = x["reads"] == y["reads"], x["writes"] == y["writes"], x["parsed"] == y["parsed"]
        same["reads"] += r
        same["writes"] += w
        same["unknown"] += u
        same["all"] += r and w and u
        same["artifacts"] += u and _artifacts(x) == _artifacts(y)
        if not (r and w and u):
            diffs.append({"trace": k[0], "index": k[1], "command": x["command"],
                          "old": {f: x[f] for f in ("parsed", "reason", "reads", "writes")},
                          "new": {f: y[f] for f in ("parsed", "reason", "reads", "writes")}})

    def side(s: list[dict[str, Any]]) -> dict[str, int]:
        return {"parsed": sum(r["parsed"] for r in s), "with_read": sum(bool(r["reads"]) for r in s),
                "with_write": sum(bool(r["writes"]) for r in s),
                "write_events": sum(len(r["written"]) for r in s)}

    return {
        "commands": n,
        "same": same,
        "agreement": {f: round(v / n, 4) if n else 1.0 for f, v in same.items()},
        "old": side(old),
        "new": side(new),
        "differences": diffs,
    }


def _print(report: dict[str, Any]) -> None:
    n = report["commands"]
    print(f"commands: {n}")
    for f, v in report["same"].items():
        print(f"  same {f:9}: {v:5} / {n} = {v / n:.4f}")
    for s in ("old", "new"):
        print(f"  {s}: " + ", ".join(f"{k} {v}" for k, v in report[s].items()))
    for d in report["differences"]:
        print(f"\n--- {d['trace']} #{d['index']}")
        print("   " + d["command"][:400].replace("\n", "\n   "))
        for s in ("old", "new"):
            e = d[s]
            head = "parsed" if e["parsed"] else f"UNPARSED ({e['reason']})"
            print(f"  {s}: {head}")
            if d["old"]["reads"] != d["new"]["reads"]:
                print(f"     reads  {e['reads']}")
            if d["old"]["writes"] != d["new"]["writes"]:
                print(f"     writes {e['writes']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="snapshot the current inference")
    d.add_argument("out", type=Path)
    d.add_argument("--traces", type=Path, default=TRACES_DIR)
    c = sub.add_parser("compare", help="compare two snapshots ('-': the current code)")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=str)
    c.add_argument("--traces", type=Path, default=TRACES_DIR)
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if args.cmd == "dump":
        print(f"{write_snapshot(args.out, args.traces)} commands -> {args.out}")
        return 0
    new = list(snapshot(args.traces)) if args.new == "-" else read_snapshot(Path(args.new))
    report = compare(read_snapshot(args.old), new)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
