"""Evaluation metrics for context policies (seed 000 section 4.8, seed 004 part B).

Pure functions over plain values (strings, lists, dicts); standard library only. Every
token quantity is in tokens of the evaluated profile's tokenizer, counted on the rendered
request; prices are USD per million tokens.

Per request (one model call of a replayed trace):

* :func:`constraint_hits` - eq. 6 at one request: which task-contract constraints appear
  verbatim in the request text.
* :func:`pair_errors` - tool calls without results plus results without calls.
* :func:`stale_pairs` - eq. 7's numerator, observation side: superseded observations still
  shown as they were, with no tombstone or notice naming the write.
* :func:`identifiers` / :func:`grounding_candidates` / :func:`grounding_hits` - the
  model-free decision-support proxy ("grounding"), rule in :func:`identifiers`.

Per trace or in total (ratios of sums, never means of ratios, except grounding):

* :func:`reuse_ratio` (cached / input), :func:`cost_usd`,
  :func:`compression_ratio` (eq. 9), :func:`retention_fraction` (eq. 6).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from app.domain.manifest import Item

__all__ = [
    "DEFAULT_PRICES",
    "Observation",
    "Prices",
    "compression_ratio",
    "constraint_hits",
    "contains_identifier",
    "cost_usd",
    "grounding_candidates",
    "grounding_hits",
    "identifiers",
    "names_write",
    "pair_errors",
    "request_text",
    "retention_fraction",
    "reuse_ratio",
    "stale_items",
    "stale_pairs",
    "tool_contents",
]


# --------------------------------------------------------------------------- cost and reuse


@dataclass(frozen=True)
class Prices:
    """USD per million input tokens: ``uncached`` at full price, ``cached`` for prompt-cache
    reads. Output tokens are not counted (the policies do not change them on a replay)."""

    uncached: float = 3.0
    cached: float = 0.30


DEFAULT_PRICES = Prices()


def cost_usd(uncached_tokens: int, cached_tokens: int, prices: Prices = DEFAULT_PRICES) -> float:
    """Input cost in USD: ``uncached * p_uncached / 1e6 + cached * p_cached / 1e6``
    (seed 000 notebook 4.2's billing: cached reads at a discount, no storage fees)."""
    return (uncached_tokens * prices.uncached + cached_tokens * prices.cached) / 1_000_000


def reuse_ratio(cached_tokens: int, input_tokens: int) -> float | None:
    """Cached / input tokens (a ratio of sums); None when there was no input."""
    return cached_tokens / input_tokens if input_tokens else None


def compression_ratio(reference_tokens: int, policy_tokens: int) -> float | None:
    """Eq. 9, ``R = L_ref / L_policy``: the uncompacted reference request's tokens (here
    ``append``: the whole transcript as the agent sent it) over the policy's, both counted
    on complete serialized requests with the same tokenizer. Summed over requests first
    (a ratio of sums). Above 1.0 means the policy saves tokens; None without tokens."""
    return reference_tokens / policy_tokens if policy_tokens else None


# --------------------------------------------------------------------------- request text


def request_text(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """All text a model sees in an OpenAI chat-completions request: the tool declarations
    (canonical JSON), then each message's ``content`` and each tool call's name and
    ``arguments`` (the JSON text as sent), one block per message, in order. Reasoning
    fields are not included. Used for every text-presence metric, whatever the policy."""
    parts: list[str] = []
    if tools:
        parts.append(json.dumps(list(tools), sort_keys=True, ensure_ascii=False))
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        for call in m.get("tool_calls") or ():
            fn = call.get("function", call)
            parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(parts)


def tool_contents(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``tool_call_id -> content`` of the request's tool messages."""
    out: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str):
            content = m.get("content")
            out[m["tool_call_id"]] = content if isinstance(content, str) else json.dumps(content)
    return out


# --------------------------------------------------------------------------- eq. 6


#: a user's short message (characters): what the retention of short messages counts
SHORT_USER_CHARS = 400


def constraint_hits(text: str, constraints: Sequence[str]) -> int:
    """Eq. 6 at one request: how many of the task contract's constraint texts appear
    verbatim (exact substring, whitespace included) in the request text."""
    return sum(1 for c in constraints if c and c in text)


def retention_fraction(hits: int, pairs: int) -> float | None:
    """Eq. 6 over a trace or a cohort: retained (request, constraint) pairs / all pairs.

    Seed 000's eq. 6 takes, per constraint, the product of "retained at boundary i" over
    the compaction boundaries; on a replay every request is a boundary where the policy
    may have rewritten the trunk, so the measurable fraction is over (request,
    constraint) pairs. None when the traces declare no constraints."""
    return hits / pairs if pairs else None


# --------------------------------------------------------------------------- pairing


def pair_errors(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tool calls without a result plus results without a call, in one OpenAI-format
    request (multiset count: a call id used twice needs two results)."""
    calls: Counter[str] = Counter()
    results: Counter[str] = Counter()
    for m in messages:
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or ():
                calls[str(c.get("id"))] += 1
        elif m.get("role") == "tool":
            results[str(m.get("tool_call_id"))] += 1
    return sum((calls - results).values()) + sum((results - calls).values())


# --------------------------------------------------------------------------- eq. 7


@dataclass(frozen=True)
class Observation:
    """A tool result as the evaluation knows it: its call id, its payload (the raw tool
    output) and what it read: ``reads`` = ((artifact, revision seen), ...), revisions
    counted from 0 by the session's artifact writes (the server's numbering)."""

    call_id: str
    payload: str
    reads: tuple[tuple[str, int], ...]


PROBE_CHARS = 200  # leading characters of a payload that stand for "its text is shown"


def names_write(text: str, artifact: str, revisions: Iterable[int]) -> bool:
    """Whether ``text`` holds a tombstone or notice naming a write of ``artifact``: one of
    ``"{artifact} r{n}"``, ``"{artifact}@r{n}"``, ``"{artifact} (revision {n})"`` or
    ``"{artifact} revision {n}"`` for a revision ``n`` the write produced (seed 000 table 9;
    ctxd's invalidation, once it exists, names writes in one of these forms)."""
    for n in revisions:
        for form in (f"{artifact} r{n}", f"{artifact}@r{n}", f"{artifact} (revision {n})", f"{artifact} revision {n}"):
            i = text.find(form)
            while i >= 0:
                end = i + len(form)
                if end >= len(text) or not text[end].isdigit():
                    return True
                i = text.find(form, i + 1)
    return False


def stale_pairs(observations: Iterable[Observation], revisions: Mapping[str, int],
                shown: Mapping[str, str], text: str) -> tuple[int, int]:
    """Eq. 7 at one model call: ``(superseded, stale)``.

    ``superseded``: observations that read an artifact which was written after the read
    and before this call (its current revision in ``revisions`` is above the one read).
    ``stale``: those whose text is in the request - a tool message answering the
    observation's call (``shown``: tool_call_id -> content) contains the payload's first
    ``PROBE_CHARS`` characters - with neither a tombstone nor a notice naming the write
    (:func:`names_write`) anywhere in the request text. An empty payload shows nothing and
    is not counted. The stale-support rate of eq. 7 is ``stale / superseded`` (the
    denominator: decisions made while superseded support existed)."""
    superseded = stale = 0
    for obs in observations:
        newer = [(a, r, revisions.get(a, 0)) for a, r in obs.reads if revisions.get(a, 0) > r]
        if not newer or not obs.payload.strip():
            continue
        superseded += 1
        content = shown.get(obs.call_id)
        if content is None or obs.payload[:PROBE_CHARS] not in content:
            continue
        if any(names_write(text, a, range(r + 1, cur + 1)) for a, r, cur in newer):
            continue
        stale += 1
    return superseded, stale


def stale_items(observations: Iterable[Observation], revisions: Mapping[str, int],
                items: Mapping[str, Item]) -> int:
    """Eq. 7 per item (issue 11): superseded observations (as in :func:`stale_pairs`) whose
    manifest item (``items``: call_id -> the item of its tool result, for the items the
    request carries) does not say ``state: historical`` naming a write of an artifact it
    read (``superseded_by`` holding ``path@rN`` with N past the read revision). Checks
    the manifest, not the text: an item whose text happens to mention the write counts."""
    stale = 0
    for obs in observations:
        newer = [(a, r, revisions.get(a, 0)) for a, r in obs.reads if revisions.get(a, 0) > r]
        item = items.get(obs.call_id)
        if not newer or not obs.payload.strip() or item is None or item.zone is None:
            continue
        named = " ".join(item.superseded_by)
        if item.state == "historical" and any(names_write(named, a, range(r + 1, cur + 1)) for a, r, cur in newer):
            continue
        stale += 1
    return stale


# --------------------------------------------------------------------------- grounding

_EXT = ("py|pyi|pyx|pxd|c|h|cc|cpp|hpp|rs|go|js|ts|java|json|toml|cfg|ini|txt|md|rst|yaml|yml|sql|sh|"
        "csv|html|xml|dcm|lock|patch|diff|log")
# A path: at least one '/' between name characters (``pydicom/config.py``, ``/testbed/x``).
_PATH = re.compile(r"(?<![\w.\-/])(?:\.{1,2}/|/)?(?:[\w.\-]+/)+[\w.\-]*\w")
# A file name with a known extension (``config.py``), not part of a longer path.
_FILE = re.compile(r"(?<![\w.\-/])[\w\-]+(?:\.[\w\-]+)*\.(?:" + _EXT + r")(?![\w])")
# A dotted name: two or more identifiers joined by dots (``pydicom.config``, ``os.path.join``).
_DOTTED = re.compile(r"(?<![\w./\-])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w/])")
# A word: snake_case if it has an underscore, CamelCase if it has an inner capital.
_WORD = re.compile(r"(?<![\w])[A-Za-z_]\w*(?![\w])")
# Line numbers: ``line N``, ``lines A-B``, ``path:N``, ``sed -n 'A,Bp'`` / ``Np``.
_LINE = re.compile(r"\blines?\s+(\d+)(?:\s*(?:-|to|,|and)\s*(\d+))?", re.IGNORECASE)
_PATH_LINE = re.compile(r"\.\w{1,5}:(\d+)\b")
_SED_RANGE = re.compile(r"(?<![\w])(\d+)\s*(?:,\s*\+?(\d+))?\s*p\b")

MIN_LINE = 10  # line numbers below this are too common to count as an identifier


def _is_snake(word: str) -> bool:
    core = word.strip("_")
    if not any(c.isalpha() for c in core):
        return False
    return "_" in core or (word.startswith("_") and len(core) >= 2)


def _is_camel(word: str) -> bool:
    return "_" not in word and any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)


def identifiers(text: str) -> set[str]:
    """The identifiers of ``text`` (the grounding rule; documented in the report):

    * file paths: a run of ``[A-Za-z0-9_.-]`` segments joined by ``/`` (at least one
      ``/``, optional leading ``/``, ``./`` or ``../``), ending in a word character;
    * file names with a known source or data extension (``config.py``);
    * dotted names: two or more identifiers joined by ``.`` (``pydicom.config``);
    * snake_case words (an inner underscore, or a leading one: ``_private``, ``get_value``)
      and CamelCase words (an upper-case letter after the first character and a lower-case
      one: ``DataElement``, ``isEmpty``, ``IOError``);
    * line numbers >= 10 written as ``line N``, ``lines A-B``, ``file.py:N`` or in a sed
      print range ``A,Bp`` / ``Np``; returned as ``"#N"``.

    Identifiers shorter than 3 characters are dropped."""
    out: set[str] = set()
    for rx in (_PATH, _FILE):
        out.update(m.group(0) for m in rx.finditer(text))
    for m in _DOTTED.finditer(text):
        if any(len(part) >= 2 for part in m.group(0).split(".")):  # not "e.g", "i.e"
            out.add(m.group(0))
    for m in _WORD.finditer(text):
        w = m.group(0)
        if _is_snake(w) or _is_camel(w):
            out.add(w)
    for rx in (_LINE, _PATH_LINE, _SED_RANGE):
        for m in rx.finditer(text):
            for g in m.groups():
                if g is not None and int(g) >= MIN_LINE:
                    out.add("#" + str(int(g)))
    return {s for s in out if len(s) >= 3}


@lru_cache(maxsize=65536)
def _number_rx(n: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\d)" + re.escape(n) + r"(?!\d)")


def contains_identifier(text: str, ident: str) -> bool:
    """Whether ``ident`` occurs in ``text`` as a whole token: not preceded or followed by
    a word character (``[A-Za-z0-9_]``). Line numbers (``"#N"``) match ``N`` not
    adjacent to another digit."""
    if ident.startswith("#"):
        return _number_rx(ident[1:]).search(text) is not None
    n = len(ident)
    i = text.find(ident)
    while i >= 0:
        before = text[i - 1] if i > 0 else " "
        after = text[i + n] if i + n < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        i = text.find(ident, i + 1)
    return False


def grounding_candidates(next_text: str, history: str, root: str) -> list[str]:
    """The identifiers of the real agent's next message and command (``next_text``) that
    already appeared earlier in the trajectory (``history``: the contents and tool-call
    arguments of every message before it, as the agent sent them) and that the root
    (``root``: system instructions and tool declarations, which every policy keeps)
    does not hold. Sorted, for determinism."""
    return sorted(i for i in identifiers(next_text)
                  if contains_identifier(history, i) and not contains_identifier(root, i))


def grounding_hits(candidates: Sequence[str], text: str, extra: Sequence[str] = ()) -> tuple[int, int]:
    """``(in request, in request or behind a handle)``: how many ``candidates`` appear in
    the request ``text``, and how many appear there or in one of the ``extra`` texts (the
    payloads behind the handles the request names). grounding = first / len(candidates)."""
    direct = via = 0
    for c in candidates:
        if contains_identifier(text, c):
            direct += 1
            via += 1
        elif any(contains_identifier(e, c) for e in extra):
            via += 1
    return direct, via
