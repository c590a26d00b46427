#!/usr/bin/env bash
# Regenerate clients/python/examples-min.lock (needs PyPI; deploy/lock.sh runs it last):
#
#   bash deploy/lock-examples-min.sh
#
# The lowest SDK versions the client's `examples` extra allows (clients/python/pyproject.toml:
# `openai>=A`, `anthropic>=B`, resolved with uv's lowest-direct resolution), with the other
# packages at requirements-dev.lock's pins, hashed, universal for CPython 3.11. It holds only
# what differs from requirements-dev.lock (the two SDKs and any dependency of theirs that the
# dev lock lacks or pins differently), so it installs with --require-hashes on top of it:
#
#   pip install --require-hashes --no-deps -r requirements-dev.lock
#   pip install --no-deps -e . -e clients/python
#   pip install --require-hashes --no-deps -r clients/python/examples-min.lock
#
# .ci/run's phase "client SDK tests at the examples extra's lowest versions" does that in a
# second venv and runs the SDK tests of tests/client against it. Raise a lower bound in
# clients/python/pyproject.toml, then run this script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV="${UV:-$(command -v uv || echo .venv/bin/uv)}"
[[ -x "$UV" ]] || { echo "uv not found: pip install uv (or UV=/path/to/uv)" >&2; exit 2; }
OUT=clients/python/examples-min.lock
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# requirements-dev.lock as constraints (name==version ; marker, no hashes), without the
# packages the examples extra names: those are resolved to their lowest allowed versions.
python3 - requirements-dev.lock clients/python/pyproject.toml >"$tmp/constraints.txt" <<'EOF'
import re, sys, tomllib
lock, pyproject = sys.argv[1:]
extra = tomllib.load(open(pyproject, "rb"))["project"]["optional-dependencies"]["examples"]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
skip = {norm(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in extra}
for entry in re.sub(r"\\\n", " ", open(lock).read()).splitlines():
    entry = re.sub(r"\s--hash=\S+", "", entry.split(" #", 1)[0]).strip()
    if entry and not entry.startswith("#") and norm(entry.split("==", 1)[0]) not in skip:
        print(entry)
EOF

"$UV" pip compile clients/python/pyproject.toml --extra examples --resolution lowest-direct \
    -c "$tmp/constraints.txt" --generate-hashes --universal --python-version 3.11 --no-annotate \
    --custom-compile-command "bash deploy/lock-examples-min.sh" --quiet -o "$tmp/full.lock" "$@"

# Keep uv's header and the entries requirements-dev.lock does not hold as they are.
python3 - "$tmp/full.lock" requirements-dev.lock >"$tmp/min.lock" <<'EOF'
import re, sys
full, dev = (open(p).read() for p in sys.argv[1:])
def entries(text):
    """[(name==version ; marker, the entry's text)] of a hashed requirements file."""
    blocks: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if re.match(r"[A-Za-z0-9]", line):
            blocks.append([line])
        elif blocks and line[:1].isspace():
            blocks[-1].append(line)  # a continuation line: --hash=...
    return [(b[0].rstrip().rstrip("\\").strip(), "".join(b)) for b in blocks]
header = "".join(line for line in full.splitlines(keepends=True)
                 if line.startswith("#") and not line.startswith("#    via"))
same = {key for key, _ in entries(dev)}
kept = [block for key, block in entries(full) if key not in same]
sys.stdout.write(header + "# Only what differs from requirements-dev.lock: install it on top of that lock\n"
                 "# (pip install --require-hashes --no-deps -r clients/python/examples-min.lock).\n" + "".join(kept))
EOF
mv "$tmp/min.lock" "$OUT"
echo "wrote $OUT ($(grep -c '^[a-z0-9]' "$OUT") packages: $(grep -o '^[a-z0-9][^ ;]*' "$OUT" | tr '\n' ' '))"
