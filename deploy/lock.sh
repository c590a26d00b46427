#!/usr/bin/env bash
# Regenerate the hashed lock files from pyproject.toml (needs PyPI):
#
#   bash deploy/lock.sh              # keep the current pins where pyproject allows them
#   bash deploy/lock.sh --upgrade    # newest versions pyproject allows (then run the
#                                    # all-traces exactness test before committing)
#
# requirements.lock      the service's runtime dependencies: the image installs it
# requirements-dev.lock  runtime + the test, eval and load extras, constrained to the same
#                        runtime pins: .ci/run installs it
# requirements-build.lock  pyproject's [build-system] requires (setuptools, wheel): the image
#                        builds ctxd's wheel with them, --no-build-isolation (nothing unpinned)
# clients/python/examples-min.lock  the lowest openai and anthropic the client's `examples`
#                        extra allows, on top of requirements-dev.lock (.ci/run tests the
#                        client's SDK tests with them): bash deploy/lock-examples-min.sh
# Both universal for CPython 3.11 (environment markers where a dependency is platform-
# specific), with the hashes of every file of each pinned version: the same lock installs
# on x86_64 and aarch64. tests/unit/test_lock.py checks that they agree with pyproject.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
UV="${UV:-$(command -v uv || echo .venv/bin/uv)}"
[[ -x "$UV" ]] || { echo "uv not found: pip install uv (or UV=/path/to/uv)" >&2; exit 2; }
common=(--generate-hashes --universal --python-version 3.11 --no-annotate
        --custom-compile-command "bash deploy/lock.sh" --quiet)
"$UV" pip compile pyproject.toml "${common[@]}" -o requirements.lock "$@"
"$UV" pip compile pyproject.toml --extra test --extra eval --extra load -c requirements.lock "${common[@]}" \
    -o requirements-dev.lock "$@"
build_in="$(mktemp)"
trap 'rm -f "$build_in"' EXIT
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
    > "$build_in"
"$UV" pip compile "$build_in" "${common[@]}" -o requirements-build.lock "$@"
# after requirements-dev.lock: its pins are the min lock's constraints
UV="$UV" bash deploy/lock-examples-min.sh "$@"
echo "wrote requirements.lock ($(grep -c '^[a-z0-9]' requirements.lock) packages)" \
     "requirements-dev.lock ($(grep -c '^[a-z0-9]' requirements-dev.lock) packages)" \
     "and requirements-build.lock ($(grep -c '^[a-z0-9]' requirements-build.lock) packages)"
