"""Licence gate for ctxd's runtime dependencies (issue 13 item 7; .ci/run phase "licences").

Usage: ``.venv/bin/python .ci/licenses.py [--dist ctxd] [--requirements-out FILE]``

1. The runtime closure: the installed distribution's ``Requires-Dist`` (its ``[project]
   dependencies``, without the ``test``/``load`` extras), followed transitively through the
   installed metadata, markers evaluated for this interpreter and extras honoured
   (``uvicorn[standard]`` pulls uvloop, httptools, ...).
2. ``pip-licenses --from=mixed --format=json --packages <closure>`` gives each package's
   licence (SPDX ``License-Expression`` when the package declares one, else its classifiers or
   ``License`` field).
3. Policy, printed as a table:
   - ``forbidden``: GPL or AGPL (any version) with no permissive alternative offered. ctxd is
     MIT and ships as one image: a strong-copyleft runtime dependency would put the image
     under the GPL.
   - ``weak copyleft (allowed)``: LGPL, MPL. Used as unmodified Python libraries loaded
     dynamically (psycopg is LGPL-3.0); the obligations (keep the notice, allow the library
     to be replaced) are met by installing it as a separate, replaceable package.
   - ``unknown``: no licence metadata; reported, not failing (checked by hand: listed below).
   - ``permissive``: everything else (MIT, BSD, Apache-2.0, ISC, PSF, Unlicense, ...).
   A package offering alternatives (``MIT OR GPL-2.0``; several classifiers, which
   pip-licenses joins with ``; ``) takes the most permissive one.
Exit status 1 when any runtime package is ``forbidden``, else 0. ``--requirements-out`` writes
the closure pinned (``name==version``), which the pip-audit phase audits.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PERMISSIVE = "permissive"
WEAK = "weak copyleft (allowed)"
UNKNOWN = "unknown"
FORBIDDEN = "forbidden"
_RANK = {PERMISSIVE: 0, WEAK: 1, UNKNOWN: 2, FORBIDDEN: 3}

_WEAK_RE = re.compile(r"\bLGPL|Lesser General Public|Library General Public|\bMPL\b|Mozilla Public", re.IGNORECASE)
_STRONG_RE = re.compile(r"\bA?GPL|General Public License|Affero", re.IGNORECASE)
_UNKNOWN_RE = re.compile(r"^\s*(UNKNOWN|)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    license: str
    verdict: str


def classify_one(text: str) -> str:
    """The verdict for one licence (an SPDX id or a classifier's text)."""
    if _UNKNOWN_RE.match(text):
        return UNKNOWN
    if _WEAK_RE.search(text):  # before strong: "GNU Lesser General Public License" names GPL too
        return WEAK
    if _STRONG_RE.search(text):
        return FORBIDDEN
    return PERMISSIVE


def classify(license_text: str) -> str:
    """The verdict for a package's licence string. Alternatives take the most permissive
    (``;`` between classifiers, ``OR`` in an SPDX expression), ``AND`` the strictest, with
    SPDX precedence (AND binds tighter than OR) and parentheses:
    ``MPL-2.0 AND (Apache-2.0 OR MIT)`` -> weak copyleft; ``GPL-2.0 OR MIT`` -> permissive."""
    text = " ".join(license_text.split())
    if _UNKNOWN_RE.match(text):
        return UNKNOWN
    if ";" in text:  # classifiers: the package offers each of them
        return min((classify(a) for a in text.split(";") if a.strip()), key=_RANK.__getitem__, default=UNKNOWN)
    if not re.search(r"\s(?:AND|OR|WITH)\s|[()]", text):
        return classify_one(text)
    tokens = re.findall(r"\(|\)|[^\s()]+", text)
    pos = 0

    def expr() -> str:  # expr := term (OR term)*
        nonlocal pos
        verdicts = [term()]
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            verdicts.append(term())
        return min(verdicts, key=_RANK.__getitem__)

    def term() -> str:  # term := atom ((AND | WITH) atom)*
        nonlocal pos
        verdicts = [atom()]
        while pos < len(tokens) and tokens[pos] in ("AND", "WITH"):
            with_exception = tokens[pos] == "WITH"
            pos += 1
            verdict = atom()
            if not with_exception:  # "GPL-2.0 WITH Classpath-exception-2.0": the exception only relaxes
                verdicts.append(verdict)
        return max(verdicts, key=_RANK.__getitem__)

    def atom() -> str:  # atom := "(" expr ")" | words up to the next operator
        nonlocal pos
        if pos < len(tokens) and tokens[pos] == "(":
            pos += 1
            verdict = expr()
            pos += 1  # ")"
            return verdict
        words = []
        while pos < len(tokens) and tokens[pos] not in ("AND", "OR", "WITH", "(", ")"):
            words.append(tokens[pos])
            pos += 1
        return classify_one(" ".join(words))

    return expr()


def runtime_closure(dist: str) -> dict[str, str]:
    """{canonical name: installed version} of ``dist``'s runtime requirements, transitively,
    ``dist`` itself excluded. Raises PackageNotFoundError when a required package is missing."""
    seen: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(dist, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        d = metadata.distribution(name)
        if canonicalize_name(name) != canonicalize_name(dist):
            seen[canonicalize_name(d.metadata["Name"])] = d.version
        for raw in d.requires or []:
            req = Requirement(raw)
            if req.marker is not None and not any(
                    req.marker.evaluate({"extra": e}) for e in (extras or {""})):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return dict(sorted(seen.items()))


def licences(packages: dict[str, str]) -> list[Package]:
    """Each package of ``packages`` with its licence (pip-licenses) and verdict."""
    exe = Path(sys.executable).with_name("pip-licenses")
    done = subprocess.run([str(exe), "--from=mixed", "--format=json", "--packages", *packages],
                          check=True, capture_output=True, text=True)
    rows = {canonicalize_name(r["Name"]): r for r in json.loads(done.stdout)}
    out = []
    for name, version in packages.items():
        row = rows.get(canonicalize_name(name))
        text = " ".join(str(row["License"] if row else "UNKNOWN").split())
        out.append(Package(name, version, text, classify(text)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dist", default="ctxd")
    parser.add_argument("--requirements-out", type=Path)
    args = parser.parse_args(argv)
    closure = runtime_closure(args.dist)
    if args.requirements_out:
        args.requirements_out.write_text("".join(f"{n}=={v}\n" for n, v in closure.items()))
    lines, status = report(licences(closure))
    print("\n".join(lines))
    return status


def report(table: list[Package]) -> tuple[list[str], int]:
    """The printed table, a summary line and, when any package is forbidden, a line naming
    every one of them (not only the first); the exit status (1 when any is forbidden)."""
    width = max((len(p.name) for p in table), default=7)
    vwidth = max((len(p.version) for p in table), default=7)
    lines = [f"{'package':<{width}}  {'version':<{vwidth}}  {'verdict':<24} licence"]
    for p in table:
        lic = p.license if len(p.license) <= 90 else p.license[:87] + "..."
        lines.append(f"{p.name:<{width}}  {p.version:<{vwidth}}  {p.verdict:<24} {lic}")
    counts = {v: sum(p.verdict == v for p in table) for v in _RANK}
    lines.append(f"{len(table)} runtime packages: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    bad = [p for p in table if p.verdict == FORBIDDEN]
    if bad:
        lines.append("GPL/AGPL in the runtime dependencies: " + ", ".join(f"{p.name} ({p.license})" for p in bad))
        return lines, 1
    return lines, 0


if __name__ == "__main__":
    sys.exit(main())
