"""How serving engines prepare an OpenAI chat-completions body before the chat template:
an oracle for "the count equals what the server renders", independent of ctxd's code.

vLLM (``vllm/entrypoints/chat_utils``, ``_postprocess_messages``) parses every history
tool call's ``arguments`` string with ``json.loads`` before rendering, because chat
templates expect a mapping: "" or a missing value becomes ``{}``; text that does not
parse, or parses to something other than an object, made older versions answer 400 (the
whole session then fails on every later request) and is coerced to ``{}`` by newer ones.
SGLang parses them the same way. The body's ``chat_template_kwargs`` go to the template.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any


class NotAnObject(AssertionError):
    """An ``arguments`` string in a served body that is not a JSON object."""


def vllm_messages(messages: Sequence[dict[str, Any]], *, strict: bool = True) -> list[dict[str, Any]]:
    """``messages`` as vLLM hands them to the chat template.

    ``strict``: an arguments string that is not a JSON object raises :class:`NotAnObject`
    (ctxd's invariant: every served body passes); otherwise it is coerced to ``{}`` as
    current vLLM does (used to measure what vLLM renders for a body ctxd did not fix).
    """
    out = copy.deepcopy(list(messages))
    for m in out:
        if m.get("role") != "assistant":
            continue
        if m.get("content") is None:
            m["content"] = ""
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            raw = fn.get("arguments")
            if not raw:
                fn["arguments"] = {}
                continue
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                if strict:
                    raise NotAnObject(f"tool call {call.get('id')!r}: arguments {raw!r} are not a JSON object")
                parsed = {}
            fn["arguments"] = parsed
    return out


def vllm_ids(tokenizer: Any, body: dict[str, Any], *, strict: bool = True) -> list[int]:
    """Prompt ids vLLM renders for an OpenAI ``body`` with this HF ``tokenizer``."""
    return list(tokenizer.apply_chat_template(vllm_messages(body["messages"], strict=strict), tools=body.get("tools"),
                                              add_generation_prompt=True, tokenize=True, return_dict=False,
                                              **body.get("chat_template_kwargs", {})))


def vllm_mistral_ids(tokenizer: Any, body: dict[str, Any]) -> list[int]:
    """Prompt ids vLLM renders for an OpenAI ``body`` with a mistral-common ``tokenizer``
    (``MistralTokenizer``): tool-call ids longer than 9 characters cut to their last 9
    (vLLM's ``truncate_tool_call_ids``), a final assistant message continued
    (``prefix=True``, as vLLM's MistralTokenizer.apply_chat_template sets it), the request
    built by mistral-common's own ``ChatCompletionRequest.from_openai``."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages = copy.deepcopy(list(body["messages"]))
    for m in messages:
        for call in m.get("tool_calls") or []:
            call["id"] = call["id"][-9:]
        if m.get("role") == "tool":
            m["tool_call_id"] = m["tool_call_id"][-9:]
    final_assistant = messages[-1]["role"] == "assistant"
    request = ChatCompletionRequest.from_openai(messages, body.get("tools"), continue_final_message=final_assistant)
    return list(tokenizer.encode_chat_completion(request).tokens)
