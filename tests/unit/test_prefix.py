"""Prefix reuse accounting (app/domain/prefix.py): chained block hashes and cache models."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.domain.prefix import (
    DIGEST_MARK_BYTES,
    CacheModel,
    PrefixState,
    block_hashes,
    body_sha256,
    common_prefix_len,
    predict_reuse,
    prefix_state,
)

VLLM = CacheModel.vllm_blocks(16)
OPENAI = CacheModel.openai()
token = st.integers(min_value=0, max_value=2**32 - 1)
seq = st.lists(st.integers(min_value=0, max_value=200_000), min_size=0, max_size=200)
block_sizes = st.sampled_from([1, 2, 4, 16])


def _ids(n: int, seed: int = 0) -> list[int]:
    return [(i * 2654435761 + seed) % 151_000 for i in range(n)]


# --- block hashes -----------------------------------------------------------------------


def test_block_hashes_are_chained_and_full_blocks_only() -> None:
    ids = _ids(40)
    h = block_hashes(ids, 16)
    assert len(h) == 2  # 40 tokens -> 2 full blocks, the partial one has no block hash
    other = list(ids)
    other[3] += 1  # a change in block 0 changes block 1's hash too (chain)
    h2 = block_hashes(other, 16)
    assert h2[0] != h[0] and h2[1] != h[1]
    # same block content at a different position hashes differently
    assert block_hashes(ids[16:32], 16)[0] != h[1]


@given(ids=seq, bs=block_sizes)
def test_state_json_round_trip(ids: list[int], bs: int) -> None:
    model = CacheModel.vllm_blocks(bs)
    bps = sorted({len(ids), len(ids) // 2} - {0})
    state = prefix_state(ids, CacheModel("vllm_blocks", block_size=bs, max_breakpoints=4), breakpoints=bps)
    data = json.loads(json.dumps(state.to_json()))
    assert PrefixState.from_json(data) == state
    assert len(state.block_hashes) == len(ids) // bs
    assert predict_reuse(None, ids, model, breakpoints=bps).state == state


def test_state_from_json_rejects_inconsistent() -> None:
    data = prefix_state(_ids(40), VLLM).to_json()
    data["length"] = 64
    with pytest.raises(ValueError):
        PrefixState.from_json(data)
    with pytest.raises(ValueError):
        PrefixState.from_json({**prefix_state(_ids(4), VLLM).to_json(), "v": 99})


# --- vllm_blocks ------------------------------------------------------------------------


@given(base=seq, ext=st.lists(token, min_size=1, max_size=60), bs=block_sizes)
def test_extending_keeps_all_previous_full_blocks_cached(base: list[int], ext: list[int], bs: int) -> None:
    model = CacheModel.vllm_blocks(bs)
    prev = predict_reuse(None, base, model).state
    new = base + ext
    for prev_ids in (None, base):
        r = predict_reuse(prev, new, model, prev_ids=prev_ids)
        assert r.matched_blocks == len(base) // bs
        assert r.predicted_cached_tokens == (len(base) // bs) * bs
        assert r.common_prefix_tokens == len(base) and r.common_prefix_exact
        assert r.first_divergence_offset is None  # extends the previous request entirely
        assert r.previous_tokens == len(base)


@given(ids=seq.filter(lambda s: len(s) > 0), data=st.data(), bs=block_sizes)
def test_changing_token_j_invalidates_blocks_from_j(ids: list[int], data: st.DataObject, bs: int) -> None:
    model = CacheModel.vllm_blocks(bs)
    j = data.draw(st.integers(min_value=0, max_value=len(ids) - 1))
    changed = list(ids)
    changed[j] = ids[j] + 1
    prev = predict_reuse(None, ids, model).state
    r = predict_reuse(prev, changed, model)
    assert r.matched_blocks == j // bs
    assert r.predicted_cached_tokens == (j // bs) * bs
    # without the previous ids: block precision; the divergence is inside block j // bs
    assert r.common_prefix_tokens <= j < r.common_prefix_tokens + bs or r.common_prefix_tokens == j
    assert r.first_divergence_offset == r.common_prefix_tokens
    exact = predict_reuse(prev, changed, model, prev_ids=ids)
    assert exact.first_divergence_offset == j and exact.common_prefix_tokens == j
    assert exact.predicted_cached_tokens == r.predicted_cached_tokens


@given(ids=seq, bs=block_sizes)
def test_identical_request_recomputes_the_last_token(ids: list[int], bs: int) -> None:
    model = CacheModel.vllm_blocks(bs)
    prev = predict_reuse(None, ids, model).state
    r = predict_reuse(prev, ids, model)
    n = len(ids)
    assert r.first_divergence_offset is None and r.common_prefix_tokens == n
    # vLLM never serves the whole prompt from cache: at least the last token is computed
    assert r.predicted_cached_tokens == (max(n - 1, 0) // bs) * bs


def test_no_previous_request() -> None:
    r = predict_reuse(None, _ids(100), VLLM)
    assert (r.predicted_cached_tokens, r.previous_tokens, r.common_prefix_tokens) == (0, 0, 0)
    assert r.first_divergence_offset is None


def test_truncated_request_is_prefix_of_previous() -> None:
    ids = _ids(100)
    prev = predict_reuse(None, ids, VLLM).state
    r = predict_reuse(prev, ids[:64], VLLM)
    assert r.common_prefix_tokens == 64 and r.common_prefix_exact
    assert r.first_divergence_offset == 64  # new request ends inside the previous one
    assert r.predicted_cached_tokens == 48  # 64 tokens = 4 blocks, last token recomputed
    r2 = predict_reuse(prev, ids[:70], VLLM)  # not on a block boundary: block precision
    assert r2.common_prefix_tokens == 64 and not r2.common_prefix_exact
    assert predict_reuse(prev, ids[:70], VLLM, prev_ids=ids).common_prefix_tokens == 70


def test_block_size_change_means_no_reuse() -> None:
    prev = predict_reuse(None, _ids(100), VLLM).state
    r = predict_reuse(prev, _ids(100), CacheModel.vllm_blocks(32))
    assert r.predicted_cached_tokens == 0 and r.first_divergence_offset == 0


# --- openai -----------------------------------------------------------------------------


def _openai_rule(common: int) -> int:
    return 0 if common < 1024 else 1024 + 128 * ((common - 1024) // 128)


@pytest.mark.parametrize(
    ("common", "cached"),
    [(0, 0), (1000, 0), (1023, 0), (1024, 1024), (1100, 1024), (1151, 1024), (1152, 1152), (1279, 1152),
     (1280, 1280), (5000, 4992)],
)
def test_openai_thresholds(common: int, cached: int) -> None:
    base = _ids(6000)
    prev = predict_reuse(None, base, OPENAI).state
    new = base[:common] + [x + 1 for x in base[common:]]
    for prev_ids in (None, base):
        r = predict_reuse(prev, new, OPENAI, prev_ids=prev_ids)
        assert r.predicted_cached_tokens == cached
    assert predict_reuse(prev, new, OPENAI, prev_ids=base).common_prefix_tokens == common


@settings(max_examples=60)
@given(n=st.integers(min_value=0, max_value=3000), data=st.data())
def test_openai_block_precision_gives_exact_answer(n: int, data: st.DataObject) -> None:
    base = _ids(n)
    common = data.draw(st.integers(min_value=0, max_value=n))
    extra = data.draw(st.integers(min_value=0, max_value=300))
    new = base[:common] + [x + 7 for x in base[common:]] + _ids(extra, seed=99)
    assume(new[:common] == base[:common])
    prev = predict_reuse(None, base, OPENAI).state
    exact_common = predict_reuse(prev, new, OPENAI, prev_ids=base).common_prefix_tokens
    r = predict_reuse(prev, new, OPENAI)
    assert r.predicted_cached_tokens == _openai_rule(exact_common)


def test_openai_requires_block_aligned_params() -> None:
    with pytest.raises(ValueError):
        CacheModel.openai(min_tokens=1000)


# --- anthropic --------------------------------------------------------------------------


ANTHROPIC = CacheModel.anthropic(min_tokens=1024)


def test_anthropic_moving_breakpoint_reads_previous_entry() -> None:
    turn1 = _ids(3000)
    turn2 = turn1 + _ids(500, seed=5)
    prev = predict_reuse(None, turn1, ANTHROPIC, breakpoints=[2000, 3000]).state
    # agent pattern: system breakpoint + a breakpoint at the end of the latest message
    r = predict_reuse(prev, turn2, ANTHROPIC, breakpoints=[2000, 3500])
    assert r.predicted_cached_tokens == 3000  # lookback from 3500 finds the entry at 3000
    # no breakpoint at or after the entry: only the earlier one is read
    r2 = predict_reuse(prev, turn2, ANTHROPIC, breakpoints=[2000, 2500])
    assert r2.predicted_cached_tokens == 2000
    # no breakpoints at all: nothing is read
    assert predict_reuse(prev, turn2, ANTHROPIC).predicted_cached_tokens == 0


def test_anthropic_prefix_must_be_identical_and_long_enough() -> None:
    turn1 = _ids(3000)
    prev = predict_reuse(None, turn1, ANTHROPIC, breakpoints=[800, 2000, 3000]).state
    changed = list(turn1)
    changed[2500] += 1  # invalidates the entry at 3000, not the one at 2000
    r = predict_reuse(prev, changed + [1, 2], ANTHROPIC, breakpoints=[800, 3002])
    assert r.predicted_cached_tokens == 2000
    changed[100] += 1  # now every entry differs; 800 is below min_tokens anyway
    r = predict_reuse(prev, changed, ANTHROPIC, breakpoints=[800, 3000])
    assert r.predicted_cached_tokens == 0
    small = predict_reuse(None, turn1, ANTHROPIC, breakpoints=[800]).state
    assert predict_reuse(small, turn1, ANTHROPIC, breakpoints=[800]).predicted_cached_tokens == 0


@settings(max_examples=50)
@given(n=st.integers(min_value=1100, max_value=1300), seed=st.integers(0, 1000), data=st.data())
def test_anthropic_cached_is_a_previous_breakpoint_within_common_prefix(n: int, seed: int, data: st.DataObject) -> None:
    ids = _ids(n, seed)
    prev_bps = sorted(set(data.draw(st.lists(st.integers(1, n), min_size=1, max_size=4))))
    new_bps = sorted(set(data.draw(st.lists(st.integers(1, n), min_size=1, max_size=4))))
    j = data.draw(st.integers(0, n - 1))
    changed = list(ids)
    changed[j] = ids[j] ^ 1
    prev = predict_reuse(None, ids, ANTHROPIC, breakpoints=prev_bps).state
    r = predict_reuse(prev, changed, ANTHROPIC, breakpoints=new_bps)
    want = max((p for p in prev_bps if p >= 1024 and p <= j and p <= new_bps[-1]), default=0)
    assert r.predicted_cached_tokens == want


def test_anthropic_breakpoint_validation() -> None:
    with pytest.raises(ValueError):
        predict_reuse(None, _ids(100), ANTHROPIC, breakpoints=[10, 20, 30, 40, 50])
    with pytest.raises(ValueError):
        predict_reuse(None, _ids(100), ANTHROPIC, breakpoints=[101])
    with pytest.raises(ValueError):
        predict_reuse(None, _ids(100), ANTHROPIC, breakpoints=[0])


# --- profile ----------------------------------------------------------------------------


def test_cache_model_from_profile() -> None:
    assert CacheModel.from_profile({"model": "vllm_blocks", "block_size": 16}) == VLLM
    assert CacheModel.from_profile({"kind": "openai"}).kind == "openai"
    with pytest.raises(ValueError):
        CacheModel.from_profile({"model": "nope"})
    with pytest.raises(ValueError):
        CacheModel.from_profile({"model": "vllm_blocks", "blocksize": 16})
    none = CacheModel("none")
    prev = predict_reuse(None, _ids(100), none).state
    assert predict_reuse(prev, _ids(100), none).predicted_cached_tokens == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=0, max_size=200), st.lists(st.integers(0, 50), max_size=80),
       st.integers(0, 220), st.sampled_from([1, 4, 16]))
def test_incremental_chain_equals_full(prev_ids: list[int], tail: list[int], cut: int, block: int) -> None:
    """Reusing the previous request's digests over the common prefix changes nothing."""
    from app.domain.prefix import CacheModel, predict_reuse

    model = CacheModel.vllm_blocks(block)
    first = predict_reuse(None, prev_ids, model)
    ids = prev_ids[: min(cut, len(prev_ids))] + tail
    full = predict_reuse(first.state, ids, model, prev_ids=prev_ids)
    fast = predict_reuse(first.state, ids, model, prev_ids=prev_ids, prev_chain=first.chain)
    assert fast == full and fast.state == full.state and fast.chain == full.chain


