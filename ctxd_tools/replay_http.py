"""``ctxd replay``: drive a running ctxd server with a recorded mini-swe-agent trajectory.

Creates a session from the trajectory, posts its events in order and, wherever
the real agent called its model, GETs the request ctxd would send instead. The
report puts ctxd's per-call token counts (from the manifest) beside the
provider's real usage recorded in the file; the provider counted with a
different tokenizer (DeepSeek's), so its numbers are a reference, not a target.

Usable from tests: ``run_replay(path, base_url, client=<httpx.Client>)`` with a
client bound to the ASGI app (e.g. starlette's ``TestClient``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from ctxd_tools.miniswe import (
    DEFAULT_PROFILE,
    ModelCall,
    PostEvents,
    UsageTotals,
    load_trajectory,
    provider_usage_totals,
    replay_plan,
    session_create_body,
)

__all__ = [
    "CallRow",
    "ReplayConnectionError",
    "ReplayError",
    "ReplayProblem",
    "ReplayReport",
    "print_report",
    "run_replay",
    "write_json",
]

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=5.0)


# --------------------------------------------------------------------------- errors


class ReplayError(Exception):
    """Base class of replay failures (the CLI prints them and exits non-zero)."""


class ReplayConnectionError(ReplayError):
    """The server could not be reached."""

    def __init__(self, base_url: str, cause: Exception) -> None:
        self.base_url = base_url
        super().__init__(
            f"cannot connect to ctxd at {base_url} ({cause}). "
            "Is the server running? Start it with `ctxd serve` "
            "(or pass --url with the right address)."
        )


class ReplayProblem(ReplayError):
    """The server answered with an error (``application/problem+json`` when it can).

    ``problem`` holds the decoded body (``type``, ``title``, ``status``, ``detail``,
    extension members); for a non-JSON body it holds ``{"status", "detail": text}``.
    """

    def __init__(self, method: str, url: str, status: int, problem: dict[str, Any]) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.problem = problem
        title = problem.get("title") or "error"
        detail = problem.get("detail")
        msg = f"{method} {url} -> {status} {title}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class CallRow:
    """One model call: ctxd's counts (tokens, from the manifest) + the provider's. ``call``:
    its number, from 1 in the trace's order (as the inspector, /ui, numbers calls)."""

    call: int
    failed_call: bool
    request_tokens: int | None
    root: int | None
    trunk: int | None
    leaf: int | None
    system: int | None
    tools: int | None
    task_state: int | None
    observations: int | None
    elided_tokens: int | None
    elided_count: int
    predicted_cached_tokens: int | None
    input_limit: int | None
    provider_prompt_tokens: int | None
    provider_prompt_cache_hit_tokens: int | None
    provider_prompt_cache_miss_tokens: int | None


@dataclass(frozen=True)
class ReplayReport:
    trajectory: str
    instance_id: str
    model: str | None
    exit_status: str
    session_id: str
    profile: str
    format: str
    events_posted: int
    rows: tuple[CallRow, ...]
    ctxd_totals: dict[str, int | None]
    provider_totals: dict[str, Any]
    notes: tuple[str, ...] = field(default=())
    base_url: str = ""  # the server replayed against (printed links are absolute)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _row(step: ModelCall, body: dict[str, Any]) -> CallRow:
    manifest = _dict(body.get("manifest") if isinstance(body, dict) else None)
    tokens = _dict(manifest.get("tokens"))
    by_zone = _dict(tokens.get("by_zone"))
    by_role = _dict(tokens.get("by_role"))
    budget = _dict(manifest.get("budget"))
    cache = _dict(manifest.get("cache"))
    elided = found if isinstance(found := manifest.get("elided"), list) else []
    elided_tokens = _int(manifest.get("elided_tokens"))
    if elided_tokens is None and elided:
        elided_tokens = sum(_int(e.get("tokens")) or 0 for e in elided if isinstance(e, dict))
    u = step.usage
    return CallRow(
        call=step.index + 1,
        failed_call=step.failed,
        request_tokens=_int(tokens.get("total")),
        root=_int(by_zone.get("root")),
        trunk=_int(by_zone.get("trunk")),
        leaf=_int(by_zone.get("leaf")),
        system=_int(by_role.get("system")),
        tools=_int(by_role.get("tools")),
        task_state=_int(by_role.get("task_state")),
        observations=_int(by_role.get("observations")),
        elided_tokens=elided_tokens,
        elided_count=len(elided),
        predicted_cached_tokens=_int(cache.get("predicted_cached_tokens")),
        input_limit=_int(budget.get("input_limit")),
        provider_prompt_tokens=u.prompt_tokens if u else None,
        provider_prompt_cache_hit_tokens=u.prompt_cache_hit_tokens if u else None,
        provider_prompt_cache_miss_tokens=u.prompt_cache_miss_tokens if u else None,
    )


