"""Token-id wire format for self-hosted engines (vLLM / SGLang completions).

``{"model", "max_tokens", "prompt_token_ids", "prompt"}``: the exact ids ctxd counted
(the profile's tokenizer and chat template, generation prompt included) and, where the
tokenizer renders text (HF templates), the rendered prompt text. vLLM's
``/v1/completions`` accepts the ids as ``prompt``; SGLang's ``/generate`` as ``input_ids``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def serialize(ids: Sequence[int], text: str | None, *, model: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "prompt_token_ids": list(ids)}
    if text is not None:
        body["prompt"] = text
    return body
