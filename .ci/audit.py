"""Vulnerability report for ctxd's runtime dependencies (issue 13 item 7; .ci/run phase
"pip-audit"). Reported, never blocking: always exits 0.

Usage: ``.venv/bin/python .ci/audit.py [--lock FILE] [--service pypi|osv] [--timeout SECONDS]``

Audits what the image installs: the hashed runtime lock ``requirements.lock`` (every
platform's pins), with ``pip-audit -r requirements.lock --require-hashes --disable-pip`` (no
resolution, no install). Without a lock file: the runtime closure (the same as
.ci/licenses.py: ``[project] dependencies`` transitively, not the test extra) pinned to the
installed versions, with ``--no-deps --disable-pip``. pip-audit asks the service
about each ``name==version``; a package the service cannot answer for is skipped. When every
package is skipped or pip-audit cannot reach the service at all, the report says the
vulnerability service is unreachable (e.g. a PyPI mirror without the per-version JSON API, or
no route to api.osv.dev) and CI continues, after a fallback: PyPI's project JSON
(``/pypi/<name>/json``) lists the known vulnerabilities of the project's latest release, so it
audits exactly the packages installed at their latest release and names the others.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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


def _project(name: str, timeout: float) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=timeout) as answer:
            data: dict[str, Any] = json.load(answer)
            return data
    except (OSError, ValueError):
        return None


def latest_release_fallback(closure: dict[str, str], *, timeout: float = 20.0) -> list[str]:
    """Lines auditing the packages of ``closure`` installed at their latest release with the
    ``vulnerabilities`` of PyPI's project JSON (which are the latest release's)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        projects = dict(zip(closure, pool.map(lambda n: _project(n, timeout), closure), strict=True))
    if not any(projects.values()):
        return ["fallback: PyPI's project JSON is unreachable too: nothing audited"]
    found = {n: p for n, p in projects.items() if p is not None}
    latest = {n: p for n, p in found.items() if p["info"]["version"] == closure[n]}
    older = [f"{n} {closure[n]} (latest {p['info']['version']})" for n, p in found.items() if n not in latest]
    older += [f"{n} {closure[n]} (no answer)" for n in closure if n not in found]
    lines = []
    for name, project in latest.items():
        for v in project.get("vulnerabilities") or []:
            fixes = ", ".join(v.get("fixed_in") or []) or "no fix released"
            lines.append(f"VULNERABLE {name} {closure[name]}: {v.get('id')}; fixed in {fixes}")
    vulnerable = len({line.split()[1] for line in lines})
    lines.append(f"fallback (PyPI project JSON): {len(latest)} of {len(closure)} packages are at their latest "
                 f"release and audited: {len(lines)} known vulnerabilities in {vulnerable} packages; "
                 f"{len(older)} not auditable here (an older release): {', '.join(older) or 'none'}")
    return lines


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def lock_pins(text: str) -> dict[str, str]:
    """{name: version} of a pip-compile / uv lock's ``name==version`` lines (markers and
    hashes ignored)."""
    return dict(_PIN.findall(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dist", default="ctxd")
    parser.add_argument("--lock", type=Path, default=Path(__file__).resolve().parents[1] / "requirements.lock")
    parser.add_argument("--service", default="pypi", choices=("pypi", "osv"))
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    exe = Path(sys.executable).with_name("pip-audit")
    with tempfile.TemporaryDirectory() as tmp:
        if args.lock.is_file():
            closure = lock_pins(args.lock.read_text())
            source = [str(args.lock), "--require-hashes"]
            print(f"auditing {args.lock.name}: {len(closure)} pinned runtime packages")
        else:
            closure = runtime_closure(args.dist)
            req = Path(tmp) / "runtime.txt"
            req.write_text("".join(f"{n}=={v}\n" for n, v in closure.items()))
            source = [str(req), "--no-deps"]
            print(f"no {args.lock.name}: auditing the installed runtime closure ({len(closure)} packages)")
        cmd = [str(exe), "-s", args.service, "-r", *source, "--disable-pip",
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
        report = None
    lines = summarize(report, len(closure)) if report is not None else []
    for line in lines:
        print(line)
    if report is None or any(line.startswith("vulnerability service unreachable") for line in lines):
        for line in latest_release_fallback(closure):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