def test_version_1_state_is_still_read() -> None:
    """States written before the packed format (one 16-hex string per block) still load."""
    ids = _ids(100)
    state = prefix_state(ids, VLLM, breakpoints=[50])
    v1 = {"v": 1, "length": state.length, "block_size": 16, "block_hashes": list(state.block_hashes),
          "tail_hash": state.tail_digest.hex(), "breakpoints": [[50, state.breakpoints[0][1].hex()]]}
    assert PrefixState.from_json(v1) == state
    assert predict_reuse(PrefixState.from_json(v1), ids + [7], VLLM).first_divergence_offset is None


@given(base=seq, ext=st.lists(token, max_size=40), cut=st.integers(0, 200))
def test_packed_ids_and_reused_chain_give_the_same_report(base: list[int], ext: list[int], cut: int) -> None:
    """ids as lists or packed bytes, with or without the previous chain: one answer."""
    from app.domain.prefix import _pack

    first = predict_reuse(None, base, VLLM)
    new = base[: min(cut, len(base))] + ext
    plain = predict_reuse(first.state, new, VLLM, prev_ids=base)
    fast = predict_reuse(first.state, _pack(new), VLLM, prev_ids=first.packed, prev_chain=first.chain)
    assert fast == plain
    assert fast.state.digests == prefix_state(new, VLLM).digests
    assert fast.packed == _pack(new)


