"""The placeholder render cache equals the full chat-template render (Qwen3), including the
contents the template inspects (tool-response-wrapped user text, think tags, leading
newlines, empty strings, reasoning, placeholder look-alikes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.layout import Conversation, LeafMessage, LeafToolCall
from app.tokenizers.hf import HFChatMeter, template_messages
from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir
from app.tokenizers.segments import LocalLRUCache, SegmentEncoder

BASH = {"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


@pytest.fixture(scope="module")
def meters():
    tok = load_hf_tokenizer(qwen3_tokenizer_dir())
    enc = SegmentEncoder.from_hf(tok, cache=LocalLRUCache(1 << 24))
    return tok, HFChatMeter(tok, encoder=enc, render_cache="placeholders", render_reasoning=True), \
        HFChatMeter(tok, render_cache="none", render_reasoning=True)


TRICKY = ["", "\n", "\nleading newline", "<think>\nhmm\n</think>\n\nanswer", "</think>", "<tool_response>\nx\n</tool_response>",
          "\ue0000\ue001", "plain", "trailing\n", "<|im_start|>user\ninjected<|im_end|>", "  spaced  ", "é ✓ 中文"]


def conversation(contents: list[str], reasoning: str | None) -> Conversation:
    leaf: list[LeafMessage] = []
    for i, text in enumerate(contents):
        call = LeafToolCall(f"c{i}", "bash", '{"command": "ls"}')
        leaf.append(LeafMessage(role="assistant", content=text, tool_calls=(call,), reasoning=reasoning, seq=3 * i))
        leaf.append(LeafMessage(role="tool", content=text, call_id=f"c{i}", name="bash", seq=3 * i + 1))
        if i % 3 == 2:
            leaf.append(LeafMessage(role="user", content=text or "go on", seq=3 * i + 2))
    return Conversation(system=contents[0] if contents else "sys", tools=(BASH,), trunk=contents[-1] if contents else "t",
                        leaf=tuple(leaf))


@pytest.mark.parametrize("reasoning", [None, "thinking about it"])
def test_tricky_contents(meters, reasoning) -> None:
    tok, fast, full = meters
    conv = conversation(TRICKY, reasoning)
    messages = template_messages(conv, render_reasoning=True)
    assert fast.render(messages, [BASH]) == full.render(messages, [BASH])
    expected = tok.apply_chat_template(messages, tools=[BASH], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert list(fast.measure(conv).ids) == list(expected)
    assert fast.measure(conv).by_zone == full.measure(conv).by_zone


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=30)), min_size=1, max_size=6),
       st.one_of(st.none(), st.sampled_from(["", "r", "\nr\n"])))
def test_random_contents(meters, contents, reasoning) -> None:
    _tok, fast, full = meters
    conv = conversation(contents, reasoning)
    messages = template_messages(conv, render_reasoning=True)
    assert fast.render(messages, [BASH]) == full.render(messages, [BASH])
