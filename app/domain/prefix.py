"""Prefix reuse accounting: how many tokens of a request a provider's prompt cache can
serve from the previous request of the same session (DESIGN.md section 2, seed 001
"Prompt caching for agents"). Pure: standard library only.

Block hashes
------------
As vLLM's automatic prefix caching does, the token ids are cut into blocks of
``block_size`` tokens and hashed as a chain::

    h_0 = ROOT (32 zero bytes)
    h_i = sha256(h_{i-1} || uint32le(ids[(i-1)*B : i*B]))      i = 1 .. floor(n / B)

Only full blocks get a hash. Because each hash covers its parent, "block i equal" means
"the whole prefix up to block i equal", so the number of leading equal block hashes is
the common prefix length to block precision. (vLLM hashes a different byte encoding and
adds extra keys such as LoRA and cache salt; only the chain structure is copied, the
hashes are not vLLM's.)

:class:`PrefixState` is what a session keeps of its previous request: the length, the
block hashes (truncated to 64 bits each, 16 hex chars: a false match costs a wrong
prediction, nothing else), the hash of the trailing partial block (so "the new request
extends the previous one entirely" is exact), and the prefix hashes at the previous
request's cache breakpoints (Anthropic model). It holds no token ids; JSON via
:meth:`PrefixState.to_json` / :meth:`PrefixState.from_json`.

Common prefix and first divergence
----------------------------------
Without the previous ids, the common prefix is known to block precision:
``matched_blocks * B``, raised to the exact value when the new ids extend the previous
request entirely (tail hash matches), or when the new request is a prefix of the previous
one ending on a block boundary. ``first_divergence_offset`` is then the start of the first
differing block. Pass ``prev_ids`` to get both exact (``common_prefix_exact`` says which).
Block precision is enough for every cache model below: their thresholds are multiples of
the block size (checked in :class:`CacheModel`), so they give the same answer.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

__all__ = [
    "CacheModel",
    "CacheKind",
    "PrefixState",
    "ReuseReport",
    "block_hashes",
    "predict_reuse",
    "prefix_state",
]

CacheKind = Literal["vllm_blocks", "openai", "anthropic", "none"]
_KINDS: tuple[str, ...] = ("vllm_blocks", "openai", "anthropic", "none")

ROOT = bytes(32)
HASH_HEX = 16  # hex chars kept per block hash in PrefixState (64 bits)
STATE_VERSION = 1

_U32 = "I" if array("I").itemsize == 4 else "L"


def _pack(ids: Sequence[int]) -> bytes:
    a = array(_U32, ids)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


@dataclass(frozen=True)
class CacheModel:
    """How a provider caches prompt prefixes (a profile's ``cache`` table).

    kind:
      * ``vllm_blocks``: automatic prefix caching in full blocks of ``block_size`` tokens.
        cached = leading full blocks equal to the previous request's, x block_size, but
        never the whole prompt: vLLM recomputes at least the last token, so at most
        ``(n - 1) // block_size`` blocks count (a prompt of exactly k blocks reuses k - 1).
      * ``openai``: automatic, from ``min_tokens`` (1024) in ``increment`` (128) steps:
        cached = largest ``min_tokens + increment * k`` <= common prefix, 0 below min_tokens.
      * ``anthropic``: explicit cache breakpoints (``cache_control``, at most
        ``max_breakpoints`` = 4 per request), see :func:`predict_reuse`.
      * ``none``: no prompt cache; predicted 0.

    ``block_size`` is also the hash granularity for every kind; ``min_tokens`` and
    ``increment`` must be multiples of it (so block precision gives exact predictions).
    """

    kind: CacheKind = "vllm_blocks"
    block_size: int = 16
    min_tokens: int = 1024
    increment: int = 128
    max_breakpoints: int = 4

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown cache model kind {self.kind!r}; expected one of {_KINDS}")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")
        if self.min_tokens < 0 or self.increment < 1 or self.max_breakpoints < 0:
            raise ValueError("min_tokens >= 0, increment >= 1, max_breakpoints >= 0 required")
        if self.kind == "openai" and (self.min_tokens % self.block_size or self.increment % self.block_size):
            raise ValueError("openai: min_tokens and increment must be multiples of block_size")

    @classmethod
    def vllm_blocks(cls, block_size: int = 16) -> CacheModel:
        return cls("vllm_blocks", block_size=block_size)

    @classmethod
    def openai(cls, min_tokens: int = 1024, increment: int = 128, *, block_size: int = 16) -> CacheModel:
        return cls("openai", block_size=block_size, min_tokens=min_tokens, increment=increment)

    @classmethod
    def anthropic(cls, min_tokens: int = 1024, max_breakpoints: int = 4, *, block_size: int = 16) -> CacheModel:
        return cls("anthropic", block_size=block_size, min_tokens=min_tokens, max_breakpoints=max_breakpoints)

    @classmethod
    def from_profile(cls, table: Mapping[str, Any]) -> CacheModel:
        """From a profile's ``cache`` table, e.g. ``{model = "vllm_blocks", block_size = 16}``
        (``model`` or ``kind`` names the kind). ValueError on unknown keys."""
        params = dict(table)
        kind = str(params.pop("model", None) or params.pop("kind", "vllm_blocks"))
        allowed = {"block_size", "min_tokens", "increment", "max_breakpoints"}
        unknown = set(params) - allowed
        if unknown:
            raise ValueError(f"unknown cache model parameters: {sorted(unknown)}")
        return cls(cast(CacheKind, kind), **{k: int(v) for k, v in params.items()})


def _chain(ids: Sequence[int], block_size: int, reuse: Sequence[bytes] = ()) -> tuple[list[bytes], bytes | None, bytes]:
    """Full-block chained digests, the digest of the trailing partial block (None if
    none), and the packed ids. ``reuse``: digests known to be this chain's first blocks
    (the previous request's, up to the common prefix); only later blocks are hashed."""
    packed = _pack(ids)
    step = 4 * block_size
    n_full = len(ids) // block_size
    mv = memoryview(packed)
    start = min(len(reuse), n_full)
    out: list[bytes] = list(reuse[:start])
    parent = out[-1] if out else ROOT
    sha = hashlib.sha256
    for i in range(start, n_full):
        parent = sha(parent + mv[i * step : (i + 1) * step]).digest()
        out.append(parent)
    tail = sha(parent + mv[n_full * step :]).digest() if len(ids) % block_size else None
    return out, tail, packed


def block_hashes(ids: Sequence[int], block_size: int = 16) -> list[str]:
    """Chained hashes (full sha256 hex) of the full blocks of ``ids``."""
    return [h.hex() for h in _chain(ids, block_size)[0]]


def _prefix_digest(chain: list[bytes], packed: bytes, block_size: int, offset: int) -> bytes:
    """Digest of ids[:offset]: the chain up to the last full block, then the remainder."""
    q, r = divmod(offset, block_size)
    parent = chain[q - 1] if q else ROOT
    if r == 0:
        return parent
    return hashlib.sha256(parent + packed[4 * q * block_size : 4 * offset]).digest()


def _short(d: bytes) -> str:
    return d.hex()[:HASH_HEX]


@dataclass(frozen=True)
class PrefixState:
    """What a session keeps of its previous request (see module docstring). Sizes in tokens."""

    length: int
    block_size: int
    block_hashes: tuple[str, ...] = field(repr=False)
    tail_hash: str | None = None
    breakpoints: tuple[tuple[int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "length": self.length,
            "block_size": self.block_size,
            "block_hashes": list(self.block_hashes),
            "tail_hash": self.tail_hash,
            "breakpoints": [[o, h] for o, h in self.breakpoints],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrefixState:
        """ValueError on an unknown version or an inconsistent state."""
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"unsupported PrefixState version {data.get('v')!r}")
        st = cls(
            length=int(data["length"]),
            block_size=int(data["block_size"]),
            block_hashes=tuple(str(h) for h in data["block_hashes"]),
            tail_hash=None if data.get("tail_hash") is None else str(data["tail_hash"]),
            breakpoints=tuple((int(o), str(h)) for o, h in data.get("breakpoints", ())),
        )
        if len(st.block_hashes) != st.length // st.block_size or (st.tail_hash is None) != (
            st.length % st.block_size == 0
        ):
            raise ValueError("inconsistent PrefixState: block hashes do not match length")
        return st


@dataclass(frozen=True)
class ReuseReport:
    """Prefix reuse of one request against the previous one of its session (tokens).

    * ``predicted_cached_tokens``: what the cache model says the provider will serve cached.
    * ``common_prefix_tokens``: leading tokens equal to the previous request; exact when
      ``common_prefix_exact``, else a lower bound to block precision (< block_size short).
    * ``first_divergence_offset``: offset of the first differing token (block start when
      not exact); None when the new request extends the previous one entirely (or there is
      no previous request); equal to ``total_tokens`` when the new request is a strict
      prefix of the previous one.
    * ``state``: the :class:`PrefixState` of this request, to keep for the next one.
    """

    model: CacheModel
    total_tokens: int
    previous_tokens: int
    matched_blocks: int
    common_prefix_tokens: int
    common_prefix_exact: bool
    first_divergence_offset: int | None
    predicted_cached_tokens: int
    breakpoints: tuple[int, ...]
    state: PrefixState = field(repr=False)
    chain: tuple[bytes, ...] = field(default=(), repr=False, compare=False)

    @property
    def uncached_tokens(self) -> int:
        return self.total_tokens - self.predicted_cached_tokens


def _check_breakpoints(breakpoints: Sequence[int], n: int, model: CacheModel) -> tuple[int, ...]:
    bps = tuple(sorted(set(int(b) for b in breakpoints)))
    if model.kind == "anthropic" and len(bps) > model.max_breakpoints:
        raise ValueError(f"at most {model.max_breakpoints} cache breakpoints, got {len(bps)}")
    for b in bps:
        if not 0 < b <= n:
            raise ValueError(f"breakpoint {b} outside 1..{n} (token offsets of the end of a cached prefix)")
    return bps


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences (packed, compared 4 KiB at a
    time: the comparisons run in C)."""
    pa = a.tobytes() if isinstance(a, array) else _pack(a)
    pb = b.tobytes() if isinstance(b, array) else _pack(b)
    n = min(len(pa), len(pb))
    i, step = 0, 4096
    while i < n and pa[i : i + step] == pb[i : i + step]:
        i += step
    if i >= n:
        return n // 4
    j = i
    while j < n and pa[j] == pb[j]:
        j += 1
    return j // 4


def _state(
    ids: Sequence[int], block_size: int, bps: tuple[int, ...], reuse: Sequence[bytes] = ()
) -> tuple[PrefixState, list[bytes], bytes, dict[int, bytes]]:
    chain, tail, packed = _chain(ids, block_size, reuse)
    bp_digests = {b: _prefix_digest(chain, packed, block_size, b) for b in bps}
    state = PrefixState(
        length=len(ids),
        block_size=block_size,
        block_hashes=tuple(_short(h) for h in chain),
        tail_hash=None if tail is None else _short(tail),
        breakpoints=tuple((b, _short(d)) for b, d in bp_digests.items()),
    )
    return state, chain, packed, bp_digests


def prefix_state(ids: Sequence[int], model: CacheModel, *, breakpoints: Sequence[int] = ()) -> PrefixState:
    """The :class:`PrefixState` of ``ids`` (what :func:`predict_reuse` returns as ``state``)."""
    return _state(ids, model.block_size, _check_breakpoints(breakpoints, len(ids), model))[0]


def predict_reuse(
    prev: PrefixState | None,
    ids: Sequence[int],
    model: CacheModel,
    *,
    breakpoints: Sequence[int] = (),
    prev_ids: Sequence[int] | None = None,
    prev_chain: Sequence[bytes] | None = None,
) -> ReuseReport:
    """Predict the cached tokens of request ``ids`` given the previous request's state.

    ``breakpoints``: token offsets where this request ends a cache_control block (the
    cached prefix is ``ids[:b]``); used by the ``anthropic`` model, recorded in the state.
    ``prev_ids``: the previous request's ids, optional, makes the common prefix and the
    first divergence exact (ValueError if its length is not ``prev.length``).

    Anthropic rule (this module's exact model of it): the previous request wrote a cache
    entry at each of its breakpoints ``p`` with ``p >= min_tokens``. This request reads
    entry ``p`` if its own prefix ``ids[:p]`` is identical (prefix hash equal) and it has a
    breakpoint at some ``b >= p`` (Anthropic looks back from each breakpoint for the
    longest cached prefix). cached = the largest such ``p``, else 0. Simplifications: only
    the previous request's entries are known (no TTL, no older requests), and the
    lookback is not limited to 20 content blocks.

    Errors: ValueError for more than ``max_breakpoints`` breakpoints (anthropic) or a
    breakpoint outside ``1..len(ids)``.
    """
    n = len(ids)
    bs = model.block_size
    bps = _check_breakpoints(breakpoints, n, model)
    reuse: Sequence[bytes] = ()
    if prev is not None and prev_ids is not None and prev_chain is not None and len(prev_ids) == prev.length \
            and prev.block_size == bs and len(prev_chain) == prev.length // bs:
        # the previous request's full digests (kept by the caller) cover the common prefix
        reuse = prev_chain[: common_prefix_length(ids, prev_ids) // bs]
    state, chain, packed, bp_digests = _state(ids, bs, bps, reuse)

    if prev is None or prev.block_size != bs:
        # no previous request (or a profile change of block size): nothing to reuse
        return ReuseReport(
            model=model,
            total_tokens=n,
            previous_tokens=0 if prev is None else prev.length,
            matched_blocks=0,
            common_prefix_tokens=0,
            common_prefix_exact=prev is None,
            first_divergence_offset=None if prev is None else 0,
            predicted_cached_tokens=0,
            breakpoints=bps,
            state=state,
            chain=tuple(chain),
        )

    p = prev.length
    m = 0
    for new_h, old_h in zip(state.block_hashes, prev.block_hashes):
        if new_h != old_h:
            break
        m += 1

    extends = False
    if prev_ids is not None:
        if len(prev_ids) != p:
            raise ValueError(f"prev_ids has {len(prev_ids)} tokens, previous state {p}")
        common = m * bs + common_prefix_length(ids[m * bs : m * bs + bs], prev_ids[m * bs : m * bs + bs])
        exact = True
        extends = common == p
    else:
        common = m * bs
        exact = False
        prev_full = len(prev.block_hashes)
        if m == prev_full and n >= p:
            # every full block of the previous request matched; check its partial tail
            if prev.tail_hash is None or _short(_prefix_digest(chain, packed, bs, p)) == prev.tail_hash:
                common, exact, extends = p, True, True
        elif m == len(chain) and n <= p and n % bs == 0:
            exact = True  # the new request is a prefix of the previous one, ending on a block

    if extends:
        divergence: int | None = None
    else:
        divergence = common  # exact, or the start of the first differing block

    if model.kind == "vllm_blocks":
        usable = min(m, (n - 1) // bs) if n > 0 else 0
        predicted = usable * bs
    elif model.kind == "openai":
        predicted = 0 if common < model.min_tokens else (
            model.min_tokens + model.increment * ((common - model.min_tokens) // model.increment)
        )
    elif model.kind == "anthropic":
        predicted = 0
        if bps:
            last_bp = bps[-1]
            for off, h in prev.breakpoints:
                if off < model.min_tokens or off > last_bp or off > n:
                    continue
                d = bp_digests.get(off) or _prefix_digest(chain, packed, bs, off)
                if _short(d) == h and off > predicted:
                    predicted = off
    else:
        predicted = 0

    return ReuseReport(
        model=model,
        total_tokens=n,
        previous_tokens=p,
        matched_blocks=m,
        common_prefix_tokens=common,
        common_prefix_exact=exact,
        first_divergence_offset=divergence,
        predicted_cached_tokens=predicted,
        breakpoints=bps,
        state=state,
        chain=tuple(chain),
    )
