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


def test_alternating_conversations_measure_as_a_fresh_meter_does() -> None:
    """measure finds the previous request of the same root and trunk by a digest of them,
    skipped (a comparison in C) when the root and trunk are the last request's: two
    sessions measured in turn, each growing, one whose trunk is then rewritten, count
    exactly what a fresh meter counts, and each finds its own previous request."""
    meter = qwen3_meter()

    def conv(trunk: str, n: int) -> Conversation:
        leaf = tuple(LeafMessage(role="user", content=f"{trunk} message {i}: " + text(i, 300)) for i in range(n))
        return Conversation(system="You are terse.", trunk=trunk, leaf=leaf, tools=())

    plan = [("task A", 2), ("task B", 2), ("task A", 3), ("task A", 4), ("task B", 5), ("task A rewritten", 5),
            ("task A rewritten", 6), ("task B", 6)]
    hashed = 0
    for i, (trunk, n) in enumerate(plan):
        before = meter._last_head
        got = meter.measure(conv(trunk, n))
        fresh = qwen3_meter().measure(conv(trunk, n))
        assert (got.total, got.by_zone, list(got.ids)) == (fresh.total, fresh.by_zone, list(fresh.ids))
        same_head = i > 0 and plan[i - 1][0] == trunk
        assert (meter._last_head is before) == same_head, "hashed only when the root and trunk changed"
        hashed += not same_head
    assert hashed == 6 and len(meter._recent) == 3, "one previous request per root + trunk"