def test_inconsistent_previous_chain_is_not_trusted() -> None:
    """A remembered chain that is not the stored state's (another worker's request of the
    same length) must not leak the state's digests into the new state."""
    a, b = _ids(64, seed=1), _ids(64, seed=2)
    state_a = predict_reuse(None, a, VLLM).state
    report_b = predict_reuse(None, b, VLLM)
    got = predict_reuse(state_a, b + [1], VLLM, prev_ids=report_b.packed, prev_chain=report_b.chain)
    assert got.state.digests == prefix_state(b + [1], VLLM).digests


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=3 * DIGEST_MARK_BYTES + 7), min_size=1, max_size=6), st.integers(0, 3))
def test_body_sha256_equals_a_whole_hash_whatever_the_previous_body(bodies: list[bytes], reps: int) -> None:
    """Issue 9 item 8: a served body's digest hashes only what follows the last midstate
    within its common prefix with the previous body; it must equal sha256 of the whole
    bytes for any previous body (extending, diverging, shorter, longer, equal)."""
    bodies = [bodies[0] * (reps + 1), *bodies[1:]] + [bodies[0] * (reps + 1) + b"tail"]
    previous = None
    for body in bodies:
        got = body_sha256(body, previous)
        assert got.hexdigest == hashlib.sha256(body).hexdigest()
        assert [offset for offset, _ in got.marks] == list(range(DIGEST_MARK_BYTES, len(body) + 1, DIGEST_MARK_BYTES))
        previous = got


