"""The meters' memos are bounded in bytes (issue 9 item 7), the fault kind of
microsoft/semantic-kernel#580 and huggingface/transformers#2827 (tokenizer caches that
grow with every distinct input): many large distinct inputs leave each memo within its
bound, the memos hold digests rather than texts, and results equal uncached ones."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.layout import Conversation, LeafMessage, LeafToolCall
from app.tokenizers import hf
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry, load_profiles
from app.tokenizers.segments import LocalLRUCache

PROFILES = ProfileRegistry(load_profiles())


def qwen3_meter() -> Any:
    return MeterRegistry(LocalLRUCache(64 * 1024 * 1024)).get(PROFILES.get("qwen3"))


def text(i: int, size: int) -> str:
    line = f"{i:05d} File src/module_{i}.py, line {i}: AssertionError in test_case_{i}\n"
    return (line * (size // len(line) + 1))[:size]


def test_count_memo_keeps_digests_not_texts() -> None:
    meter = qwen3_meter()
    texts = [text(i, 100_000) for i in range(30)]  # 3 MB of distinct text
    counts = [meter.count_text(t) for t in texts]
    assert counts == [meter._count_text(t) for t in texts]
    memo = meter.count_text.cache
    assert len(memo) == 30 and memo.currsize == 30 * (32 + hf.ENTRY_OVERHEAD), "~132 bytes a text, whatever its size"
    assert all(isinstance(k, bytes) and len(k) == 32 for k in memo), "keys are sha256 digests"


def test_head_tail_and_recent_memos_stay_within_their_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hf, "HEAD_TAIL_MEMO_BYTES", 60_000)
    monkeypatch.setattr(hf, "RECENT_BYTES", 400_000)
    meter = qwen3_meter()
    for i in range(20):
        t = text(i, 40_000)
        assert meter.head_tail(t, 800, 400) == meter._head_tail(t, 800, 400)
    memo = meter.head_tail.cache
    assert 0 < memo.currsize <= 60_000 and len(memo) < 20, "older cuts were evicted"

    reference = qwen3_meter()
    for i in range(12):  # distinct roots+trunks: one remembered encoding each
        conversation = Conversation(
            system=f"You are agent {i}.", tools=(), trunk=f"Goal {i}: fix the test.",
            leaf=(LeafMessage("assistant", "", tool_calls=(LeafToolCall(f"c{i}", "bash", '{"command": "ls"}'),)),
                  LeafMessage("tool", text(i, 30_000), call_id=f"c{i}", name="bash")))
        got = meter.measure(conversation)
        assert got.total == reference.measure(conversation).total
    recent = meter._recent
    assert 0 < recent.current_bytes <= 400_000 and recent.evictions > 0 and len(recent) < 12
