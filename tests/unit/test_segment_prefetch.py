"""Prefetch: a GET's new leaf messages start tokenizing on a worker thread while the rest of
the request is planned (the batch encode releases the GIL). It must never change a count,
must not encode a segment twice (measure waits for a segment a prefetch is encoding), and
must leave nothing claimed when the encode fails. Real Qwen3 tokenizer, real threads."""

from __future__ import annotations

import threading
from dataclasses import replace as dc_replace
from typing import Any

import pytest

from app.domain.layout import Conversation, LeafMessage, LeafToolCall
from app.tokenizers.hf import HFChatMeter, template_messages
from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir
from app.tokenizers.segments import LocalLRUCache, SegmentEncoder, unpack_ids

BASH = {"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_hf_tokenizer(qwen3_tokenizer_dir())


def _meter(tok: Any) -> HFChatMeter:
    encoder = SegmentEncoder.from_hf(tok, cache=LocalLRUCache(64 * 1024 * 1024), verify=False)
    return HFChatMeter(tok, encoder=encoder, render_cache="native")


def _leaf(n: int, tag: str) -> tuple[LeafMessage, ...]:
    out: list[LeafMessage] = []
    for i in range(n):
        call = f"c{tag}{i}"
        out.append(LeafMessage(role="assistant", content=f"step {i} of {tag}: let me look at file_{i}.py", seq=3 * i + 1,
                               tool_calls=(LeafToolCall(call, "bash", f'{{"command": "cat file_{i}.py"}}'),)))
        out.append(LeafMessage(role="tool", content=f"def f{i}():\n    return {i} * {tag!r}  # é ✓\n" * (i + 1),
                               call_id=call, name="bash", seq=3 * i + 2))
    return tuple(out)


class _CountingBatch:
    """The encoder's batch call, counting the pieces it is asked to encode (and, with
    ``gate``, holding the first call until the gate opens)."""

    def __init__(self, encoder: SegmentEncoder, gate: threading.Event | None = None) -> None:
        self.inner, self.gate, self.pieces = encoder._batch, gate, []
        self.entered = threading.Event()
        encoder._batch = self

    def __call__(self, pieces: list[str], **kwargs: Any) -> Any:
        self.pieces.extend(pieces)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
            self.gate = None
        return self.inner(pieces, **kwargs)


def test_prefetched_messages_measure_exactly_and_are_cache_hits(tok: Any) -> None:
    """After prefetch of the new messages, measure gives the same ids as a meter that never
    prefetched (and as apply_chat_template), and finds every text segment of those
    messages in the cache: measure encodes nothing of them again."""
    old, new = _leaf(3, "a"), _leaf(2, "b")
    conv = Conversation(system="You are a helpful assistant.", tools=(BASH,), trunk="Fix the bug.", leaf=old + new)
    plain, ahead = _meter(tok), _meter(tok)
    plain.measure(Conversation(system=conv.system, tools=conv.tools, trunk=conv.trunk, leaf=old))
    ahead.measure(Conversation(system=conv.system, tools=conv.tools, trunk=conv.trunk, leaf=old))
    ahead.prefetch(new)
    counting = _CountingBatch(ahead.encoder)
    got, want = ahead.measure(conv), plain.measure(conv)
    assert list(got.ids) == list(want.ids)
    assert list(got.ids) == tok.apply_chat_template(template_messages(conv), tools=[BASH], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False)
    assert (got.by_zone, got.by_role) == (want.by_zone, want.by_role)
    contents = [m.content for m in new]
    assert not [p for p in counting.pieces if any(c.strip() in p for c in contents)], counting.pieces


def test_measure_waits_for_a_prefetch_in_flight_instead_of_encoding_again(tok: Any) -> None:
    """While the prefetch's batch encode is held, measure blocks on its segments; once it is
    released, measure's ids are exact and the prefetched pieces were encoded once in all."""
    meter = _meter(tok)
    new = _leaf(2, "w")
    conv = Conversation(system="sys", tools=(), trunk="task", leaf=new)
    gate = threading.Event()
    counting = _CountingBatch(meter.encoder, gate)
    meter.prefetch(new)  # returns once the worker took the job (it then waits at the gate)
    assert counting.entered.wait(10)
    prefetched = list(counting.pieces)
    assert prefetched and meter.encoder._inflight
    result: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: result.setdefault("m", meter.measure(conv)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # waiting for the held prefetch, not encoding the same pieces itself
    gate.set()
    waiter.join(10)
    assert not waiter.is_alive() and not meter.encoder._inflight
    assert list(result["m"].ids) == tok.apply_chat_template(template_messages(conv), add_generation_prompt=True,
                                                            tokenize=True, return_dict=False)
    for piece in prefetched:
        assert counting.pieces.count(piece) == 1, piece


def test_a_failed_prefetch_releases_its_segments(tok: Any) -> None:
    """An encode error in the worker leaves no segment claimed: measure encodes them itself."""
    meter = _meter(tok)
    new = _leaf(1, "x")
    encoder = meter.encoder
    job = encoder.prefetch_job("<|im_start|>user\n" + new[1].content + "<|im_end|>\n")
    assert job is not None and encoder._inflight
    real = encoder._batch

    def broken(pieces: list[str], **kwargs: Any) -> Any:
        raise RuntimeError("tokenizer failed")

    encoder._batch = broken
    with pytest.raises(RuntimeError):
        job()
    encoder._batch = real
    assert not encoder._inflight
    conv = Conversation(system="sys", tools=(), trunk="task", leaf=new)
    assert list(meter.measure(conv).ids) == tok.apply_chat_template(template_messages(conv), add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False)


def test_prefetch_is_a_no_op_without_the_segment_cache_or_native_render(tok: Any) -> None:
    for meter in (HFChatMeter(tok, render_cache="native"), HFChatMeter(tok, render_cache="none")):
        meter.prefetch(_leaf(1, "n"))
        assert meter._prefetcher is None


def test_prefetch_does_nothing_while_every_worker_is_busy(tok: Any) -> None:
    """Under load (every prefetch worker busy) a GET does not wait for a worker: nothing is
    claimed or queued, and measure encodes the messages itself, exactly."""
    from app.tokenizers.hf import PREFETCH_WORKERS

    meter = _meter(tok)
    meter._prefetching = PREFETCH_WORKERS
    new = _leaf(2, "busy")
    counting = _CountingBatch(meter.encoder)
    meter.prefetch(new)
    assert not counting.pieces and not meter.encoder._inflight and meter._prefetcher is None
    meter._prefetching = 0
    conv = Conversation(system="sys", tools=(), trunk="task", leaf=new)
    assert list(meter.measure(conv).ids) == tok.apply_chat_template(template_messages(conv), add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False)
    meter.prefetch(_leaf(1, "idle"))  # a free worker again: the job runs and the count comes back down
    meter._prefetcher.shutdown(wait=True)
    assert meter._prefetching == 0 and counting.pieces


def test_prefetch_beside_the_tokenizer_used_from_other_threads(tok: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Peer fault (vllm-project/vllm#34789: HF fast tokenizers used from several threads at
    once; tokenizers' "Already borrowed" RuntimeError): prefetch jobs encode on their
    workers while this thread renders and tokenizes with the same tokenizer
    (apply_chat_template through transformers, counts and cuts through the backend). No job
    fails (a failure is logged) and every measurement stays exact."""
    import logging

    caplog.set_level(logging.WARNING, logger="app.tokenizers.hf")
    meter = _meter(tok)
    leaf: tuple[LeafMessage, ...] = ()
    for round_ in range(12):
        new = _leaf(2, f"t{round_}")
        meter.prefetch(new)
        leaf = leaf + new
        conv = Conversation(system="sys", tools=(BASH,), trunk="task", leaf=leaf)
        expected = tok.apply_chat_template(template_messages(conv), tools=[BASH], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
        assert meter.count_text(new[1].content) > 0
        assert meter.head_tail(new[1].content * 40, 20, 20)[2] > 0
        assert list(meter.measure(conv).ids) == expected
    meter._prefetcher.shutdown(wait=True)
    assert not [r for r in caplog.records if "prefetch" in r.getMessage()], caplog.text


def test_a_failed_prefetch_job_is_logged_and_the_request_stays_exact(tok: Any,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.WARNING, logger="app.tokenizers.hf")
    meter = _meter(tok)
    real = meter.encoder._batch

    def broken(pieces: list[str], **kwargs: Any) -> Any:
        raise RuntimeError("Already borrowed")

    meter.encoder._batch = broken
    new = _leaf(1, "f")
    meter.prefetch(new)
    meter._prefetcher.shutdown(wait=True)
    meter.encoder._batch = real
    assert "prefetch: tokenizing the new messages failed" in caplog.text and not meter.encoder._inflight
    conv = Conversation(system="sys", tools=(), trunk="task", leaf=new)
    assert list(meter.measure(conv).ids) == tok.apply_chat_template(template_messages(conv), add_generation_prompt=True,
                                                                    tokenize=True, return_dict=False)


JOIN_EDGES = [
    "plain ascii", "  leading and trailing spaces  ", "\n\nnewlines\n", "tab\tand é ✓ 汉字 emoji 😀",
    "ends with a lone <", "<|im_", "_end|> and half tokens <tool", "</tool_response", "x" * 3000,
    "def f():\n    return '<<<ctxd-data>>>'\n", " ", "\n", "a",
]


def test_joined_prefetch_encode_equals_each_piece_encoded_alone(tok: Any) -> None:
    """The prefetch encodes its pieces as ONE input joined by an added token (one core busy
    instead of the tokenizer's whole pool beside the caller): every piece's ids equal its own
    encode, at edges where a piece ends or starts like part of an added token, and on the
    messages of a real render."""
    encoder = SegmentEncoder.from_hf(tok, cache=LocalLRUCache(1024 * 1024), verify=False)
    assert encoder._joiner is not None and encoder._joiner.content in {s.content for s in encoder.splitter.specs}
    meter = _meter(tok)
    rendered = meter.render(template_messages(Conversation(system="s", trunk="t", leaf=_leaf(4, "j"), tools=(BASH,))),
                            [BASH])
    real = [rendered[s:e] for s, e, tid in encoder.split(rendered) if tid < 0]
    for pieces in (JOIN_EDGES, real, list(reversed(JOIN_EDGES)), JOIN_EDGES[:2]):
        alone = [list(enc.ids) for enc in tok.backend_tokenizer.encode_batch(pieces, add_special_tokens=False)]
        assert [unpack_ids(b) for b in encoder.encode_joined(pieces)] == alone


def test_joined_encode_falls_back_to_the_batch_when_the_joins_do_not_split(tok: Any) -> None:
    """A joiner the splitter does not find at exactly the joins (forced here: a spec whose
    content is not an added token) is not trusted: the pieces are encoded as a batch, exactly."""
    encoder = SegmentEncoder.from_hf(tok, cache=LocalLRUCache(1024 * 1024), verify=False)
    assert encoder._joiner is not None
    encoder._joiner = dc_replace(encoder._joiner, content="|")
    calls = _CountingBatch(encoder)
    pieces = ["a | b", "c", "d|e"]
    assert [unpack_ids(b) for b in encoder.encode_joined(pieces)] == \
        [list(enc.ids) for enc in tok.backend_tokenizer.encode_batch(pieces, add_special_tokens=False)]
    assert calls.pieces == pieces, "encoded one by one in a batch, not joined"