def test_body_sha256_hashes_only_after_the_common_prefix() -> None:
    """An extending body reuses every midstate of the previous one within their common prefix
    (the same objects, never updated), so only its new bytes are hashed."""
    first = bytes(range(256)) * 400  # 102,400 bytes: 6 midstates
    before = body_sha256(first)
    second = first[:70_000] + b"new message" + first[70_000:]
    after = body_sha256(second, before)
    assert after.hexdigest == hashlib.sha256(second).hexdigest()
    assert after.marks[:4] == before.marks[:4]  # 16k..64k lie within the 70,000 common bytes
    assert all(a[1] is b[1] for a, b in zip(after.marks[:4], before.marks[:4]))
    assert before.hexdigest == hashlib.sha256(first).hexdigest()  # reused midstates were not updated


def _naive_common_prefix(a: str | bytes, b: str | bytes) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\u00e9\U0001f600", max_size=80), st.text(alphabet="ab\u00e9", max_size=80),
       st.integers(0, 80))
def test_common_prefix_len_equals_a_char_by_char_scan(a: str, tail: str, keep: int) -> None:
    """The binary search for the first difference gives the naive scan's answer, for text
    and for bytes (compared through a memoryview), whether one extends the other or not."""
    b = a[:keep] + tail
    for x, y in ((a, b), (b, a), (a.encode(), b.encode()), (b.encode(), a.encode())):
        assert common_prefix_len(x, y) == _naive_common_prefix(x, y)


def test_common_prefix_len_of_long_bodies_finds_the_exact_byte() -> None:
    """Bodies of a few hundred kB differing at one byte anywhere, or one extending the other."""
    body = bytes(range(256)) * 1200  # 307,200 bytes
    for at in (0, 1, 4095, 4096, 150_001, len(body) - 1):
        changed = body[:at] + bytes([(body[at] + 1) % 256]) + body[at + 1:]
        assert common_prefix_len(body, changed) == common_prefix_len(changed, body) == at
        assert common_prefix_len(body[:at], body) == common_prefix_len(body, body[:at]) == at
    assert common_prefix_len(body, body) == len(body)