def _sum(rows: tuple[CallRow, ...], attr: str) -> int | None:
    vals = [getattr(r, attr) for r in rows if getattr(r, attr) is not None]
    return sum(vals) if vals else None


def _ctxd_totals(rows: tuple[CallRow, ...]) -> dict[str, int | None]:
    return {
        "calls": len(rows),
        "request_tokens": _sum(rows, "request_tokens"),
        "elided_tokens": _sum(rows, "elided_tokens"),
        "predicted_cached_tokens": _sum(rows, "predicted_cached_tokens"),
        "max_request_tokens": max(
            (r.request_tokens for r in rows if r.request_tokens is not None), default=None
        ),
    }


def _provider_totals(t: UsageTotals) -> dict[str, Any]:
    return {
        **t.as_dict(),
        "note": "for reference only: a different tokenizer (the provider's), "
        "counted on the agent's append-only transcript",
    }


# --------------------------------------------------------------------------- HTTP


def _problem(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        body.setdefault("status", resp.status_code)
        return body
    text = resp.text.strip()
    return {"status": resp.status_code, "title": resp.reason_phrase or "error", "detail": text[:2000]}


def _call(
    client: httpx.Client,
    method: str,
    url: str,
    base_url: str,
    *,
    ok: tuple[int, ...],
    json_body: Any = None,
    params: dict[str, str] | None = None,
) -> dict[str, Any]:
    try:
        resp = client.request(method, url, json=json_body, params=params)
    except httpx.ConnectError as exc:
        raise ReplayConnectionError(base_url or str(client.base_url), exc) from exc
    except httpx.TimeoutException as exc:
        raise ReplayError(f"{method} {url}: timed out ({exc.__class__.__name__})") from exc
    except httpx.HTTPError as exc:
        raise ReplayError(f"{method} {url}: {exc}") from exc
    if resp.status_code not in ok:
        raise ReplayProblem(method, url, resp.status_code, _problem(resp))
    try:
        body = resp.json()
    except ValueError as exc:
        raise ReplayError(f"{method} {url}: response is not JSON: {resp.text[:200]!r}") from exc
    if not isinstance(body, dict):
        raise ReplayError(f"{method} {url}: expected a JSON object, got {type(body).__name__}")
    return body


def run_replay(
    path: str | Path,
    base_url: str,
    *,
    profile: str = DEFAULT_PROFILE,
    fmt: str = "openai",
    client: httpx.Client | None = None,
    progress: bool = True,
    timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    api_key: str | None = None,
) -> ReplayReport:
    """Replay the trajectory at ``path`` against the server at ``base_url``.

    ``client``: an ``httpx.Client`` to use (not closed here); by default one is
    made with ``timeout`` (and ``api_key`` sent as ``Authorization: Bearer``). ``base_url`` may be ``""`` when ``client`` has its own
    base URL. ``progress`` shows a rich progress bar on stderr.

    Raises ``TrajectoryFormatError`` / ``OSError`` (bad file), ``ReplayConnectionError``
    (server unreachable), ``ReplayProblem`` (server error response), ``ReplayError``.
    """
    traj = load_trajectory(path)
    plan = replay_plan(traj)
    body = session_create_body(traj, profile=profile)
    base = base_url.rstrip("/")
    own_client = client is None
    if not isinstance(timeout, httpx.Timeout):
        timeout = httpx.Timeout(timeout, connect=min(5.0, timeout))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    http = client if client is not None else httpx.Client(timeout=timeout, headers=headers)
    rows: list[CallRow] = []
    posted = 0
    try:
        created = _call(http, "POST", f"{base}/v1/sessions", base, ok=(200, 201), json_body=body)
        sid = created.get("id")
        if not isinstance(sid, str) or not sid:
            raise ReplayError(f"POST {base}/v1/sessions: response has no session 'id': {created}")
        events_url = f"{base}/v1/sessions/{sid}/events"
        request_url = f"{base}/v1/sessions/{sid}/request"
        n_calls = sum(1 for s in plan if isinstance(s, ModelCall))

        with _progress(progress, traj.instance_id, n_calls) as advance:
            for step in plan:
                if isinstance(step, PostEvents):
                    res = _call(
                        http, "POST", events_url, base, ok=(200, 201),
                        json_body={"events": list(step.events)},
                    )
                    results = res.get("results")
                    if isinstance(results, list) and len(results) != len(step.events):
                        raise ReplayError(
                            f"POST {events_url}: {len(step.events)} events sent, "
                            f"{len(results)} results returned"
                        )
                    posted += len(step.events)
                else:
                    got = _call(http, "GET", request_url, base, ok=(200,), params={"format": fmt})
                    rows.append(_row(step, got))
                    advance()
    finally:
        if own_client:
            http.close()

    rows_t = tuple(rows)
    notes: list[str] = []
    if traj.has_failed_final_call:
        notes.append(
            f"the agent's last model call failed ({traj.exit_status}); "
            "it is replayed as a call without provider usage"
        )
    return ReplayReport(
        trajectory=str(path),
        instance_id=traj.instance_id,
        model=traj.model,
        exit_status=traj.exit_status,
        session_id=sid,
        profile=profile,
        format=fmt,
        events_posted=posted,
        rows=rows_t,
        ctxd_totals=_ctxd_totals(rows_t),
        provider_totals=_provider_totals(provider_usage_totals(traj)),
        notes=tuple(notes),
        base_url=base or str(http.base_url).rstrip("/"),
    )


class _progress:
    """Context manager yielding an ``advance()`` callable; a no-op when disabled."""

    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled = enabled
        self.label = label
        self.total = total
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("model calls"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.__enter__()
        self._task = self._progress.add_task(self.label, total=self.total)
        return lambda: self._progress.advance(self._task)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


# --------------------------------------------------------------------------- output


def _fmt(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def print_report(report: ReplayReport, *, file: TextIO | None = None, table: bool = True) -> None:
    """Print the per-call table (optional) and the totals with rich (tokens)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file)
    if not console.is_terminal:  # piped or redirected: don't squeeze the table to 80 columns
        console = Console(file=file, width=200)
    if table:
        has_cache = any(r.predicted_cached_tokens is not None for r in report.rows)
        t = Table(
            title=f"ctxd replay: {report.instance_id} (profile {report.profile}, format {report.format})",
            box=box.SIMPLE_HEAD,
            padding=(0, 1),
            caption="tokens; provider prompt = the agent's append-only transcript counted by "
            "the provider's tokenizer (reference only); * = failed call",
        )
        cols = ["call", "request", "root", "trunk", "leaf", "system", "tools", "task_state",
                "observations", "elided"]
        if has_cache:
            cols.append("pred.cached")
        cols.append("provider prompt")
        for col in cols:
            t.add_column(col, justify="right", no_wrap=True)
        for r in report.rows:
            cells = [
                f"{r.call}{'*' if r.failed_call else ''}",
                _n(r.request_tokens), _n(r.root), _n(r.trunk), _n(r.leaf),
                _n(r.system), _n(r.tools), _n(r.task_state), _n(r.observations),
                _n(r.elided_tokens),
            ]
            if has_cache:
                cells.append(_n(r.predicted_cached_tokens))
            cells.append(_n(r.provider_prompt_tokens))
            t.add_row(*cells)
        console.print(t)

    c = report.ctxd_totals
    p = report.provider_totals
    s = Table(title=f"totals over {_fmt(c.get('calls'))} calls (tokens)", box=box.SIMPLE_HEAD)
    s.add_column("")
    s.add_column("ctxd", justify="right")
    s.add_column("provider (for reference only: a different tokenizer)", justify="right")
    s.add_row("model calls", _fmt(c.get("calls")), _fmt(p.get("api_calls")))
    s.add_row("prompt tokens", _fmt(c.get("request_tokens")), _fmt(p.get("prompt_tokens")))
    s.add_row("cached: ctxd predicted / provider hit", _fmt(c.get("predicted_cached_tokens")),
              _fmt(p.get("prompt_cache_hit_tokens")))
    requested, predicted = c.get("request_tokens"), c.get("predicted_cached_tokens")
    uncached = requested - predicted if requested is not None and predicted is not None else None
    s.add_row("not cached: ctxd predicted / provider miss", _fmt(uncached), _fmt(p.get("prompt_cache_miss_tokens")))
    s.add_row("elided", _fmt(c.get("elided_tokens")), "-")
    s.add_row("largest request", _fmt(c.get("max_request_tokens")), "-")
    console.print(s)
    console.print(f"session {report.session_id}: look inside it at {report.base_url}/ui/sessions/{report.session_id}, "
                  f"or GET {report.base_url}/v1/sessions/{report.session_id}/request", highlight=False)
    for note in report.notes:
        console.print(f"note: {note}", style="dim", highlight=False)


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


def write_json(report: ReplayReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
