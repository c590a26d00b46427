"""``ctxd bench --http``: GET and POST latency end to end over HTTP (issue 9, item 8).

What is timed
-------------
``ctxd serve`` is started on a free loopback port (a real uvicorn in its own process) on
the embedded default: a SQLite file in a temporary data directory, the in-process segment
cache, no Redis. (``--url`` benches a server that is already running instead.) One real
trajectory is replayed over HTTP with one ``httpx`` client (keep-alive), as ``ctxd
replay`` does: ``POST /v1/sessions``, then the recorded events batch by batch, and at
every model call ``GET /v1/sessions/{id}/request?format=openai``.

* **warm GET over HTTP**: the client's wall time (``time.perf_counter`` around the
  request, until the whole response body is read; JSON decoding is not timed) of that GET, the first one after the POST
  of one model call's events, with the server's caches as a running server has them.
* **naive**: one ``apply_chat_template(messages, tools=..., add_generation_prompt=True,
  tokenize=True)`` of the served body with the profile's tokenizer, in the bench process,
  timed :data:`NAIVE_AFTER` seconds after its GET (as an agent's model call follows it), so
  the server is idle meanwhile: it counts the POST's new tool outputs once it has had no
  request in flight for a few ms (app/services/payload_counts.py), which would otherwise
  run during the naive timing and slow it (both share the machine's cores); its count is
  checked equal to the manifest's total.
* **POST**: the client's wall time of every ``POST .../events``, reported along the session
  (quarters of the replay's POSTs) so a cost growing with the session shows.

A warm-up replays the first three calls of the trace into a throwaway session (untimed).
Targets (reported, never asserted): warm GET over HTTP at least 10x faster than naive for
requests of 20k to 28k tokens (issue 9). Profile ``qwen3`` by default (W = 32,768).

Under ``qwen3``'s shipped watermarks (select, GET /request's default policy, folds past
``t_hi`` = 8,448 tokens) no request reaches 20k tokens, so that band is empty.
``--raise-watermarks`` (:func:`raised_watermarks`) serves the same profile with ``t_hi``
raised to its ``input_limit`` and ``t_lo`` to 0.6 of it (a ``CTXD_PROFILES_PATH`` override
in the server's temporary directory; tokenizer, template, window and every other field
unchanged): select then folds only at the window's edge, and requests grow to 17k-28k
tokens between passes, the band issue 9's target names. The output says which
watermarks were served.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

__all__ = ["HTTP_PROFILE", "HTTP_TARGETS", "print_http", "raised_watermarks", "run_http", "serve"]

HTTP_PROFILE = "qwen3"
#: (label, min tokens inclusive, max tokens exclusive, required naive p50 / warm HTTP p50).
HTTP_TARGETS: tuple[tuple[str, int, int | None, float], ...] = (("20k-28k", 20_000, 28_000, 10.0),)


@contextmanager
def serve(*, data_dir: Path | None = None, env: dict[str, str] | None = None, log_path: Path | None = None,
          ready_timeout: float = 120.0, workers: int = 1, args: Sequence[str] = ()) -> Iterator[str]:
    """``ctxd serve`` on a free loopback port on the embedded default (SQLite in
    ``data_dir``, default a temporary directory; in-process cache, no Redis; ``env`` adds
    CTXD_ settings; ``workers`` uvicorn workers; ``args`` more `ctxd serve` options); yields
    its base URL once ``/readyz`` answers 200 (tokenizer loaded), then stops it with SIGTERM. Its output goes to ``log_path`` (default: in the temporary
    directory), a file, since one access line per request fills a pipe left unread.

    Raises BenchError when it exits early, is not ready within ``ready_timeout`` seconds,
    or does not stop within 30 s of SIGTERM (it is then killed)."""
    from ctxd_tools.bench import BenchError
    from ctxd_tools.native_stack import NativeStackError, free_port, stop, wait_ready

    with tempfile.TemporaryDirectory(prefix="ctxd-serve-") as tmp:
        port = free_port()
        variables = os.environ | {"CTXD_DATA_DIR": str(data_dir or Path(tmp) / "data"), "CTXD_DATABASE_URL": "",
                                  "CTXD_REDIS_URL": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        log_file = log_path or Path(tmp) / "serve.log"
        with log_file.open("w", encoding="utf-8") as log:
            proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                     "--workers", str(workers), *args],
                                    env=variables | (env or {}), stdout=log, stderr=subprocess.STDOUT)
            base = f"http://127.0.0.1:{port}"
            try:
                try:
                    wait_ready(f"{base}/readyz", timeout=ready_timeout, alive=lambda: proc.poll() is None,
                               what="ctxd serve", log=log_file)
                except NativeStackError as exc:
                    raise BenchError(str(exc)) from None
                yield base
            finally:
                if not stop(proc, 30):
                    raise BenchError("ctxd serve did not stop within 30 s of SIGTERM")


#: Seconds between a GET and the naive count of its body: more than the server's payload
#: count waits for (5 ms without a request) and takes (~2 ms for a small output).
NAIVE_AFTER = 0.02
RAISED_T_LO = 0.6  # t_lo as a share of input_limit under --raise-watermarks


def _toml_value(value: Any) -> str:
    """A TOML value for the scalars, arrays and inline tables profiles.toml holds (JSON's
    strings, numbers, booleans and arrays are TOML's)."""
    import json

    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def raised_watermarks(profile: str) -> tuple[str, dict[str, int]]:
    """A profiles file (TOML text) redefining the shipped ``profile`` with ``t_hi`` =
    its ``input_limit`` and ``t_lo`` = ``RAISED_T_LO`` of it, every other field as shipped;
    and those watermarks (``{"t_hi", "t_lo"}``, tokens). Raises UnknownProfile."""
    import tomllib
    from importlib import resources

    from app.tokenizers.profiles import ProfileRegistry, load_profiles

    limit = ProfileRegistry(load_profiles()).get(profile).budget.input_limit
    shipped = tomllib.loads(resources.files("app.profiles").joinpath("profiles.toml").read_text(encoding="utf-8"))
    body = {k: v for k, v in shipped[profile].items() if k not in ("t_hi", "t_lo", "low_watermark")}
    marks = {"t_hi": limit, "t_lo": int(limit * RAISED_T_LO)}
    body |= marks
    lines = [f"[{_toml_key(profile)}]", *(f"{k} = {_toml_value(v)}" for k, v in body.items())]
    return "\n".join(lines) + "\n", marks


def _toml_key(name: str) -> str:
    """A TOML table name: bare when it can be, else quoted."""
    import json
    import re

    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _replay_http(client: Any, traj: Any, profile: str, *, limit: int | None = None, naive: Any = None,
                 advance: Any = None) -> tuple[list[dict[str, Any]], list[tuple[int, float]]]:
    """Replay ``traj`` over HTTP into a new session. Returns (one record per GET: call,
    tokens, http_s, naive_s, naive_tokens; one (POST index, seconds) per POST)."""
    from ctxd_tools.bench import BenchError
    from ctxd_tools.miniswe import ModelCall, PostEvents, replay_plan, session_create_body

    def check(r: Any) -> Any:
        if r.status_code >= 400:
            raise BenchError(f"{r.request.method} {r.request.url.path} -> {r.status_code}: {r.text[:500]}")
        return r.json()

    sid = check(client.post("/v1/sessions", json=session_create_body(traj, profile=profile)))["id"]
    gets: list[dict[str, Any]] = []
    posts: list[tuple[int, float]] = []
    for step in replay_plan(traj):
        if isinstance(step, PostEvents):
            t0 = time.perf_counter()
            r = client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)})
            seconds = time.perf_counter() - t0
            posts.append((int(check(r)["last_seq"]), seconds))
        elif isinstance(step, ModelCall):
            if limit is not None and len(gets) >= limit:
                break
            t0 = time.perf_counter()
            r = client.get(f"/v1/sessions/{sid}/request", params={"format": "openai"})
            seconds = time.perf_counter() - t0
            out = check(r)
            record = {"call": step.index, "tokens": int(out["manifest"]["tokens"]["total"]), "http_s": seconds,
                      "response_bytes": len(r.content), "naive_s": None, "naive_tokens": None,
                      "server_ms": server_timing(r.headers.get("server-timing", ""))}
            if naive is not None:
                time.sleep(NAIVE_AFTER)  # the server's work after the GET is done (module docstring)
                record["naive_s"], record["naive_tokens"] = naive(out["request"])
            gets.append(record)
            if advance is not None:
                advance()
    return gets, posts


