"""Vulnerability report for ctxd's runtime dependencies (issue 13 item 7; .ci/run phase
"pip-audit"). Reported, never blocking: always exits 0.

Usage: ``.venv/bin/python .ci/audit.py [--service pypi|osv] [--timeout SECONDS]``

Audits the runtime closure (the same as .ci/licenses.py: ``[project] dependencies``
transitively, not the test extra), pinned to the installed versions, with
``pip-audit --no-deps --disable-pip`` (no resolution, no install). pip-audit asks the service
about each ``name==version``; a package the service cannot answer for is skipped. When every
package is skipped or pip-audit cannot reach the service at all, the report says the
vulnerability service is unreachable (e.g. a PyPI mirror without the per-version JSON API, or
no route to api.osv.dev) and CI continues.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from licenses import runtime_closure


def summarize(report: dict[str, Any], total: int) -> list[str]:
    """Lines for pip-audit's JSON ``report`` over ``total`` packages."""
    deps = report.get("dependencies", [])
    skipped = [d for d in deps if d.get("skip_reason")]
    audited = [d for d in deps if not d.get("skip_reason")]
    vulnerable = [d for d in audited if d.get("vulns")]
    lines = []
    for dep in vulnerable:
        for v in dep["vulns"]:
            fixes = ", ".join(v.get("fix_versions") or []) or "no fix released"
            aliases = ", ".join(v.get("aliases") or [])
            lines.append(f"VULNERABLE {dep['name']} {dep.get('version', '')}: {v['id']}"
                         f"{f' ({aliases})' if aliases else ''}; fixed in {fixes}")
    if total and not audited:
        reason = skipped[0]["skip_reason"] if skipped else "no answer"
        lines.append(f"vulnerability service unreachable: 0 of {total} packages audited ({reason})")
    else:
        lines.append(f"{len(audited)} of {total} runtime packages audited, {len(skipped)} skipped, "
                     f"{sum(len(d['vulns']) for d in vulnerable)} known vulnerabilities in {len(vulnerable)} packages")
        lines += [f"skipped {d['name']}: {d['skip_reason']}" for d in skipped]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dist", default="ctxd")
    parser.add_argument("--service", default="pypi", choices=("pypi", "osv"))
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    closure = runtime_closure(args.dist)
    exe = Path(sys.executable).with_name("pip-audit")
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "runtime.txt"
        req.write_text("".join(f"{n}=={v}\n" for n, v in closure.items()))
        cmd = [str(exe), "-s", args.service, "-r", str(req), "--no-deps", "--disable-pip",
               "--progress-spinner", "off", "-f", "json"]
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"vulnerability service unreachable: pip-audit timed out after {args.timeout:.0f} s")
            return 0
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"vulnerability service unreachable: pip-audit exited {done.returncode}: {last[:300]}")
        return 0
    for line in summarize(report, len(closure)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
