"""Exact token counting and a per-message segmenter for the ``mistral-tekken`` profile.

The profile's tokenizer is ``transformers.MistralCommonBackend`` on the
``tekken_240718.json`` file shipped in ``mistral_common/data``. That backend is a
thin wrapper: its ``apply_chat_template`` builds a ``ChatCompletionRequest`` with
``from_openai`` and calls ``MistralTokenizer.encode_chat_completion``. This module
builds the ``ChatCompletionRequest`` itself (:meth:`MistralTekken.to_mistral`),
so the ids are exactly mistral-common's. Only the standard library,
``mistral_common`` and ``transformers`` are imported.

Request shape (OpenAI chat completions, as ctxd lays it out)::

    messages[0]  {"role": "system", "content": str}                  root
    messages[1]  {"role": "user", "content": str}                    trunk
    later        {"role": "assistant", "content": str | None,
                  "tool_calls": [{"id", "type": "function",
                                  "function": {"name", "arguments": JSON text}}]}
                 {"role": "tool", "tool_call_id": str, "content": str}
                 {"role": "user", "content": str}
    tools        [{"type": "function", "function": {"name", "description", "parameters"}}]

What tekken_240718 (mistral-common tokenizer version v3, ``InstructTokenizerV3``)
really renders -- checked on mistral-common 1.13.1, see
``tests/unit/test_mistral_tekken.py``::

    <s>[AVAILABLE_TOOLS]<tools JSON>[/AVAILABLE_TOOLS][INST]<system>\\n\\n<user>[/INST]
       [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "<9 alnum>"}]</s>
       [TOOL_RESULTS]{"content": ..., "call_id": "<9 alnum>"}[/TOOL_RESULTS]
       <assistant text></s>

* There is no system message in v3. The normalizer joins every system message
  into one ``system_prompt`` and the encoder prepends ``system_prompt + "\\n\\n"``
  to the text of the **last** user message only; ``[AVAILABLE_TOOLS]`` is put
  right before that same message's ``[INST]``. Earlier user messages are
  rendered bare. While the trunk is the only user message (every mini-swe-agent
  trace), the layout is prefix-stable: each turn appends
  ``[TOOL_CALLS]...</s>[TOOL_RESULTS]...[/TOOL_RESULTS]``. As soon as a later
  user message exists, the system prompt and the tools move into it, the trunk
  loses them, and the token sequence diverges from the previous request right
  after ``<s>`` (token 1): no prefix reuse at all. ``to_mistral`` reports this in
  ``layout_warnings`` (computed from the actual messages).
* Assistant tool calls and tool results are rendered at every position (v3
  ignores ``is_before_last_user_message`` for both); an assistant text message is
  ``rstrip(" ")``-ed text followed by ``</s>``.
* Tool results and call arguments are JSON-normalised: content that parses as
  JSON is embedded as a JSON value (so ``"42"`` renders as ``42``), empty content
  becomes ``{}``.
* The rendered request ends with ``[/INST]`` or ``[/TOOL_RESULTS]``: that is the
  generation prompt, nothing is appended (mistral-common's test mode refuses a
  request ending with a finished assistant message).
* Consecutive messages of the same role (user/user, assistant/assistant) are
  merged by the normalizer (text joined with ``"\\n\\n"``, tool calls
  concatenated); tool messages are never merged.

Tool-call ids. The v3 validator requires ``^[a-zA-Z0-9]{9}$``. ids that already
match are kept; any other id is mapped to 9 base-62 characters of
``sha256(id)`` (re-hashed with a counter on a collision, in order of first
appearance), see :func:`map_tool_call_ids`. The same id maps to the same value in
every request, so the mapping never breaks prefix reuse.

Decision on assistant messages with both text and tool calls. v3 rejects them
(validator: "Assistant message must have either content or tool_calls, but not
both"). No faithful rendering exists in the installed mistral-common:

* ``tekken_240911.json`` is also v3 (same validator, same ``InstructTokenizerV3``).
* The v7 files (``mistral_instruct_tokenizer_241114.model.v7``/``v7m1``, which do
  allow text + tool calls) are SentencePiece models with a different vocabulary:
  another model's tokenizer, and ``sentencepiece`` is not even installed.
* Splitting into ``assistant(text)`` + ``assistant(tool_calls)`` passes the
  validator, but the normalizer merges consecutive assistant messages back into
  one, and ``InstructTokenizerV2.encode_assistant_message`` raises
  ``ValueError: Cannot have tool calls and content defined in the same assistant
  message``. The reverse order fails validation ("Not the same number of
  function calls and responses"). Putting a user message in between invents a
  turn and moves the system prompt (see above).
* Hand-writing ``text</s>[TOOL_CALLS]...`` ids would be a layout mistral-common
  never produces, i.e. not what the model was trained on.

So the text is dropped and the call kept (the call and its result carry the
state; tool results must keep their call). Each drop yields a warning
``"assistant message {i}: text dropped ..."``. The same rule is applied to a run
of consecutive assistant messages that would be merged into text + calls.
An assistant message with neither text nor calls is dropped with a warning
(v3 rejects it).

Segments. :meth:`MistralTekken.segments` re-runs mistral-common's own validator,
normalizer and per-message encoders (``encode_user_message``,
``encode_assistant_message``, ``encode_tool_message``) with the same
position flags ``InstructTokenizerBase.encode_instruct`` uses, so a
position-dependent message (the last user message, carrying system prompt and
tools) gets its real encoding. Every cut sits next to a special token
(``<s>``, ``[INST]``, ``[/INST]``, ``[TOOL_CALLS]``, ``</s>``, ``[TOOL_RESULTS]``,
``[/TOOL_RESULTS]``, ``[AVAILABLE_TOOLS]``, ``[/AVAILABLE_TOOLS]``), so the
concatenation is exactly :meth:`MistralTekken.encode`; the tests check that on
real traces.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from mistral_common.protocol.instruct.messages import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
from mistral_common.tokens.tokenizers.base import Tokenized
from mistral_common.tokens.tokenizers.instruct import (
    InstructTokenizerBase,
    InstructTokenizerV2,
)
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

if TYPE_CHECKING:  # the request as this module builds it (generic in its message type)
    Request: TypeAlias = ChatCompletionRequest[AssistantMessage | SystemMessage | ToolMessage | UserMessage]

__all__ = [
    "DEFAULT_TEKKEN_FILE",
    "SEGMENT_FRAMING",
    "SEGMENT_TOOLS",
    "MistralTekken",
    "default_tekken_path",
    "load_tekken",
    "map_tool_call_ids",
]

DEFAULT_TEKKEN_FILE = "tekken_240718.json"

#: Owner of pieces that belong to no message: ``<s>``, an empty user message the
#: normalizer inserts when the first non-system message is not a user message.
SEGMENT_FRAMING = -1
#: Owner of the ``[AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS]`` block (tool declarations,
#: part of the root zone; v3 puts it right before the last user message).
SEGMENT_TOOLS = -2

_TOOL_CALL_ID = re.compile(r"^[a-zA-Z0-9]{9}$")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ID_SPACE = 62**9


def default_tekken_path(file: str = DEFAULT_TEKKEN_FILE) -> str:
    """Absolute path of ``file`` inside the installed ``mistral_common/data`` directory.

    Raises:
        FileNotFoundError: mistral_common is not installed or lacks the file.
    """
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("mistral_common is not installed")
    for location in spec.submodule_search_locations:
        candidate = os.path.abspath(os.path.join(location, "data", file))
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"{file} not found in mistral_common/data")


def load_tekken(path: str | None = None) -> MistralTekken:
    """Load the ``mistral-tekken`` tokenizer from a local file (never from a model hub).

    Args:
        path: tokenizer file; default ``tekken_240718.json`` of the installed mistral_common.

    Returns:
        A ready :class:`MistralTekken` (loading takes about 2 s).
    """
    return MistralTekken(path if path is not None else default_tekken_path())


#: the assistant text between a tool message and a user message that follows it (rule M4)
TOOL_BRIDGE = "(tool results received)"


def _hash_id(original: str, salt: int) -> str:
    data = original.encode("utf-8") if salt == 0 else f"{original}\x00{salt}".encode()
    n = int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % _ID_SPACE
    chars = []
    for _ in range(9):
        n, r = divmod(n, 62)
        chars.append(_BASE62[r])
    return "".join(chars)


def map_tool_call_ids(ids: Iterable[str]) -> dict[str, str]:
    """Map tool-call ids to Mistral's ``^[a-zA-Z0-9]{9}$`` ids, injectively.

    ids that already match are kept. Every other id becomes 9 base-62 characters
    of ``sha256(id)``; on a collision with an id already taken in this mapping the
    hash is redone with a counter. Ids are processed in order of first appearance
    (kept ids first), so the result is deterministic and stable as a
    conversation grows.

    Args:
        ids: the original ids, in conversation order (repeats allowed).

    Returns:
        original id -> Mistral id; values are distinct.
    """
    ordered = list(dict.fromkeys(ids))
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for original in ordered:
        if _TOOL_CALL_ID.match(original):
            mapping[original] = original
            taken.add(original)
    for original in ordered:
        if original in mapping:
            continue
        salt = 0
        candidate = _hash_id(original, salt)
        while candidate in taken:
            salt += 1
            candidate = _hash_id(original, salt)
        mapping[original] = candidate
        taken.add(candidate)
    return mapping


@dataclass
class _Converted:
    request: Request
    warnings: list[str]
    origin: list[int]  # original message index of each request message
    id_map: dict[str, str] = field(default_factory=dict)


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise TypeError(f"{where}: content must be a string, got {type(value).__name__}")


def _tool(spec: dict[str, Any]) -> Tool:
    fn = spec.get("function", spec)
    return Tool(
        function=Function(
            name=fn["name"],
            description=fn.get("description") or "",
            parameters=fn.get("parameters") or {},
        )
    )


def _is_prefix(shaped: Sequence[tuple[int, str, str, list[dict[str, Any]]]]) -> bool:
    """Whether the request ends with an assistant text message: v3 accepts that only as a
    prefix (validator: "Expected last role User or Tool (or Assistant with prefix)")."""
    return bool(shaped) and shaped[-1][1] == "assistant" and bool(shaped[-1][2]) and not shaped[-1][3]


def _role_runs(roles: Sequence[str]) -> list[tuple[int, int]]:
    """Maximal runs ``[start, end)`` of equal roles (the normalizer's grouping)."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(roles) + 1):
        if i == len(roles) or roles[i] != roles[start]:
            runs.append((start, i))
            start = i
    return runs


class MistralTekken:
    """The ``mistral-tekken`` profile tokenizer: exact ids, counts and per-message segments.

    Attributes:
        path: absolute path of the tokenizer file.
        fingerprint: first 16 hex chars of sha256 of the tokenizer file bytes
            (key prefix for cached segment ids).
        backend: the ``transformers.MistralCommonBackend`` of the profile.
        mistral: its ``mistral_common`` ``MistralTokenizer`` (``backend.tokenizer``).
    """

    def __init__(self, path: str) -> None:
        # heavy import, only when loading (the module transformers' lazy top-level name resolves to)
        from transformers.tokenization_mistral_common import MistralCommonBackend

        self.path = os.path.abspath(path)
        digest = hashlib.sha256()
        with open(self.path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        self.fingerprint: str = digest.hexdigest()[:16]
        self.backend = MistralCommonBackend(tokenizer_path=self.path)
        self.mistral: MistralTokenizer[UserMessage, AssistantMessage, ToolMessage, SystemMessage, Tokenized] = (
            self.backend.tokenizer)
        instruct = self.mistral.instruct_tokenizer
        self.version: str = instruct.tokenizer.version.value
        # The segmenter mirrors InstructTokenizerBase.encode_instruct (through V2's
        # tool-result check); refuse a mistral-common whose encoder differs.
        encode_instruct = type(instruct).encode_instruct
        if encode_instruct not in (InstructTokenizerBase.encode_instruct, InstructTokenizerV2.encode_instruct):
            raise NotImplementedError(
                f"{type(instruct).__name__}.encode_instruct is not the one the segmenter mirrors"
            )

    # ------------------------------------------------------------------ convert

    def to_mistral(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[Request, list[str]]:
        """Convert OpenAI-style messages + tools to a mistral-common request.

        Args:
            messages: OpenAI chat-completions messages (see module docstring).
            tools: OpenAI function tool declarations.

        Returns:
            ``(request, layout_warnings)``: the request as mistral-common renders it
            (tool-call ids mapped, unrepresentable text dropped) and human-readable
            notes on every place where the rendering differs from the messages or
            defeats a stable prefix.

        Raises:
            ValueError: unknown role, tool call of a type other than ``function``, missing id.
            TypeError: non-string content.
        """
        converted = self._convert(messages, tools)
        return converted.request, converted.warnings

    def served_messages(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The OpenAI-style messages as a v3 server accepts them, and the layout warnings.

        What :meth:`to_mistral` renders, written back as chat-completions messages, so the
        body ctxd serves is the one it counted (README "Provider rules", mistral-tekken):
        tool-call ids mapped to ``^[a-zA-Z0-9]{9}$`` (vLLM would cut a longer id to its
        last 9 characters, which may then fail the validator), assistant text dropped
        beside tool calls, empty assistant and system messages dropped, and a final
        assistant text message marked ``"prefix": true`` (the Mistral API requires it for
        a request that ends with an assistant message; vLLM sets it itself). Feeding the
        result to :meth:`to_mistral` gives the same request.

        Raises:
            ValueError, TypeError: as :meth:`to_mistral`.
        """
        out, warnings, _ = self.served_with_origins(messages, tools)
        return out, warnings

    def served_with_origins(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str], list[int]]:
        """:meth:`served_messages` and, per served message, the index in ``messages`` of the
        message it comes from (the bridge assistant text before a user message that follows
        a tool message comes from that user message).

        Raises:
            ValueError, TypeError: as :meth:`to_mistral`.
        """
        shaped, warnings, id_map = self._shape(messages, tools)
        out: list[dict[str, Any]] = []
        for idx, role, text, calls in shaped:
            if role == "assistant":
                message: dict[str, Any] = {"role": "assistant", "content": text}
                if calls:
                    message["tool_calls"] = [
                        {"id": id_map[c["id"]], "type": "function",
                         "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}}
                        for c in calls]
                out.append(message)
            elif role == "tool":
                out.append({"role": "tool", "tool_call_id": id_map[messages[idx]["tool_call_id"]], "content": text})
            else:
                out.append({"role": role, "content": text})
        if _is_prefix(shaped):
            out[-1]["prefix"] = True
        return out, warnings, [entry[0] for entry in shaped]

    def _convert(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> _Converted:
        shaped, warnings, id_map = self._shape(messages, tools)
        built: list[Any] = []
        origin: list[int] = []
        for idx, role, text, calls in shaped:
            if role == "system":
                built.append(SystemMessage(content=text))
            elif role == "user":
                built.append(UserMessage(content=text))
            elif role == "assistant":
                built.append(
                    AssistantMessage(
                        content=text or None,
                        tool_calls=[
                            ToolCall(
                                id=id_map[call["id"]],
                                function=FunctionCall(
                                    name=call["function"]["name"],
                                    arguments=call["function"].get("arguments") or "",
                                ),
                            )
                            for call in calls
                        ]
                        or None,
                    )
                )
            else:
                built.append(ToolMessage(content=text, tool_call_id=id_map[messages[idx]["tool_call_id"]]))
            origin.append(idx)
        if _is_prefix(shaped):
            built[-1].prefix = True
        request = ChatCompletionRequest(messages=built, tools=[_tool(t) for t in tools] or None)
        return _Converted(request=request, warnings=warnings, origin=origin, id_map=id_map)

    def _shape(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[list[tuple[int, str, str, list[dict[str, Any]]]], list[str], dict[str, str]]:
        """Per message (original index, role, text, tool calls) as v3 renders them, the
        layout warnings and the tool-call id map."""
        warnings: list[str] = []
        ids: list[str] = []
        for i, msg in enumerate(messages):
            role = msg.get("role")
            if role == "assistant":
                for call in msg.get("tool_calls") or []:
                    if not call.get("id"):
                        raise ValueError(f"assistant message {i}: tool call without id")
                    ids.append(call["id"])
            elif role == "tool":
                if not msg.get("tool_call_id"):
                    raise ValueError(f"tool message {i}: missing tool_call_id")
                ids.append(msg["tool_call_id"])
        id_map = map_tool_call_ids(ids)

        # First pass: per-message shape (role, text, calls) before building models.
        shaped: list[tuple[int, str, str, list[dict[str, Any]]]] = []
        for i, msg in enumerate(messages):
            role = msg.get("role")
            where = f"{role} message {i}"
            if role == "system":
                text = _text(msg.get("content"), where)
                if not text:
                    warnings.append(f"system message {i}: dropped because it is empty (v3 rejects an empty system prompt)")
                    continue
                shaped.append((i, "system", text, []))
            elif role == "user":
                shaped.append((i, "user", _text(msg.get("content"), where), []))
            elif role == "assistant":
                text = _text(msg.get("content"), where)
                calls = list(msg.get("tool_calls") or [])
                for call in calls:
                    if call.get("type", "function") != "function":
                        raise ValueError(f"{where}: tool call type {call.get('type')!r} is not supported")
                if text and calls:
                    warnings.append(
                        f"assistant message {i}: text dropped ({len(text)} chars) because {self.version} "
                        "(tekken_240718) rejects an assistant message with both content and tool_calls and "
                        "has no faithful rendering of both; the tool calls are kept"
                    )
                    text = ""
                if not text and not calls:
                    warnings.append(
                        f"assistant message {i}: dropped because it has neither text nor tool calls "
                        f"({self.version} rejects it)"
                    )
                    continue
                shaped.append((i, "assistant", text, calls))
            elif role == "tool":
                shaped.append((i, "tool", _text(msg.get("content"), where), []))
            else:
                raise ValueError(f"message {i}: unsupported role {role!r}")

        # Runs the normalizer will merge (consecutive user or assistant messages;
        # a system message in between breaks a run, as in mistral-common).
        merged: list[tuple[int, str, str, list[dict[str, Any]]]] = []
        user_runs: list[list[int]] = []
        for start, end in _role_runs([s[1] for s in shaped]):
            run = shaped[start:end]
            role = run[0][1]
            members = [s[0] for s in run]
            if role == "assistant" and len(run) > 1 and any(s[3] for s in run):
                kept = []
                for idx, _, text, calls in run:
                    if text and not calls:
                        warnings.append(
                            f"assistant message {idx}: dropped ({len(text)} chars of text) because it would be "
                            f"merged with the adjacent tool-call message(s) of {members} into one message with "
                            f"both content and tool_calls, which {self.version} rejects"
                        )
                    else:
                        kept.append((idx, "assistant", text, calls))
                run = kept
                members = [s[0] for s in run]
            if role == "user":
                user_runs.append(members)
            if len(run) > 1 and role in ("user", "assistant"):
                warnings.append(
                    f"messages {members}: consecutive {role} messages are merged by mistral-common into one "
                    + ("[INST] block (texts joined with '\\n\\n')" if role == "user" else "assistant message")
                    + f"; their tokens form one segment attributed to message {members[0]}"
                )
            merged.extend(run)
        shaped = merged

        # The strictest Mistral servers (the Mistral API, "invalid_request_message_order"
        # code 3230, and older mistral-common validators) refuse a user message right after a
        # tool message: only a tool or an assistant message may follow one. A bridge
        # assistant message goes between them, counted and served (its tokens in the user
        # message's segment).
        bridged: list[tuple[int, str, str, list[dict[str, Any]]]] = []
        for k, entry in enumerate(shaped):
            if entry[1] == "user" and k > 0 and shaped[k - 1][1] == "tool":
                bridged.append((entry[0], "assistant", TOOL_BRIDGE, []))
                warnings.append(f"message {entry[0]}: the assistant text {TOOL_BRIDGE!r} is inserted before this user "
                                "message (the strictest Mistral servers refuse a user message right after a tool "
                                "message)")
            bridged.append(entry)
        shaped = bridged

        system_idx = [s[0] for s in shaped if s[1] == "system"]
        if len(user_runs) > 1 and (system_idx or tools):
            last = user_runs[-1][0]
            parts = []
            if system_idx:
                parts.append(
                    f"the system prompt (message {', '.join(map(str, system_idx))}) is prepended as "
                    "'<system>\\n\\n' to its text"
                )
            if tools:
                parts.append(
                    "the tool declarations ([AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS]) are placed right before its [INST]"
                )
            earlier = ", ".join(str(r[0]) for r in user_runs[:-1])
            warnings.append(
                f"v3 layout: message {last} is the last user message, so {' and '.join(parts)}; the earlier "
                f"user message(s) {earlier} are rendered without them. The ids differ from those of a request "
                "whose last user message is another one from token 1 (right after <s>) on: no stable prefix "
                "once user messages follow the trunk"
            )

        if _is_prefix(shaped):
            warnings.append(
                f"message {shaped[-1][0]}: the request ends with an assistant message, rendered as a prefix "
                "(no </s>: the model continues it), as vLLM renders it and the Mistral API requires (\"prefix\": true)"
            )
        return shaped, warnings, id_map

    # ------------------------------------------------------------------ encode

    def encode(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        """Token ids of the rendered request, as the model receives them.

        Same ids as ``MistralCommonBackend.apply_chat_template(messages, tools)`` and
        ``MistralTokenizer.encode_chat_completion(...).tokens`` on the converted request;
        ends at the generation prompt (``[/INST]`` or ``[/TOOL_RESULTS]``).

        Raises:
            mistral_common.exceptions.MistralCommonException: the request is not valid for v3
                (e.g. it ends with an assistant message).
        """
        request, _ = self.to_mistral(messages, tools)
        return list(self.mistral.encode_chat_completion(request).tokens)

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Number of tokens of the rendered request (``len(encode(messages, tools))``)."""
        return sum(len(ids) for _, ids in self.segments(messages, tools))

    def segments(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        cache: MutableMapping[str, list[int]] | None = None,
    ) -> list[tuple[int, list[int]]]:
        """Split the rendered ids into consecutive per-message pieces.

        Args:
            messages: OpenAI-style messages.
            tools: OpenAI function tool declarations.
            cache: optional map ``key -> ids``; a key covers the tokenizer fingerprint,
                the message as normalised and everything its encoding depends on
                (position flags; system prompt and tools for the last user message),
                so a hit is always exact.

        Returns:
            ``[(owner, ids), ...]`` in render order; ``owner`` is the index in
            ``messages`` of the message the ids render, :data:`SEGMENT_FRAMING` (-1)
            for ``<s>`` (and an inserted empty user message), :data:`SEGMENT_TOOLS` (-2)
            for the ``[AVAILABLE_TOOLS]`` block. A run of merged messages is owned by
            its first message. The v3 system prompt has no piece of its own: it is
            part of the last user message's piece. ``sum of ids == encode(...)``.

        Raises:
            mistral_common.exceptions.MistralCommonException: as :meth:`encode`.
        """
        converted = self._convert(messages, tools)
        mt = self.mistral
        request = mt._chat_completion_request_validator.validate_request(converted.request)
        instruct = mt._instruct_request_normalizer.from_chat_completion_request(request)
        owners = self._owners(converted, len(instruct.messages))

        it = mt.instruct_tokenizer
        if not isinstance(it, InstructTokenizerV2):  # its tool markers are v2's (tekken is v3+)
            raise NotImplementedError(f"{type(it).__name__}: segmenting needs a v2+ instruct tokenizer")
        it.validate_messages(instruct.messages)
        it._validate_tool_results(request=instruct)
        if instruct.truncate_at_max_tokens is not None:  # never set by to_mistral
            raise NotImplementedError("truncation is not segmented")
        first_user, last_user = it.find_first_last_user(instruct)
        tools_json = (
            json.dumps([t.model_dump() for t in instruct.available_tools], sort_keys=True)
            if instruct.available_tools
            else ""
        )

        pieces: list[tuple[int, list[int]]] = [(SEGMENT_FRAMING, list(it.start()))]
        for k, msg in enumerate(instruct.messages):
            owner = owners[k]
            if isinstance(msg, UserMessage):
                is_last, is_first = k == last_user, k == first_user
                key_extra = (
                    f"{is_last}|{is_first}|{instruct.system_prompt if is_last else ''}|{tools_json if is_last else ''}"
                )

                def run_user(msg: UserMessage = msg, is_last: bool = is_last, is_first: bool = is_first) -> list[int]:
                    ids, _, _ = it.encode_user_message(
                        msg,
                        instruct.available_tools,
                        is_last,
                        is_first,
                        system_prompt=instruct.system_prompt,
                        force_img_first=True,
                        settings=instruct.settings,
                    )
                    return list(ids)

                ids = self._cached(cache, "user", msg, key_extra, run_user)
                if ids and ids[0] == it.BEGIN_AVAILABLE_TOOLS:
                    end = ids.index(it.END_AVAILABLE_TOOLS) + 1
                    pieces.append((SEGMENT_TOOLS, ids[:end]))
                    ids = ids[end:]
            elif isinstance(msg, ToolMessage):
                before = k < last_user

                def run_tool(msg: ToolMessage = msg, before: bool = before) -> list[int]:
                    return list(it.encode_tool_message(msg, before)[0])

                ids = self._cached(cache, "tool", msg, str(before), run_tool)
            elif isinstance(msg, AssistantMessage):
                before = k < last_user

                def run_assistant(msg: AssistantMessage = msg, before: bool = before) -> list[int]:
                    return list(it.encode_assistant_message(message=msg, is_before_last_user_message=before))

                ids = self._cached(cache, "assistant", msg, str(before), run_assistant)
            elif isinstance(msg, SystemMessage):  # v7+ only; v3 folds system messages into system_prompt
                ids = list(it.encode_system_message(msg)[0])
            else:
                raise TypeError(f"unexpected message type {type(msg).__name__}")
            if ids:
                pieces.append((owner, ids))
        return pieces

    def _cached(
        self,
        cache: MutableMapping[str, list[int]] | None,
        kind: str,
        msg: Any,
        extra: str,
        run: Callable[[], list[int]],
    ) -> list[int]:
        if cache is None:
            return run()
        key = hashlib.sha256(
            f"{self.fingerprint}|{kind}|{extra}|{msg.model_dump_json()}".encode()
        ).hexdigest()
        hit = cache.get(key)
        if hit is not None:
            return list(hit)
        ids: list[int] = run()
        cache[key] = list(ids)
        return ids

    @staticmethod
    def _owners(converted: _Converted, n_normalized: int) -> list[int]:
        """Original message index of each normalised message (mirrors the v3 normalizer's grouping)."""
        roles = [m.role.value if hasattr(m.role, "value") else str(m.role) for m in converted.request.messages]
        owners: list[int] = []
        first_role: str | None = None
        for start, end in _role_runs(roles):
            role = roles[start]
            if role == "system":
                continue
            if first_role is None:
                first_role = role
            if role == "tool":
                owners.extend(converted.origin[start:end])
            else:
                owners.append(converted.origin[start])
        if first_role != "user":
            owners.insert(0, SEGMENT_FRAMING)
        if len(owners) != n_normalized:
            raise RuntimeError(
                f"segmenter grouping ({len(owners)} messages) disagrees with mistral-common's normalizer "
                f"({n_normalized} messages)"
            )
        return owners
