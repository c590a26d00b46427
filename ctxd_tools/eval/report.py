"""Reports of an evaluation run: ``results.json``, ``calls.jsonl``, ``report.md`` and plots.

Aggregates are ratios of sums over model calls (eq. 9's compression ratio, reuse, eq. 6's
retention), except grounding, which is a mean of per-call fractions over the calls that
have at least one candidate identifier. Plots use matplotlib's Agg backend.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from ctxd_tools.eval import measures
from ctxd_tools.eval.replay import CallRecord, EvalRun

__all__ = ["KEYS", "build_results", "summarize", "write_report"]

ROLES = ("system", "tools", "task_state", "observations")
ZONES = ("root", "trunk", "leaf")
#: the keys of every total and trace entry in results.json (issue 4, item 3)
KEYS = ("calls", "input_tokens", "cached_tokens", "uncached_tokens", "reuse_ratio", "cost_usd", "compression_ratio",
        "over_limit", "constraint_retention", "pair_errors", "stale_support", "grounding", "grounding_via_handle",
        "grounding_via_record", "passes", "passes_per_call", "passes_above_t_lo", "after_pass_median_tokens")
PROVIDER_KEYS = ("prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "cost")


def summarize(records: Sequence[CallRecord], prices: measures.Prices, reference_input: int | None) -> dict[str, Any]:
    """One total or trace entry over ``records`` (see module docstring).

    ``reference_input``: the append policy's input tokens over the same calls (eq. 9's
    numerator), None when append was not run."""
    inp = sum(r.input_tokens for r in records)
    cached = sum(r.cached_tokens for r in records)
    uncached = sum(r.uncached_tokens for r in records)
    pairs = sum(r.constraints_total for r in records)
    superseded = sum(r.superseded for r in records)
    stale = sum(r.stale for r in records)
    grounded = [r for r in records if r.grounding_candidates]
    out: dict[str, Any] = {
        "calls": len(records),
        "input_tokens": inp,
        "cached_tokens": cached,
        "uncached_tokens": uncached,
        "reuse_ratio": measures.reuse_ratio(cached, inp),
        "cost_usd": measures.cost_usd(uncached, cached, prices),
        "compression_ratio": measures.compression_ratio(reference_input, inp) if reference_input is not None else None,
        "over_limit": sum(1 for r in records if r.over_limit),
        "constraint_retention": measures.retention_fraction(sum(r.constraints_retained for r in records), pairs),
        # what the user said: (request, instruction) pairs kept verbatim over all pairs, and the
        # same for the user's short messages (None when no request followed one)
        "instruction_retention": measures.retention_fraction(sum(r.instructions_kept for r in records),
                                                            sum(r.instructions_total for r in records)),
        "instruction_pairs": sum(r.instructions_total for r in records),
        # results marked possibly_stale by a command ctxd does not know that named their artifact:
        # marks summed over calls, per call, and the tokens of the outputs kept beside the notice
        "possibly_stale_marks": sum(r.possibly_stale for r in records),
        "possibly_stale_per_call": (sum(r.possibly_stale for r in records) / len(records)) if records else None,
        "possibly_stale_tokens": sum(r.possibly_stale_tokens for r in records),
        "short_user_retention": measures.retention_fraction(sum(r.short_user_kept for r in records),
                                                           sum(r.short_user_total for r in records)),
        "pair_errors": sum(r.pair_errors for r in records),
        "stale_support": stale,
        "grounding": (sum(r.grounding_hits / r.grounding_candidates for r in grounded) / len(grounded)) if grounded else None,
        "grounding_via_handle": (sum(r.grounding_via_handle_hits / r.grounding_candidates for r in grounded) / len(grounded))
        if grounded else None,
        # the share of candidates the trunk's progress record itself holds (select; 0 for the others)
        "grounding_via_record": (sum(r.grounding_record_hits / r.grounding_candidates for r in grounded) / len(grounded))
        if grounded else None,
        "passes": sum(1 for r in records if r.compaction_pass),
        "passes_per_call": (sum(1 for r in records if r.compaction_pass) / len(records)) if records else None,
        # issue 10 item 3: passes of select that ended above T_lo, by reason, and where passes leave the request
        "passes_above_t_lo": sum(1 for r in records if r.compaction_pass and r.pass_over_target),
        "passes_above_t_lo_by_reason": dict(sorted(Counter(r.pass_over_target for r in records
                                                           if r.compaction_pass and r.pass_over_target).items())),
        "after_pass_median_tokens": round(median(after)) if (after := [r.input_tokens for r in records
                                                                 if r.compaction_pass]) else None,
        # supporting detail
        "stale_support_rate": stale / superseded if superseded else None,
        "stale_support_items": sum(r.stale_items for r in records),
        "invalidation": {k: sum(getattr(r, k) for r in records) for k in
                         ("tombstones", "tombstone_tokens", "replaced_tokens", "noticed", "notice_tokens",
                          "stale_tokens_kept")},
        "superseded_pairs": superseded,
        "grounding_calls": len(grounded),
        "max_input_tokens": max((r.input_tokens for r in records), default=0),
        "errors": sum(1 for r in records if r.error),
        "by_role": {k: sum(r.by_role.get(k, 0) for r in records) for k in ROLES},
        "by_zone": {k: sum(r.by_zone.get(k, 0) for r in records) for k in ZONES},
        # issue 16 (select-scratchpad): per call, summed; children = child sessions at the last call
        "scratchpad": {**{k: sum(getattr(r, k) for r in records) for k in
                          ("plans", "plan_tokens", "documents", "document_tokens", "conclusions", "conclusion_tokens")},
                       "calls_with_plan_in_record": sum(1 for r in records if r.plan_in_record),
                       "children": max((r.children for r in records), default=0)},
    }
    return out


def build_results(run: EvalRun, prices: measures.Prices, profile_info: dict[str, Any]) -> dict[str, Any]:
    """The results.json document: ``{"profile", "policies": {p: {"total", "traces"}},
    "provider": {"total", "traces"}, ...}``."""
    reference: dict[str, int] = {}
    if "append" in run.policies:
        reference = {t: sum(c.input_tokens for c in run.result("append", t).calls) for t in run.traces}
    policies: dict[str, Any] = {}
    for p in run.policies:
        traces = {t: summarize(run.result(p, t).calls, prices, reference.get(t)) for t in run.traces}
        all_calls = [c for t in run.traces for c in run.result(p, t).calls]
        total_ref = sum(reference.values()) if reference else None
        total = summarize(all_calls, prices, total_ref)
        total["max_passes_per_call_20"] = max((e["passes_per_call"] or 0.0 for e in traces.values()
                                                if e["calls"] >= LONG_TRACE_CALLS), default=None)
        policies[p] = {"total": total, "traces": traces}
    if "append" in policies:
        ref = policies["append"]["total"]
        for entry in policies.values():
            t = entry["total"]
            t["input_vs_append"] = t["input_tokens"] / ref["input_tokens"] if ref["input_tokens"] else None
            t["cost_vs_append"] = t["cost_usd"] / ref["cost_usd"] if ref["cost_usd"] else None
    first = run.policies[0]
    provider_traces = {t: {k: run.result(first, t).provider[k] for k in (*PROVIDER_KEYS, "calls_with_usage", "model")}
                       for t in run.traces}
    provider_total: dict[str, Any] = {k: sum(v[k] for v in provider_traces.values()) for k in (*PROVIDER_KEYS, "calls_with_usage")}
    provider_total["reuse_ratio"] = measures.reuse_ratio(provider_total["prompt_cache_hit_tokens"],
                                                        provider_total["prompt_tokens"])
    return {
        "profile": run.profile,
        "profile_info": profile_info,
        "sweep": sweep_rows(policies, profile_info),
        "prices_usd_per_mtok": {"uncached_input": prices.uncached, "cached_input": prices.cached},
        "policies": policies,
        "over_invalidation": run.over_invalidation,
        "provider": {"note": "what the provider billed for the real run (DeepSeek's tokenizer; cost as recorded, "
                             "output included)", "total": provider_total, "traces": provider_traces},
        "runtime_seconds": round(run.seconds, 2),
        "workers": run.workers,
        "calls_per_policy": run.calls_per_policy,
        "traces": run.traces,
        "notes": NOTES,
    }


GROUNDING_FLOOR = 0.95  # issue 10: ship the cost optimum that keeps grounding at or above this


def sweep_rows(policies: dict[str, Any], info: dict[str, Any]) -> list[dict[str, Any]]:
    """The watermark sweep table (issue 10 item 2): one row per select policy (the
    profile's ``select`` and every ``select[hi=..,lo=..,k=..,r=..]``) with its settings in
    tokens, tokens and cost against append, grounding (direct, via handle, via record),
    passes per call (overall and the largest on a trace of 20 calls or more), requests over
    input_limit and constraint retention; ``optimum`` marks the cheapest row whose
    grounding is at least 0.95."""
    from ctxd_tools.eval.policies import SweepSetting

    limit = int(info.get("input_limit") or 0)
    rows = []
    for name, entry in policies.items():
        if name != "select" and not name.startswith("select["):
            continue
        if name == "select":
            marks = dict(info.get("watermarks") or {})
        else:
            marks = SweepSetting.parse(name).watermarks(limit).as_dict()
        t = entry["total"]
        rows.append({"policy": name, **marks, "t_hi_fraction": marks.get("t_hi", 0) / limit if limit else None,
                     **{k: t.get(k) for k in ("input_vs_append", "cost_vs_append", "grounding", "grounding_via_handle",
                                              "grounding_via_record", "passes_per_call", "max_passes_per_call_20",
                                              "passes_above_t_lo", "after_pass_median_tokens",
                                              "over_limit", "constraint_retention", "input_tokens", "cost_usd")},
                     "optimum": False})
    eligible = [r for r in rows if (r["grounding"] or 0) >= GROUNDING_FLOOR and r["cost_usd"] is not None]
    if eligible:
        min(eligible, key=lambda r: r["cost_usd"])["optimum"] = True
    return sorted(rows, key=lambda r: (r["t_hi"] or 0, r["keep_groups"] or 0, r["record_tokens"] or 0, r["policy"]))


NOTES = [
    ("append: the whole transcript as the agent sent it (tool messages' recorded content, wrapper and 10k-character "
    "cuts included, and the assistant reasoning_content the reasoner traces resent, which the Qwen3 template "
    "renders), rendered with the profile's chat template and tools and counted exactly. ctxd's requests do not "
    "render reasoning (profile render_reasoning = false), so part of the compression on reasoner traces is dropped "
    "reasoning. Requests above input_limit are counted anyway (that is the point of over_limit)."),
    ("window: the walking-skeleton policy through the service functions of the API (create_session, ingest_events, "
    "assemble_request) on a temporary SQLite database, events exactly as recorded."),
    ("select: ctxd's default pipeline through the same path, fed the events with inferred read bindings and artifact "
    "writes. Until compaction and invalidation exist, select == window plus bindings: the same turns are kept and "
    "evicted; the trunk's elision note differs only in the event seq numbers it cites (the write events take seq "
    "numbers), a few tokens per eviction."),
    ("cached_tokens: the profile's cache model (vllm_blocks, 16-token blocks) against the previous request of the same "
    "run; uncached = input - cached. cost_usd counts input only."),
    ("stale_support (eq. 7): (call, observation) pairs where the observation read an artifact written after the read "
    "and before the call, and a tool message of the request still shows the observation's text (its first 200 "
    "characters), with no tombstone or notice naming the write (path@rN). stale_support_rate = stale_support / "
    "superseded_pairs. stale_support_items: the same pairs judged per manifest item (service policies): the item "
    "in the request does not say state historical naming the write (append has no manifest: its text count)."),
    ("invalidation (select policies): per call, summed: tombstones shown in place and their tokens against the tokens "
    "of the outputs they replaced; observations kept with a notice, the notices' tokens and the stale tokens they "
    "leave in the request. select-tombstone and select-notice apply one rule to every superseded observation, so "
    "their input, cached and uncached tokens against each other give the tombstone-versus-notice token and cache "
    "effect."),
    ("passes ending above T_lo (select, issue 10 item 3): passes whose request still exceeds T_lo, by reason in "
    "results.json (passes_above_t_lo_by_reason): newest_group = every group but the newest is folded and root + "
    "trunk + the newest group (bounded at the per-item cap) + the newest user message exceed T_lo; pinned = root + "
    "contract + record alone exceed it; pending = a group awaiting results bounds the fold; protected = the "
    "protected-field check rejected the fold point (always 0 under window, which evicts only past input_limit). "
    "median tokens after a pass: the median request of the calls that ran a pass (or an eviction), rounded."),
    ("grounding: for each call, the identifiers (paths, file names, dotted names, snake_case and CamelCase words, "
    "line numbers >= 10 written as 'line N', 'file.py:N' or a sed range) of the real agent's next message and "
    "command that already appeared in the transcript before the call and that the root (system instructions + "
    "tool declarations) does not hold; the fraction found in the request text as whole tokens; mean over calls "
    "with at least one such identifier. grounding_via_handle also counts identifiers found in the payloads behind "
    "handles the request names (read back with read_handle). append holds the whole history, so its grounding is "
    "1.0 by construction."),
]


# --------------------------------------------------------------------------- markdown


def _fmt(v: Any, kind: str = "") -> str:
    if v is None:
        return "n/a"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "usd":
        return f"${v:,.2f}"
    if kind == "ratio":
        return f"{v:.2f}x"
    if kind == "frac":
        return f"{v:.3f}"
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


TOTAL_COLUMNS = (("calls", "calls", ""), ("input_tokens", "input tokens", ""), ("cached_tokens", "cached", ""),
                 ("uncached_tokens", "uncached", ""), ("reuse_ratio", "reuse", "pct"), ("cost_usd", "cost", "usd"),
                 ("compression_ratio", "compression (eq. 9)", "ratio"), ("over_limit", "over limit", ""),
                 ("constraint_retention", "constraint retention (eq. 6)", "frac"),
                 ("instruction_retention", "instruction retention", "frac"),
                 ("short_user_retention", "short user messages kept", "frac"), ("pair_errors", "pair errors", ""),
                 ("possibly_stale_marks", "possibly stale marks", ""),
                 ("stale_support", "stale support (eq. 7)", ""), ("grounding", "grounding", "frac"),
                 ("grounding_via_handle", "grounding via handle", "frac"),
                 ("grounding_via_record", "grounding via record", "frac"), ("passes", "passes", ""),
                 ("passes_per_call", "passes per call", "frac"),
                 ("max_passes_per_call_20", "max passes per call (traces >= 20 calls)", "frac"),
                 ("passes_above_t_lo", "passes ending above T_lo", ""),
                 ("after_pass_median_tokens", "median tokens after a pass", ""),
                 ("input_vs_append", "input vs append", "ratio"), ("cost_vs_append", "cost vs append", "ratio"))

#: traces with at least this many calls must keep passes_per_call <= 0.25 (issue 10 item 3)
LONG_TRACE_CALLS = 20


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def render_markdown(results: dict[str, Any], plots: Sequence[str]) -> str:
    info = results["profile_info"]
    pols = results["policies"]
    lines = [
        "# ctxd eval: context policies replayed on recorded trajectories",
        "",
        (f"Profile `{results['profile']}` (W = {info['window']:,}, O = {info['output_reserve']:,}, "
        f"M = {info['headroom']:,}, input_limit = {info['input_limit']:,}, watermarks T_hi / T_lo = "
        f"{_fmt((info.get('watermarks') or {}).get('t_hi'))} / {_fmt(info.get('low_watermark'))}, K = "
        f"{_fmt((info.get('watermarks') or {}).get('keep_groups'))}, record budget = "
        f"{_fmt((info.get('watermarks') or {}).get('record_tokens'))}, cache {info['cache']}); prices ${results['prices_usd_per_mtok']['uncached_input']}"
        f" per million uncached and ${results['prices_usd_per_mtok']['cached_input']} per million cached input tokens "
        "(output not counted)."),
        (f"{len(results['traces'])} traces, {results['calls_per_policy']:,} model calls per policy, "
        f"{len(pols)} policies; {results['runtime_seconds']:.1f} s with {results['workers']} worker process(es)."),
        "",
        "## Totals",
        "",
    ]
    rows = [[p] + [_fmt(entry["total"].get(k), kind) for k, _, kind in TOTAL_COLUMNS] for p, entry in pols.items()]
    lines += _table(["policy"] + [h for _, h, _ in TOTAL_COLUMNS], rows)
    if results.get("sweep"):
        lines += ["", "## Watermark sweep (select)", "",
                  f"Cost optimum with grounding >= {GROUNDING_FLOOR}: marked *; T_hi and T_lo in tokens.", ""]
        rows = [[("* " if r["optimum"] else "") + r["policy"], _fmt(r.get("t_hi")), _fmt(r.get("t_lo")),
                 _fmt(r.get("keep_groups")), _fmt(r.get("record_tokens")), _fmt(r["input_vs_append"], "ratio"),
                 _fmt(r["cost_vs_append"], "ratio"), _fmt(r["grounding"], "frac"), _fmt(r["grounding_via_handle"], "frac"),
                 _fmt(r["grounding_via_record"], "frac"), _fmt(r["passes_per_call"], "frac"),
                 _fmt(r["max_passes_per_call_20"], "frac"), _fmt(r.get("passes_above_t_lo")),
                 _fmt(r.get("after_pass_median_tokens")), _fmt(r["over_limit"]), _fmt(r["constraint_retention"], "frac")]
                for r in results["sweep"]]
        lines += _table(["policy", "T_hi", "T_lo", "K", "record budget", "input vs append", "cost vs append",
                         "grounding", "via handle", "via record", "passes per call", "max passes per call (>= 20 calls)",
                         "passes ending above T_lo", "median tokens after a pass", "over limit",
                         "constraint retention"], rows)
    lines += ["", "Supporting detail:", ""]
    rows = [[p, _fmt(e["total"]["superseded_pairs"]), _fmt(e["total"]["stale_support_rate"], "frac"),
             _fmt(e["total"]["grounding_calls"]), _fmt(e["total"]["max_input_tokens"]), _fmt(e["total"]["errors"])]
            + [_fmt(e["total"]["by_role"][r]) for r in ROLES] for p, e in pols.items()]
    lines += _table(["policy", "superseded pairs", "stale support rate", "calls with grounding candidates",
                     "largest request", "errors", *(f"{r} tokens" for r in ROLES)], rows)
    over = results.get("over_invalidation") or {}
    if over:
        lines += ["", (f"Over-invalidation of the inferred bindings (select): {over['over'] + over['coarse']} of "
                      f"{over['writes']} writes ({over['rate']:.2%}) marked an observation of an artifact the command "
                      f"did not name ({over['over']} through an edge to another artifact, {over['coarse']} through a "
                      f"tree write expanded to a file it did not name); {over['marked']} markings in all.")]
    lines += ["", "Invalidation (seed 000 table 9; tokens summed over calls):", ""]
    rows = [[p, _fmt(e["total"]["stale_support"]), _fmt(e["total"]["stale_support_items"])]
            + [_fmt(e["total"]["invalidation"][k]) for k in ("tombstones", "tombstone_tokens", "replaced_tokens",
                                                             "noticed", "notice_tokens", "stale_tokens_kept")]
            + [_fmt(e["total"]["uncached_tokens"])] for p, e in pols.items()]
    lines += _table(["policy", "stale (text)", "stale (per item)", "tombstones", "tombstone tokens",
                     "replaced tokens", "noticed", "notice tokens", "stale tokens kept", "uncached tokens"], rows)
    scratch = {p: e for p, e in pols.items() if any(e["total"].get("scratchpad", {}).values())}
    if scratch:
        lines += ["", ("Plans, sub-agents and retrieved documents (issue 16; per call, summed over calls; children: "
                       "child sessions created per trace, summed):"), ""]
        keys = ("plans", "plan_tokens", "calls_with_plan_in_record", "documents", "document_tokens", "children",
                "conclusions", "conclusion_tokens")
        rows = [[p, *(_fmt(sum(t["scratchpad"][k] for t in e["traces"].values()) if k == "children"
                           else e["total"]["scratchpad"][k]) for k in keys), _fmt(e["total"]["uncached_tokens"])]
                for p, e in scratch.items()]
        lines += _table(["policy", "plan versions in leaf", "plan tokens (task_state)", "calls with plan in record",
                         "documents", "document tokens", "children", "conclusions", "conclusion tokens",
                         "uncached tokens"], rows)
    prov = results["provider"]["total"]
    lines += ["", "## What the provider billed (the real run)", "",
              ("Sums over the trajectories' recorded usage: DeepSeek's tokenizer and its own prompt cache, so a "
              "reference, not a target; cost as recorded (output included)."), ""]
    lines += _table(["prompt_tokens", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "hit ratio", "cost"],
                    [[_fmt(prov["prompt_tokens"]), _fmt(prov["prompt_cache_hit_tokens"]),
                      _fmt(prov["prompt_cache_miss_tokens"]), _fmt(prov["reuse_ratio"], "pct"), _fmt(prov["cost"], "usd")]])
    lines += ["", "## Per trace", ""]
    header = ["trace", "calls"]
    for p in pols:
        header += [f"{p} input", f"{p} reuse", f"{p} over limit"]
    header += [f"{p} compression" for p in pols if p != "append"]
    header += [f"{p} stale" for p in pols] + [f"{p} grounding" for p in pols if p != "append"]
    header += [f"{p} passes per call" for p in pols if p != "append"]
    header += ["provider prompt_tokens", "provider cost"]
    rows = []
    for t in results["traces"]:
        first = next(iter(pols.values()))["traces"][t]
        row = [t.replace(".traj.json", ""), _fmt(first["calls"])]
        for p, e in pols.items():
            row += [_fmt(e["traces"][t]["input_tokens"]), _fmt(e["traces"][t]["reuse_ratio"], "pct"),
                    _fmt(e["traces"][t]["over_limit"])]
        row += [_fmt(e["traces"][t]["compression_ratio"], "ratio") for p, e in pols.items() if p != "append"]
        row += [_fmt(e["traces"][t]["stale_support"]) for e in pols.values()]
        row += [_fmt(e["traces"][t]["grounding"], "frac") for p, e in pols.items() if p != "append"]
        row += [_fmt(e["traces"][t]["passes_per_call"], "frac") for p, e in pols.items() if p != "append"]
        pv = results["provider"]["traces"][t]
        row += [_fmt(pv["prompt_tokens"]), _fmt(pv["cost"], "usd")]
        rows.append(row)
    lines += _table(header, rows)
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    lines += ["", "## Definitions and caveats", ""]
    lines += [f"- {n}" for n in results["notes"]]
    lines += ["- Per-call records (tokens by role and zone, cached, uncached, over_limit, metric counts) are in "
              "`calls.jsonl`; every total and trace entry of `results.json` has the keys " +
              ", ".join(f"`{k}`" for k in KEYS) + "."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plots

ROLE_COLORS = {"system": "#4c72b0", "tools": "#8172b2", "task_state": "#55a868", "observations": "#dd8452"}
POLICY_COLORS = {"append": "#c44e52", "window": "#4c72b0", "select": "#55a868"}
POLICY_STYLES = {"append": "-", "window": "-", "select": "--"}  # select draws over window while they agree


def _showcase(run: EvalRun) -> str:
    """The trace with the most model calls (ties: by name)."""
    first = run.policies[0]
    return max(run.traces, key=lambda t: (len(run.result(first, t).calls), t))


def write_plots(run: EvalRun, out: Path, info: dict[str, Any], prices: measures.Prices) -> list[str]:
    """input_by_role.png, request_length.png, cumulative_cost.png; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    trace = _showcase(run)
    limit, window, reserve = info["input_limit"], info["window"], info["output_reserve"]
    paths: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))

    # 1. seed 000 figure 1 style: each bar one request, stacked by the four terms of eq. 1
    fig, axes = plt.subplots(len(run.policies), 1, figsize=(12, 3.2 * len(run.policies)), sharex=True, squeeze=False)
    top = max(max((c.input_tokens for c in run.result(p, trace).calls), default=0) for p in run.policies)
    for ax, p in zip(axes[:, 0], run.policies):
        calls = run.result(p, trace).calls
        x = [c.call for c in calls]
        bottom = [0] * len(calls)
        for role in ROLES:
            h = [c.by_role.get(role, 0) for c in calls]
            ax.bar(x, h, bottom=bottom, color=ROLE_COLORS[role], width=0.85, label=role)
            bottom = [b + v for b, v in zip(bottom, h)]
        ax.axhline(limit, color="black", lw=1)
        ax.axhspan(limit, limit + reserve, facecolor="none", edgecolor="grey", hatch="//", lw=0)
        ax.set_ylim(0, max(top, limit + reserve) * 1.05)
        over = sum(1 for c in calls if c.over_limit)
        ax.set_title(f"{p}: {sum(c.input_tokens for c in calls):,} input tokens, {over} of {len(calls)} requests over input_limit",
                     fontsize=10)
        ax.set_ylabel("tokens")
    handles = [Patch(color=ROLE_COLORS[r], label=r) for r in ROLES] + [
        Patch(facecolor="none", edgecolor="grey", hatch="//", label=f"output reserve O = {reserve:,}")]
    axes[0, 0].legend(handles=handles, loc="upper left", fontsize=8, ncol=5)
    axes[-1, 0].set_xlabel(f"model call ({trace}); line: input_limit = W - O - M = {limit:,}")
    fig.suptitle("Input tokens per call by role (eq. 1 terms)")
    save(fig, "input_by_role.png")

    # 2. request length over calls with the watermarks
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for p in run.policies:
        calls = run.result(p, trace).calls
        ax.plot([c.call for c in calls], [c.input_tokens for c in calls], label=p, color=POLICY_COLORS.get(p),
                ls=POLICY_STYLES.get(p, "-"), lw=1.5)
    ax.axhline(limit, color="black", ls="--", lw=1, label=f"input_limit W-O-M = {limit:,}")
    ax.axhline(window - reserve, color="grey", ls=":", lw=1, label=f"W - O = {window - reserve:,}")
    marks = info.get("watermarks") or {}
    if marks.get("t_hi"):
        ax.axhline(marks["t_hi"], color="tab:orange", ls="-.", lw=1, label=f"trigger T_hi = {marks['t_hi']:,}")
    if info.get("low_watermark"):
        ax.axhline(info["low_watermark"], color="tab:green", ls="-.", lw=1, label=f"target T_lo = {info['low_watermark']:,}")
    ax.set_xlabel(f"model call ({trace})")
    ax.set_ylabel("request tokens")
    ax.set_title("Request length over calls")
    ax.legend(fontsize=8)
    save(fig, "request_length.png")

    # 3. cumulative cost per policy over every call of every trace (trace order, then call)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    for p in run.policies:
        acc, ys = 0.0, []
        for t in run.traces:
            for c in run.result(p, t).calls:
                acc += measures.cost_usd(c.uncached_tokens, c.cached_tokens, prices)
                ys.append(acc)
        ax.plot(range(1, len(ys) + 1), ys, label=f"{p} (\\${acc:,.2f})", color=POLICY_COLORS.get(p),
                ls=POLICY_STYLES.get(p, "-"), lw=1.5)
    ax.set_xlabel(f"model calls, all {len(run.traces)} traces in name order")
    ax.set_ylabel("cumulative input cost (USD)")
    ax.set_title(f"Cumulative input cost (\\${prices.uncached:g} per million uncached, \\${prices.cached:g} per million "
                 "cached input tokens)")
    ax.legend(fontsize=8)
    save(fig, "cumulative_cost.png")
    return paths