def run_http(trace: str | Path | None = None, *, profile: str = HTTP_PROFILE, repeat: int = 1, url: str | None = None,
             progress: bool = True, raise_watermarks: bool = False) -> dict[str, Any]:
    """Replay ``trace`` over HTTP ``repeat`` times against ``url`` (default: a ``ctxd
    serve`` started for the run); return every figure (ms, tokens). ``raise_watermarks``:
    the started server serves ``profile`` with :func:`raised_watermarks` (not with ``url``).

    Returns ``{"trace", "profile", "watermarks", "url", "repeat", "calls_per_replay",
    "bands", "all", "targets", "posts": {...}, "checks": {...}, "calls"}`` (``watermarks``:
    ``{"t_hi", "t_lo", "raised"}`` as served, tokens). Raises BenchError."""
    from ctxd_tools.bench import BANDS, BenchError, _Bar, _group_modes, _posts_along, default_trace, in_band
    if url is None:
        with tempfile.TemporaryDirectory(prefix="ctxd-bench-profiles-") as tmp:
            env: dict[str, str] = {}
            if raise_watermarks:
                text, _ = raised_watermarks(profile)
                override = Path(tmp) / "profiles.toml"
                override.write_text(text, encoding="utf-8")
                env["CTXD_PROFILES_PATH"] = str(override)
            with serve(env=env) as base:
                result = run_http(trace, profile=profile, repeat=repeat, url=base, progress=progress,
                                  raise_watermarks=raise_watermarks)
        result["url"] = "ctxd serve (embedded default, temporary data dir)"
        return result
    if raise_watermarks:
        marks = {**raised_watermarks(profile)[1], "raised": True}
    else:
        from app.tokenizers.profiles import ProfileRegistry, load_profiles

        shipped = ProfileRegistry(load_profiles()).get(profile).watermarks
        marks = {"t_hi": shipped.t_hi, "t_lo": shipped.t_lo, "raised": False}

    import httpx

    from app.tokenizers.hf import HFChatMeter, openai_to_template_messages
    from app.tokenizers.loading import MeterRegistry
    from app.tokenizers.profiles import ProfileRegistry, load_profiles
    from ctxd_tools.miniswe import ModelCall, load_trajectory, replay_plan

    if repeat < 1:
        raise BenchError("--repeat must be at least 1")
    path = Path(trace) if trace is not None else default_trace()
    traj = load_trajectory(path)
    meter = MeterRegistry(None, segment_cache=False).get(ProfileRegistry(load_profiles()).get(profile))
    if not isinstance(meter, HFChatMeter):
        raise BenchError(f"profile {profile!r}: the naive baseline needs a Hugging Face tokenizer with a chat template")
    tokenizer = meter.tokenizer

    def naive(body: dict[str, Any]) -> tuple[float, int]:
        messages = openai_to_template_messages(body["messages"])
        t0 = time.perf_counter()
        ids = tokenizer.apply_chat_template(messages, tools=body.get("tools"), add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        return time.perf_counter() - t0, len(ids)

    n_calls = sum(1 for s in replay_plan(traj) if isinstance(s, ModelCall))
    runs: list[list[dict[str, Any]]] = []
    post_runs: list[list[tuple[int, float]]] = []
    with httpx.Client(base_url=url, timeout=300) as client, _Bar(progress) as bar:
        _replay_http(client, traj, profile, limit=3)  # warm-up (untimed)
        advance = bar.task(f"{path.name} over HTTP ({profile}): {repeat} replay(s)", repeat * n_calls)
        for _ in range(repeat):
            gets, posts = _replay_http(client, traj, profile, naive=naive, advance=advance)
            runs.append(gets)
            post_runs.append(posts)

    samples = [{"tokens": g["tokens"], "http": g["http_s"], "naive": g["naive_s"]} for run in runs for g in run]
    modes = ("http", "naive")
    bands = [{"band": label, "min_tokens": lo, "max_tokens": hi,
              **_group_modes(samples, modes, in_band(lo, hi))}
             for label, lo, hi in BANDS]
    targets = []
    for label, lo, hi, factor in HTTP_TARGETS:
        g = _group_modes(samples, modes, in_band(lo, hi))
        ratio = g["naive_over_http_p50"]
        targets.append({"requests": label, "min_tokens": lo, "max_tokens": hi, "n": g["n"],
                        "metric": "naive p50 / warm GET over HTTP p50", "required": factor, "value": ratio,
                        "http_p50_ms": g["http"]["p50_ms"], "naive_p50_ms": g["naive"]["p50_ms"],
                        "met": None if ratio is None else ratio >= factor})
    post_quarters = _posts_along(post_runs)
    mismatches = sum(1 for run in runs for g in run if g["naive_tokens"] != g["tokens"])
    steps = _steps_over_http([g for run in runs for g in run])
    return {
        "trace": str(path), "instance_id": traj.instance_id, "profile": profile, "watermarks": marks, "url": url,
        "repeat": repeat,
        "calls_per_replay": len(runs[0]), "max_request_tokens": max((g["tokens"] for g in runs[0]), default=0),
        "bands": bands, "all": _group_modes(samples, modes, lambda s: True), "targets": targets, "posts": post_quarters,
        "checks": {"naive_count_mismatches": mismatches},
        "steps": steps,
        "calls": [{"call": g["call"], "tokens": g["tokens"], "http_ms": [r[i]["http_s"] * 1e3 for r in runs],
                   "naive_ms": [r[i]["naive_s"] * 1e3 for r in runs], "response_bytes": g["response_bytes"]}
                  for i, g in enumerate(runs[0])],
        "definitions": {
            "http": "client wall time of the first GET /request after the POST of one model call's events "
                    "(httpx, keep-alive, until the response body is read; JSON decoding not timed)",
            "naive": "one apply_chat_template(tokenize=True) of the served body, profile's tokenizer, bench process",
            "posts": "client wall time of POST /events; quarters of the replay's POSTs in order",
            "steps": "the server's own steps of each GET (its Server-Timing header: load, plan, save) and the rest "
                     "of the client's wall time (HTTP, the server's framework, the client), p50 per band",
        },
    }


def server_timing(header: str) -> dict[str, float]:
    """The ``name;dur=ms`` entries of a ``Server-Timing`` header (W3C), ms by name."""
    import re

    return {name: float(ms) for name, ms in re.findall(r"([\w-]+);dur=([0-9.]+)", header)}


def _steps_over_http(gets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target band and over all GETs (:func:`ctxd_tools.bench.step_figures`): p50 ms of the
    server's load, plan and save (Server-Timing), and of the rest of the client's wall time
    (``outside``)."""
    from ctxd_tools.bench import PHASES, step_figures

    timed = [(g["tokens"], g["http_s"] * 1e3, g["server_ms"]) for g in gets if g.get("server_ms")]
    return step_figures([(tokens, ms, {**steps, "outside": ms - sum(steps.get(s, 0.0) for s in PHASES)})
                         for tokens, ms, steps in timed],
                        [(t[0], t[1], t[2]) for t in HTTP_TARGETS], (*PHASES, "outside"), total="http")


def print_http(result: dict[str, Any], *, file: TextIO | None = None) -> None:
    """The per-band table over HTTP, the target and the POST latency along the session."""
    from rich import box
    from rich.table import Table

    from ctxd_tools.bench import PHASES, _console, _ms, _x, print_posts, print_steps

    console = _console(file)
    marks = result["watermarks"]
    served = (f"watermarks RAISED to t_hi {marks['t_hi']:,} / t_lo {marks['t_lo']:,}" if marks["raised"]
              else f"shipped watermarks t_hi {marks['t_hi']:,} / t_lo {marks['t_lo']:,}")
    t = Table(title=f"GET over HTTP: {result['instance_id']} ({result['calls_per_replay']} calls x {result['repeat']}), "
                    f"profile {result['profile']} ({served}), {result['url']}", box=box.SIMPLE_HEAD,
              caption="ms; warm = client wall time of the first GET after a model call's POST; naive = one "
                      "apply_chat_template(tokenize=True) of the served body")
    for c in ("request tokens", "n", "warm HTTP p50", "warm HTTP p95", "naive p50", "naive p95", "naive/warm p50"):
        t.add_column(c, justify="right", no_wrap=True)
    for row in [*result["bands"], {"band": "all", **result["all"]}]:
        t.add_row(row["band"], str(row["n"]), _ms(row["http"]["p50_ms"]), _ms(row["http"]["p95_ms"]),
                  _ms(row["naive"]["p50_ms"]), _ms(row["naive"]["p95_ms"]), _x(row["naive_over_http_p50"]))
    console.print(t)
    for tg in result["targets"]:
        met = tg["met"]
        console.print(f"target (reported, not asserted): requests {tg['requests']} tokens (n={tg['n']}): "
                      f"{tg['metric']} = {_x(tg['value'])} (warm {_ms(tg['http_p50_ms'])} ms, naive "
                      f"{_ms(tg['naive_p50_ms'])} ms), required >= {tg['required']:.0f}x -> "
                      f"{'met' if met else 'missed' if met is False else 'n/a (no requests)'}", highlight=False)
    if result.get("steps"):
        print_steps(result["steps"], (*PHASES, "outside"), title="where a warm GET's time goes over HTTP",
                    total="http", console=console,
                    caption="ms, p50 over the band's GETs: load, plan, save = the server's steps (its Server-Timing "
                            "header); outside = the client's wall time less those (HTTP, the server's framework, the "
                            "client)")
    print_posts(result["posts"], title="POST /events over HTTP along the session", console=console)
    console.print(f"checks: naive count != manifest total: {result['checks']['naive_count_mismatches']}; "
                  f"largest request {result['max_request_tokens']:,} tokens", highlight=False)
