"""What the bash walker knows of programs by name: readers, wrappers, the simple writers
``xargs`` and ``find -exec`` run, the formatters, the in-place writers by rule
(:data:`_INPLACE`, :data:`_GENERIC_RULE`; module docstring of :mod:`app.adapters.bash_effects`,
"In-place writers by rule"), the programs known read-only, the runners and the launchers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

_READERS: Final = frozenset({"cat", "tac", "nl", "less", "more", "wc", "hexdump", "xxd", "od", "strings"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_WRAPPERS: Final = frozenset({"time", "nohup", "command", "exec", "builtin", "sudo", "nice", "stdbuf"})
_SIMPLE_WRITERS: Final = frozenset({"rm", "mv", "cp", "tee", "touch", "patch", "truncate", "dd"})
_FORMATTERS: Final = frozenset({"black", "isort", "autopep8", "yapf", "ruff", "sqlfluff"})


@dataclass(frozen=True)
class _InPlace:
    """How a program rewrites the files it names: ``switches`` (option names, short or long,
    that make it write in place), ``default`` (it writes unless a ``checks`` option asks it to
    only check), ``subcommands`` (it writes only under one of these first words), ``takes`` /
    ``long_takes`` / ``attached`` (options with a value, as :func:`_options` takes them),
    ``script_first`` (perl / ruby: without ``-e`` the first operand is the program), ``skip``
    (leading operands that are not files: ``sd FIND REPLACE FILE...``), ``tree_default`` (no
    file operand: it rewrites the working directory's tree, ``cargo fmt``)."""

    switches: frozenset[str] = frozenset()
    default: bool = False
    checks: frozenset[str] = frozenset()
    subcommands: frozenset[str] = frozenset()
    takes: str = ""
    long_takes: tuple[str, ...] = ()
    attached: str = ""
    script_first: bool = False
    skip: int = 0
    tree_default: bool = False


def _rule(switches: str = "", *, checks: str = "", subcommands: str = "", **kw: Any) -> _InPlace:
    return _InPlace(switches=frozenset(switches.split()), checks=frozenset(checks.split()),
                    subcommands=frozenset(subcommands.split()), **kw)


_COMMON_TAKES = ("config", "c", "ignore-path", "parser", "plugin", "log-level", "ext", "rule", "format", "output",
                 "cache-location", "config-path", "style", "resolve-plugins-relative-to", "max-warnings")
_FMT_CHECKS = "check c l list-different diff dry-run dryrun n lint"
#: programs that rewrite the files they name (module docstring, "In-place writers by rule")
_INPLACE: dict[str, _InPlace] = {
    "perl": _rule("i", takes="eEIMmlx0C", attached="i", script_first=True),
    "ruby": _rule("i", takes="eIrEC", attached="i", script_first=True),
    "prettier": _rule("write w", long_takes=_COMMON_TAKES),
    "gofmt": _rule("w", takes="r"), "goimports": _rule("w", takes="local"),
    "shfmt": _rule("w write", takes="ilf"),
    "clang-format": _rule("i", long_takes=("style", "assume-filename")),
    "eslint": _rule("fix", takes="fc", long_takes=_COMMON_TAKES),
    "stylelint": _rule("fix", long_takes=_COMMON_TAKES), "standard": _rule("fix"), "xo": _rule("fix"),
    "markdownlint": _rule("fix", takes="c", long_takes=_COMMON_TAKES),
    "rubocop": _rule("a A x autocorrect auto-correct autocorrect-all auto-correct-all fix-layout",
                     long_takes=_COMMON_TAKES),
    "codespell": _rule("w write-changes", takes="LSI"),
    "yq": _rule("i inplace", skip=1), "autoflake": _rule("i in-place"), "docformatter": _rule("i in-place"),
    "google-java-format": _rule("i replace"), "ktlint": _rule("F format"), "djlint": _rule("reformat"),
    "rustfmt": _rule(default=True, checks="check emit", long_takes=("edition", "config-path", "emit")),
    "mdformat": _rule(default=True, checks="check"), "pyupgrade": _rule(default=True),
    "add-trailing-comma": _rule(default=True), "reorder-python-imports": _rule(default=True),
    "swiftformat": _rule(default=True, checks="lint dryrun"), "buildifier": _rule(default=True, checks="mode"),
    "dos2unix": _rule(default=True, checks="n newfile"), "unix2dos": _rule(default=True, checks="n newfile"),
    "sponge": _rule(default=True, checks="a"), "ed": _rule(default=True), "ex": _rule(default=True),
    "sd": _rule(default=True, checks="p preview", takes="f", skip=2),
    "cargo": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt fix", tree_default=True),
    "go": _rule(default=True, checks="n", subcommands="fmt", tree_default=True),
    "deno": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt", tree_default=True),
    "dprint": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt", tree_default=True),
    "terraform": _rule(default=True, checks="check diff", subcommands="fmt", tree_default=True),
    "tofu": _rule(default=True, checks="check diff", subcommands="fmt", tree_default=True),
    "taplo": _rule(default=True, checks=_FMT_CHECKS, subcommands="fmt format", tree_default=True),
    "dotnet": _rule(default=True, checks="verify-no-changes", subcommands="format", tree_default=True),
    "mix": _rule(default=True, checks="check-formatted", subcommands="format", tree_default=True),
    "biome": _rule("write apply apply-unsafe fix", subcommands="format check lint", tree_default=True),
    "php-cs-fixer": _rule(default=True, checks="dry-run", subcommands="fix", tree_default=True),
}
#: the generic rule: any other program run with one of these switches rewrites what it names
_GENERIC_SWITCHES: Final = frozenset({"--write", "--fix", "--in-place", "--inplace", "--replace", "--overwrite"})
_GENERIC_RULE: Final = _rule("write fix in-place inplace replace overwrite", long_takes=_COMMON_TAKES)
#: programs known not to write the files they name, whatever their options (``grep --fix`` is no such thing)
_READ_ONLY: Final = frozenset({*_READERS, "ls", "echo", "printf", "grep", "rg", "ag", "which", "type", "stat", "file",
                               "du", "df", "pwd", "env", "date", "true", "false", "test", "[", "pip", "npm", "node",
                               "pytest", "tox", "nox", "make", "curl", "wget", "jq", "diff"})
#: interpreters, test runners and build tools: running a file (``python x.py``, ``pytest
#: tests/x.py``, ``node app.js``, ``make target``) does not count as naming it for a write
_RUNNERS: Final = frozenset({"python", "python3", "pytest", "py.test", "node", "deno", "bun", "ruby", "perl", "php",
                             "java", "javac", "go", "cargo", "rustc", "gcc", "g++", "cc", "clang", "clang++", "make",
                             "cmake", "ninja", "tox", "nox", "jest", "mocha", "vitest", "rspec", "phpunit", "dotnet",
                             "mvn", "gradle", "./gradlew", "gradlew", "tsc", "ts-node", "tsx", "coverage", "mypy",
                             "pyright", "pylint", "flake8", "ruff", "black", "isort", "bandit", "pip", "pip3",
                             "conda", "docker", "kubectl", "helm", "ssh", "scp", "rsync", "git", "svn", "hg",
                             "bazel", "buck", "lua", "Rscript", "julia", "swift", "kotlin", "scala", "elixir",
                             "erl", "ghc", "stack", "timeout", "watch", "strace", "valgrind", "gdb", "cd", "export",
                             "set", "unset", "alias", "source", "exit", "sleep", "kill", "ps", "chmod", "chown",
                             "ln", "mkdir", "rmdir", "tar", "zip", "unzip", "gzip", "gunzip", "xz", "open",
                             "code", "vim", "vi", "nano", "emacs", "less", "more", "man", "help", "history",
                             "sort", "uniq", "cut", "tr", "paste", "join", "column", "fold", "fmt", "expand",
                             "basename", "dirname", "realpath", "readlink", "md5sum", "sha256sum", "sha1sum",
                             "base64", "locate", "tree", "whereis", "id", "whoami", "uname", "hostname"})
#: launchers that run a program named after them; those listed here need the subcommand first
_LAUNCHERS: Final = frozenset({"npx", "bunx", "pnpx", "uvx", "pnpm", "yarn", "bun", "pipx", "poetry", "uv", "pdm",
                               "npm", "hatch", "rye"})
_LAUNCH_SUBCOMMANDS: Final = {"pnpm": frozenset({"dlx", "exec"}), "yarn": frozenset({"dlx", "exec"}),
                              "bun": frozenset({"x"}), "pipx": frozenset({"run"}), "poetry": frozenset({"run"}),
                              "uv": frozenset({"run", "tool"}), "pdm": frozenset({"run"}), "npm": frozenset({"exec"}),
                              "hatch": frozenset({"run"}), "rye": frozenset({"run"})}