def profile_info(profile_name: str) -> dict[str, Any]:
    """The profile's sizes and cache model (no tokenizer is loaded)."""
    from app.settings import Settings
    from app.tokenizers.profiles import ProfileRegistry, load_profiles

    profile = ProfileRegistry(load_profiles(Settings().profiles_path)).get(profile_name)
    return {"name": profile.name, "model": profile.model, "window": profile.window,
            "output_reserve": profile.output_reserve, "headroom": profile.headroom,
            "input_limit": profile.budget.input_limit, "low_watermark": profile.low_watermark, "watermarks": profile.watermarks.as_dict(),
            "cache": dict(profile.cache), "prices": dict(profile.prices)}


def default_prices(info: dict[str, Any], uncached: float | None, cached: float | None) -> measures.Prices:
    """CLI prices, else the profile's, else $3 / $0.30 per million."""
    p = info.get("prices") or {}
    return measures.Prices(
        uncached=uncached if uncached is not None else float(p.get("input_usd_per_mtok", measures.DEFAULT_PRICES.uncached)),
        cached=cached if cached is not None else float(p.get("cached_input_usd_per_mtok", measures.DEFAULT_PRICES.cached)))


def write_report(run: EvalRun, out: str | Path, *, prices: measures.Prices | None = None,
                 info: dict[str, Any] | None = None, plots: bool = True) -> dict[str, Any]:
    """Write results.json, calls.jsonl, report.md and the PNG plots into ``out``
    (created if missing). Returns the results document."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    info = info or profile_info(run.profile)
    prices = prices or default_prices(info, None, None)
    results = build_results(run, prices, info)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    with (out / "calls.jsonl").open("w", encoding="utf-8") as fh:
        for r in run.results:
            for c in r.calls:
                row = {"policy": r.policy, "trace": r.trace, **c.__dict__}
                row["cost_usd"] = measures.cost_usd(c.uncached_tokens, c.cached_tokens, prices)
                fh.write(json.dumps(row) + "\n")
    pngs = write_plots(run, out, info, prices) if plots else []
    (out / "report.md").write_text(render_markdown(results, pngs), encoding="utf-8")
    return results
