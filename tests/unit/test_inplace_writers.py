"""Writes found by rule, not only by list (app/adapters/bash_effects.py, "In-place writers by
rule"): perl / ruby ``-i``, formatters and fixers with their in-place switch, those that
rewrite by default, ``format`` / ``fmt`` / ``fix`` subcommands, launchers, and any program
run with a generic in-place switch; their check modes write nothing. Git forms that move the
tree from a start point are tree writes, and a ref is never taken for a file. Before: every
command below but the git path forms inferred no write (the peer faults kimchi#404, an edit
from stale text after ``perl -pi``, and Kiro#8035, ``git checkout -B release origin/release``
left every read current), and ``git checkout origin/main`` was a write of a file named
``origin/main``."""

from __future__ import annotations

import pytest

from app.adapters.bash_effects import SessionEffects, command_effects

WRITES = {
    "perl -pi -e 's/old/new/g' src/service.py": [("src/service.py", False)],
    "perl -i.bak -pe 's/a/b/' src/a.py src/b.py": [("src/a.py", False), ("src/b.py", False)],
    "perl -p -i -e 's/a/b/' conf/app.ini": [("conf/app.ini", False)],
    "ruby -i -pe 'gsub(/a/, \"b\")' lib/x.rb": [("lib/x.rb", False)],
    "npx prettier --write src/service.ts": [("src/service.ts", False)],
    "npx --yes prettier --write src/": [("src", True)],
    "pnpm dlx prettier -w a.css": [("a.css", False)],
    "yarn prettier --write a.js": [("a.js", False)],
    "gofmt -w main.go": [("main.go", False)],
    "goimports -w cmd/x/main.go": [("cmd/x/main.go", False)],
    "shfmt -w scripts/build.sh": [("scripts/build.sh", False)],
    "clang-format -i src/a.cc src/a.h": [("src/a.cc", False), ("src/a.h", False)],
    "eslint --fix src/a.js": [("src/a.js", False)],
    "npx eslint --fix .": [(".", True)],
    "rubocop -a app/models/user.rb": [("app/models/user.rb", False)],
    "codespell -w README.md": [("README.md", False)],
    "yq -i '.replicas = 3' deploy/values.yaml": [("deploy/values.yaml", False)],
    "rustfmt src/lib.rs": [("src/lib.rs", False)],
    "dos2unix run.sh": [("run.sh", False)],
    "sd 'old_name' 'new_name' src/x.py": [("src/x.py", False)],
    "cargo fmt": [(".", True)],
    "go fmt ./...": [(".", True)],
    "terraform fmt": [(".", True)],
    "biome format --write src": [("src", True)],
    "uv run ruff format a.py": [("a.py", False)],
    "uv tool run black x.py": [("x.py", False)],
    "mytool --fix src/a.py": [("src/a.py", False)],
    "somefixer --in-place=yes conf.toml": [("conf.toml", False)],
    # git: a start point moves the tree; a ref is never a file
    "git checkout -B release origin/release": [(".", True)],
    "git checkout -b topic v2.1.0": [(".", True)],
    "git switch -c x origin/y": [(".", True)],
    "git switch --detach v1.4.2": [(".", True)],
    "git checkout origin/main": [(".", True)],
    "git checkout v1.2.0": [(".", True)],
    "git checkout abc1234": [(".", True)],
    "git checkout HEAD~1 -- src/a.py": [("src/a.py", False)],
    "git checkout src/a.py": [("src/a.py", False)],
}

NO_WRITES = [
    "gofmt -l main.go", "gofmt -d main.go", "cargo fmt --check", "rustfmt --check src/lib.rs", "eslint src/a.js",
    "prettier --check src/a.ts", "npx prettier src/a.ts", "terraform fmt -check", "deno fmt --check",
    "perl -ne 'print if /x/' src/a.py", "perl script.pl data.txt", "ruby -e 'puts 1'", "grep --fix a.py",
    "git checkout -b feature", "yq '.a' c.yaml", "mdformat --check README.md", "sd -p a b x.py",
]


@pytest.mark.parametrize("command", sorted(WRITES))
def test_in_place_writers_write_what_they_name(command: str) -> None:
    effects = command_effects(command)
    assert effects.parsed, effects.reason
    assert [(w.artifact, w.tree) for w in effects.writes] == WRITES[command]


@pytest.mark.parametrize("command", NO_WRITES)
def test_check_modes_and_readers_write_nothing(command: str) -> None:
    assert command_effects(command).writes == ()


def test_a_session_artifact_without_a_suffix_is_a_path_not_a_ref() -> None:
    """``git checkout Makefile`` restores the file the session read; ``git checkout main``
    (never seen as an artifact) switches branches."""
    session = SessionEffects()
    session.run("cat Makefile")
    restored = session.run("git checkout Makefile")
    assert restored.written == ("Makefile",)
    switched = session.run("git checkout main")
    assert "main" not in switched.written and "Makefile" in switched.written, "a switch is a tree write"


def test_a_tree_write_from_a_start_point_marks_the_reads_it_covers() -> None:
    session = SessionEffects()
    session.run("cat src/service.py")
    session.run("cat README.md")
    moved = session.run("git checkout -B release origin/release")
    assert set(moved.written) == {"src/service.py", "README.md"}


def test_an_unknown_program_touches_what_it_names_that_the_session_met() -> None:
    """Fallback: a program ctxd neither knows as read-only nor interprets names artifacts
    (``CommandEffects.names``); the session keeps those it has met (``touched``), which make
    their reads possibly stale. Interpreters and test runners running a file, and readers,
    name nothing."""
    assert command_effects("codemod --rename a b src/a.py").names == ("src/a.py",)
    for command in ("python tools/x.py src/a.py", "pytest tests/test_a.py", "node x.js src/a.py", "make all",
                    "wc -l src/a.py", "sort src/a.py", "git log src/a.py"):
        assert command_effects(command).names == (), command
    session = SessionEffects()
    session.run("cat src/a.py")
    touched = session.run("codemod --rename a b src/a.py src/never_seen.py")
    assert touched.touched == ("src/a.py",) and touched.written == ()
