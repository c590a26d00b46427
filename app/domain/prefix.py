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
block hashes (truncated to 64 bits each: a false match costs a wrong
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

import base64
import hashlib
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, AnyStr, Literal, cast

__all__ = [
    "BodyDigest",
    "CacheKind",
    "CacheModel",
    "PrefixState",
    "ReuseReport",
    "block_hashes",
    "body_sha256",
    "common_prefix_len",
    "predict_reuse",
    "prefix_state",
]

CacheKind = Literal["vllm_blocks", "openai", "anthropic", "none"]
_KINDS: tuple[str, ...] = ("vllm_blocks", "openai", "anthropic", "none")

ROOT = bytes(32)
HASH_BYTES = 8  # bytes kept per block hash in PrefixState (64 bits)
STATE_VERSION = 2

_U32 = "I" if array("I").itemsize == 4 else "L"


def _pack(ids: Sequence[int] | bytes) -> bytes:
    """``ids`` as packed little-endian uint32 (bytes are taken as already packed)."""
    if isinstance(ids, bytes):
        return ids
    if isinstance(ids, array) and ids.itemsize == 4 and sys.byteorder == "little":
        return ids.tobytes()
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


def _chain(ids: Sequence[int] | bytes, block_size: int,
           reuse: Sequence[bytes] = ()) -> tuple[list[bytes], bytes | None, bytes]:
    """Full-block chained digests, the digest of the trailing partial block (None if
    none), and the packed ids. ``reuse``: digests known to be this chain's first blocks
    (the previous request's, up to the common prefix); only later blocks are hashed."""
    packed = _pack(ids)
    n = len(packed) // 4
    step = 4 * block_size
    n_full = n // block_size
    mv = memoryview(packed)
    start = min(len(reuse), n_full)
    out: list[bytes] = list(reuse[:start])
    parent = out[-1] if out else ROOT
    sha = hashlib.sha256
    for i in range(start, n_full):
        parent = sha(parent + mv[i * step : (i + 1) * step]).digest()
        out.append(parent)
    tail = sha(parent + mv[n_full * step :]).digest() if n % block_size else None
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


def _short(d: bytes) -> bytes:
    return d[:HASH_BYTES]


def common_prefix_len(a: AnyStr, b: AnyStr) -> int:
    """Length of the common prefix of two strings or two byte strings. The usual case, one
    extending the other, costs one comparison; otherwise a binary search for the first
    difference, each probe one comparison in C from the known common prefix on (of a
    memoryview of ``b`` for bytes: nothing copied), so about log2(n) probes."""
    if a.startswith(b):  # the usual case: a request extends the previous one
        return len(b)
    if b.startswith(a):
        return len(a)
    other: Any = memoryview(b) if isinstance(b, bytes) else b
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a.startswith(other[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


DIGEST_MARK_BYTES = 16 * 1024  # body_sha256: a sha256 midstate kept every this many bytes


@dataclass(frozen=True)
class BodyDigest:
    """The sha256 (hex) of a served request's bytes, with the bytes and the hash's midstates
    at every ``DIGEST_MARK_BYTES`` bytes (``(offset, hashlib object)``, ascending): the next
    request of the session extends most of it, so only what follows their common prefix is
    hashed (:func:`body_sha256`). The midstates are never updated (copies are)."""

    body: bytes = field(repr=False)
    marks: tuple[tuple[int, Any], ...] = field(repr=False)
    hexdigest: str

    @property
    def nbytes(self) -> int:
        """Bytes held (the body and about 200 per midstate), for memo accounting."""
        return len(self.body) + 200 * len(self.marks)


def body_sha256(body: bytes, previous: BodyDigest | None = None) -> BodyDigest:
    """``hashlib.sha256(body).hexdigest()`` (in ``hexdigest``), hashing only the bytes after
    the last midstate of ``previous`` (another request's :class:`BodyDigest`) that lies
    within their common prefix; the same digest whatever ``previous`` is."""
    kept: list[tuple[int, Any]] = []
    if previous is not None and previous.marks:
        common = common_prefix_len(body, previous.body)
        kept = [mark for mark in previous.marks if mark[0] <= common]
    pos, h = (kept[-1][0], kept[-1][1].copy()) if kept else (0, hashlib.sha256())
    view = memoryview(body)
    while pos + DIGEST_MARK_BYTES <= len(body):
        h.update(view[pos : pos + DIGEST_MARK_BYTES])
        pos += DIGEST_MARK_BYTES
        kept.append((pos, h.copy()))
    h.update(view[pos:])
    return BodyDigest(body=body, marks=tuple(kept), hexdigest=h.hexdigest())


@dataclass(frozen=True)
class PrefixState:
    """What a session keeps of its previous request (see module docstring). Sizes in tokens.

    ``digests``: the full blocks' chained hashes, truncated to ``HASH_BYTES`` (8) bytes
    each and concatenated (block i at ``digests[8*i : 8*i+8]``), so that comparing two
    states is one byte-string comparison. ``tail_digest`` and the breakpoint digests are
    truncated the same way. JSON (:meth:`to_json`, version 2): the digests as one base64
    string, the others as hex; version 1 (one hex string per block) is still read.
    """

    length: int
    block_size: int
    digests: bytes = field(repr=False)
    tail_digest: bytes | None = None
    breakpoints: tuple[tuple[int, bytes], ...] = ()

    @property
    def n_blocks(self) -> int:
        return len(self.digests) // HASH_BYTES

    @property
    def fingerprint(self) -> str:
        """32 hex chars naming the request's ids (to 64-bit digests): the length, block
        size, last full block's digest (chained, so it covers every earlier block), the
        tail digest and the breakpoints. What the store keeps of a served request."""
        h = hashlib.sha256(f"{self.length}/{self.block_size}/".encode())
        h.update(self.digests[-HASH_BYTES:])
        h.update(self.tail_digest or b"-")
        for offset, digest in self.breakpoints:
            h.update(f"/{offset}:".encode() + digest)
        return h.hexdigest()[:32]

    @property
    def block_hashes(self) -> tuple[str, ...]:
        """The truncated block hashes as hex strings (16 chars each), in block order."""
        d = self.digests
        return tuple(d[i : i + HASH_BYTES].hex() for i in range(0, len(d), HASH_BYTES))

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "length": self.length,
            "block_size": self.block_size,
            "digests": base64.b64encode(self.digests).decode("ascii"),
            "tail_hash": None if self.tail_digest is None else self.tail_digest.hex(),
            "breakpoints": [[o, h.hex()] for o, h in self.breakpoints],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrefixState:
        """ValueError on an unknown version or an inconsistent state."""
        version = data.get("v")
        if version == 1:
            digests = bytes.fromhex("".join(str(h) for h in data["block_hashes"]))
        elif version == STATE_VERSION:
            digests = base64.b64decode(str(data["digests"]), validate=True)
        else:
            raise ValueError(f"unsupported PrefixState version {version!r}")
        tail = data.get("tail_hash")
        st = cls(
            length=int(data["length"]),
            block_size=int(data["block_size"]),
            digests=digests,
            tail_digest=None if tail is None else bytes.fromhex(str(tail)),
            breakpoints=tuple((int(o), bytes.fromhex(str(h))) for o, h in data.get("breakpoints", ())),
        )
        if st.block_size < 1 or len(st.digests) != (st.length // st.block_size) * HASH_BYTES or (
            st.tail_digest is None
        ) != (st.length % st.block_size == 0):
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
    packed: bytes = field(default=b"", repr=False, compare=False)  # the ids, little-endian uint32

    @property
    def uncached_tokens(self) -> int:
        return self.total_tokens - self.predicted_cached_tokens


def _check_breakpoints(breakpoints: Sequence[int], n: int, model: CacheModel) -> tuple[int, ...]:
    bps = tuple(sorted({int(b) for b in breakpoints}))
    if model.kind == "anthropic" and len(bps) > model.max_breakpoints:
        raise ValueError(f"at most {model.max_breakpoints} cache breakpoints, got {len(bps)}")
    for b in bps:
        if not 0 < b <= n:
            raise ValueError(f"breakpoint {b} outside 1..{n} (token offsets of the end of a cached prefix)")
    return bps


def _state(
    ids: Sequence[int] | bytes, block_size: int, bps: tuple[int, ...], reuse: Sequence[bytes] = (), reuse_digests: bytes = b""
) -> tuple[PrefixState, list[bytes], bytes, dict[int, bytes]]:
    chain, tail, packed = _chain(ids, block_size, reuse)
    bp_digests = {b: _prefix_digest(chain, packed, block_size, b) for b in bps}
    # The reused blocks' truncated digests are the previous state's own bytes when that
    # state is the one ``reuse`` came from: the digests are chained, so checking the last
    # reused block checks them all.
    known = min(len(reuse), len(chain), len(reuse_digests) // HASH_BYTES)
    if known and reuse_digests[(known - 1) * HASH_BYTES : known * HASH_BYTES] != chain[known - 1][:HASH_BYTES]:
        known = 0
    digests = reuse_digests[: known * HASH_BYTES] + b"".join([h[:HASH_BYTES] for h in chain[known:]])
    state = PrefixState(
        length=len(packed) // 4,
        block_size=block_size,
        digests=digests,
        tail_digest=None if tail is None else _short(tail),
        breakpoints=tuple((b, _short(d)) for b, d in bp_digests.items()),
    )
    return state, chain, packed, bp_digests


def prefix_state(ids: Sequence[int], model: CacheModel, *, breakpoints: Sequence[int] = ()) -> PrefixState:
    """The :class:`PrefixState` of ``ids`` (what :func:`predict_reuse` returns as ``state``)."""
    return _state(ids, model.block_size, _check_breakpoints(breakpoints, len(ids), model))[0]


def predict_reuse(
    prev: PrefixState | None,
    ids: Sequence[int] | bytes,
    model: CacheModel,
    *,
    breakpoints: Sequence[int] = (),
    prev_ids: Sequence[int] | bytes | None = None,
    prev_chain: Sequence[bytes] | None = None,
) -> ReuseReport:
    """Predict the cached tokens of request ``ids`` given the previous request's state.

    ``breakpoints``: token offsets where this request ends a cache_control block (the
    cached prefix is ``ids[:b]``); used by the ``anthropic`` model, recorded in the state.
    ``prev_ids``: the previous request's ids, optional, makes the common prefix and the
    first divergence exact (ValueError if its length is not ``prev.length``).
    ``ids`` and ``prev_ids`` may be given packed (bytes of little-endian uint32, as
    ``ReuseReport.packed``): nothing is then converted. ``prev_chain``: the previous
    request's full block digests (``ReuseReport.chain``), optional, spares re-hashing
    the common prefix.

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
    packed = _pack(ids)
    n = len(packed) // 4
    bs = model.block_size
    bps = _check_breakpoints(breakpoints, n, model)
    prev_packed = None if prev_ids is None else _pack(prev_ids)
    reuse: Sequence[bytes] = ()
    if prev is not None and prev_packed is not None and prev_chain is not None and len(prev_packed) // 4 == prev.length \
            and prev.block_size == bs and len(prev_chain) == prev.length // bs:
        # the previous request's full digests (kept by the caller) cover the common prefix
        reuse = prev_chain[: common_prefix_len(packed, prev_packed) // 4 // bs]
    state, chain, packed, bp_digests = _state(packed, bs, bps, reuse, prev.digests if reuse and prev else b"")

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
            packed=packed,
        )

    p = prev.length
    m = common_prefix_len(state.digests, prev.digests) // HASH_BYTES
    common, exact, extends = _common_prefix(prev, packed, prev_packed, chain, m, bs)
    divergence = None if extends else common  # exact, or the start of the first differing block
    predicted = _predicted_cached(model, prev, packed, chain, bp_digests, bps, common, m)
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
        packed=packed,
    )


def _common_prefix(prev: PrefixState, packed: bytes, prev_packed: bytes | None, chain: list[bytes], m: int,
                   bs: int) -> tuple[int, bool, bool]:
    """(common prefix tokens, whether exact, whether this request extends the previous one)
    of a request whose first ``m`` full blocks match the previous request's: exact with the
    previous ids, else from the block digests (and the previous tail's digest)."""
    p = prev.length
    if prev_packed is not None:
        if len(prev_packed) // 4 != p:
            raise ValueError(f"prev_ids has {len(prev_packed) // 4} tokens, previous state {p}")
        lo, hi = 4 * m * bs, 4 * (m * bs + bs)
        common = m * bs + common_prefix_len(packed[lo:hi], prev_packed[lo:hi]) // 4
        return common, True, common == p
    n = len(packed) // 4
    if m == prev.n_blocks and n >= p:
        # every full block of the previous request matched; check its partial tail
        if prev.tail_digest is None or _short(_prefix_digest(chain, packed, bs, p)) == prev.tail_digest:
            return p, True, True
    elif m == len(chain) and n <= p and n % bs == 0:
        return m * bs, True, False  # the new request is a prefix of the previous one, ending on a block
    return m * bs, False, False


def _predicted_cached(model: CacheModel, prev: PrefixState, packed: bytes, chain: list[bytes],
                      bp_digests: Mapping[int, bytes], bps: tuple[int, ...], common: int, m: int) -> int:
    """The cached tokens ``model`` predicts for a request sharing ``common`` tokens (``m``
    full blocks) with the previous one (:func:`predict_reuse`)."""
    n, bs = len(packed) // 4, model.block_size
    if model.kind == "vllm_blocks":
        usable = min(m, (n - 1) // bs) if n > 0 else 0
        return usable * bs
    if model.kind == "openai":
        return 0 if common < model.min_tokens else (
            model.min_tokens + model.increment * ((common - model.min_tokens) // model.increment)
        )
    predicted = 0
    if model.kind == "anthropic" and bps:
        last_bp = bps[-1]
        for off, h in prev.breakpoints:
            if off < model.min_tokens or off > last_bp or off > n:
                continue
            d = bp_digests.get(off) or _prefix_digest(chain, packed, bs, off)
            if _short(d) == h and off > predicted:
                predicted = off
    return predicted
