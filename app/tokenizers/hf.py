"""Exact counting with a Hugging Face tokenizer and its chat template (transformers).

The request is rendered once with the profile's chat template and encoded through the
segment cache (:mod:`app.tokenizers.segments`): the text is cut next to every added token,
so zone boundaries (placed before an added token) are exact token offsets and the
concatenated ids equal ``apply_chat_template(..., tokenize=True)`` on the same messages
(DESIGN.md section 3; tested on every request of every shared trace).

Native render ("native"): for a chat template ctxd ships, a Python transliteration bound
to the template's sha256 (:mod:`app.tokenizers.native`) renders the request in well under
a millisecond; any other template, or input outside the shapes it handles, falls back to
the placeholder render below.

Render cache ("placeholders"): for ChatML-family templates such as Qwen3's, each message
content is replaced by a short placeholder before rendering and substituted back after.
The template then renders a small skeleton (milliseconds instead of ~65 ms for an
80k-token request). This is exact only for contents the template treats as opaque
strings; :func:`inert` lists the cases it inspects (tool-response-wrapped user text,
think tags, leading newlines of assistant text, empty strings) and those contents are
rendered as themselves. A test proves the result equal to the full render.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any

import orjson

from app.caches import ENTRY_OVERHEAD, ByteLRU, memoize, text_key
from app.domain.cuts import windowed_head_tail
from app.domain.errors import ProviderRuleViolation, TemplateUnsupported
from app.domain.layout import Conversation, LeafMessage
from app.domain.ports import Measurement
from app.domain.text import ControlStrings, cut_head_tail
from app.tokenizers.graphemes import snap
from app.tokenizers.native import native_renderer, rendered_bytes, template_sha256
from app.wire.openai import tool_call_id

log = logging.getLogger(__name__)

PLACEHOLDER = re.compile("\ue000([0-9]+)\ue001")

# Bounds of the in-process memos (issue 9 item 7): the meters' own memos are cachetools
# LRUs bounded in bytes (app/caches.py). A leaf message's template dict is kept in the
# message's own memo (LeafMessage.memo), which lives as long as the session's leaf cache.
COUNT_MEMO_BYTES = 4 * 1024 * 1024  # count_text: sha256 of a text -> its token count
HEAD_TAIL_MEMO_BYTES = 32 * 1024 * 1024  # head_tail and cut_ends (each): heads and tails cut from payloads
HEADS_BYTES = 1024 * 1024  # _heads: root/trunk render offsets per root+trunk
RECENT_BYTES = 64 * 1024 * 1024  # _recent: the previous request's text and encoding per root+trunk
RENDERS_BYTES = 64 * 1024 * 1024  # _renders: the native renderer's last render per conversation
PREFETCH_WORKERS = 2  # threads that tokenize prefetched segments (the batch encode releases the GIL)
PREFETCH_HANDOFF_S = 0.002  # seconds prefetch waits for a worker to take its job


def memoized_cuts(cut: Callable[[str, int, int], tuple[str, str, int]], max_bytes: int
                  ) -> tuple[Callable[..., tuple[str, str, int]], Callable[..., tuple[str, str] | None]]:
    """A meter's ``head_tail`` (the exact ``cut``) and ``cut_ends`` (windowed, see
    :func:`app.domain.cuts.windowed_head_tail`), each memoized in ``max_bytes`` keyed by the
    text's sha256: payloads are immutable, so a capped output is cut once, not per GET."""

    def key(text: str, head: int, tail: int) -> tuple[bytes, int, int]:
        return text_key(text), head, tail

    def size(result: tuple[str, ...] | None) -> int:
        return ENTRY_OVERHEAD + (sum(sys.getsizeof(part) for part in result[:2]) if result else 0)

    def cut_ends(text: str, head: int, tail: int) -> tuple[str, str] | None:
        return windowed_head_tail(text, head, tail, cut)

    return memoize(max_bytes, key=key, sizeof=size)(cut), memoize(max_bytes, key=key, sizeof=size)(cut_ends)


def _encoded_bytes(text: str, encoded: Any) -> int:
    """Estimated bytes of a remembered request: its text, ids (4 bytes each) and per-segment
    offsets and status (~80 bytes a segment)."""
    return sys.getsizeof(text) + 4 * len(encoded.id_array) + 80 * len(encoded.status) + ENTRY_OVERHEAD


def parse_arguments(arguments: str) -> Any:
    """Tool-call arguments as the template receives them: a JSON object is parsed (as vLLM
    and SGLang do for OpenAI requests), anything else is passed as the string."""
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        return arguments
    return value if isinstance(value, dict) else arguments


def arguments_text(arguments: str) -> str:
    """What a template's ``arguments | tojson`` prints for :func:`parse_arguments`'s value:
    the JSON object dumped as transformers' ``tojson`` does, else the string itself.
    Passing this string instead of the parsed object renders the same text (a string is
    printed verbatim), without parsing the arguments again on every request."""
    value = parse_arguments(arguments)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else arguments


def template_messages(conversation: Conversation, *, render_reasoning: bool = False,
                      arguments_as_text: bool = False) -> list[dict[str, Any]]:
    """The chat-template input for ``conversation``: system, trunk user message, leaf.

    Assistant ``content`` is never None (the Qwen3 template rejects it): "" instead.
    Tool-call ids are the openai body's (:func:`app.wire.openai.tool_call_id`), so a
    template that renders ids renders what is served.
    Tool-call arguments are parsed (:func:`parse_arguments`), or with ``arguments_as_text``
    given as the text the template would print for them (:func:`arguments_text`); the
    leaf's dicts are then memoized per leaf message and shared between calls: treat
    them as read-only (the renderers and transformers' template only read them).
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": conversation.system},
        {"role": "user", "content": conversation.trunk},
    ]
    if arguments_as_text:
        messages.extend(_shared_template_entry(m, render_reasoning)[0] for m in conversation.leaf)
    else:
        messages.extend(_template_message(m, render_reasoning, parse_arguments) for m in conversation.leaf)
    return messages


def _template_message(m: LeafMessage, render_reasoning: bool, args: Callable[[str], Any]) -> dict[str, Any]:
    if m.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": tool_call_id(c.call_id), "type": "function",
                 "function": {"name": c.name, "arguments": args(c.arguments)}}
                for c in m.tool_calls
            ]
        if render_reasoning and m.reasoning:
            out["reasoning_content"] = m.reasoning
        return out
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": tool_call_id(m.call_id or ""), "name": m.name, "content": m.content}
    return {"role": m.role, "content": m.content}


def _shared_template_entry(m: LeafMessage, render_reasoning: bool) -> tuple[dict[str, Any], dict[Any, Any]]:
    """``m``'s template dict with its arguments as text, and a memo for what the native
    renderer derives from that dict; built once per message (kept in ``m.memo``: a
    session's leaf messages are the same objects from request to request)."""
    key = ("template", render_reasoning)
    found = m.memo.get(key)
    if found is None:
        found = m.memo[key] = (_template_message(m, render_reasoning, arguments_text), {})
    return found


def openai_to_template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversion applied to an OpenAI chat-completions ``messages`` list (used by
    tests to count a served body independently)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant":
            m["content"] = m.get("content") or ""
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": parse_arguments(c["function"]["arguments"])}}
                    for c in m["tool_calls"]
                ]
        out.append(m)
    return out


def _marked(message: dict[str, Any]) -> bool:
    """Whether any string of ``message`` contains the placeholder marker."""
    for key in ("content", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str) and ("\ue000" in value or "\ue001" in value):
            return True
    return any("\ue000" in json.dumps(c, ensure_ascii=False) for c in message.get("tool_calls") or ())


def inert(role: str, content: str) -> bool:
    """Whether a ChatML-family template (Qwen3) only concatenates ``content`` of ``role``:
    then a placeholder renders identically once substituted back."""
    if not content or "\ue000" in content or "\ue001" in content:
        return False
    if "<think>" in content or "</think>" in content:
        return False
    if role == "user":
        return not (content.startswith("<tool_response>") and content.endswith("</tool_response>"))
    if role == "assistant":
        return not content.startswith("\n")
    return role in ("system", "tool")


def control_strings(tokenizer: Any) -> tuple[str, ...]:
    """The added tokens (special or not) that ``tokenizer`` matches inside ordinary text,
    i.e. whose content encodes to the token's own id: the strings a payload must not
    carry into a render (TokenMeter.control_strings). Whitespace-only added tokens are
    vocabulary, not control, and are left out. Sorted."""
    out = []
    for token_id, token in tokenizer.added_tokens_decoder.items():
        content = token.content
        if content.strip() and token_id in tokenizer.encode(content, add_special_tokens=False):
            out.append(content)
    return tuple(sorted(out))


def _canonical_json(value: Any) -> bytes:
    """Compact JSON of ``value`` with sorted keys (orjson's, or ``json``'s prefixed ``json:``
    for what orjson refuses, e.g. an integer beyond 64 bits): a cache key's text, distinct
    for values that render differently (``1``, ``1.0`` and ``true`` differ)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return b"json:" + json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _plain_backend(tokenizer: Any) -> Any | None:
    """The ``tokenizers.Tokenizer`` behind a fast transformers tokenizer, when encoding with
    it gives what ``tokenizer.encode(text, add_special_tokens=False)`` gives (no truncation,
    no padding, special tokens not split: the settings transformers applies before each of
    its encodes), else None. Called directly it skips transformers' per-call wrapping
    (a tenth of a millisecond per short text: the tombstones a GET counts)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return None
    if backend.truncation is not None or backend.padding is not None or getattr(backend, "encode_special_tokens", False):
        return None
    return backend


class HFChatMeter:
    """TokenMeter for a transformers tokenizer with a chat template.

    Args:
        tokenizer: a loaded ``PreTrainedTokenizerFast``.
        encode: rendered text -> ids (a SegmentEncoder's ``encode``; default: plain encode).
        render_reasoning: render assistant ``reasoning`` (profile switch; off by default).
        render_cache: "native" (a pinned template's Python renderer, else "placeholders"),
            "placeholders" (ChatML-family templates) or "none" (full render).
        template_kwargs: the profile's ``chat_template_kwargs``, passed to every render
            (as vLLM and SGLang pass them), e.g. ``{"enable_thinking": False}``.

    Raises ValueError for an unknown ``render_cache``.
    """

    def __init__(self, tokenizer: Any, *, encoder: Any | None = None, render_reasoning: bool = False,
                 render_cache: str = "none", template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.render_reasoning = render_reasoning
        self.render_cache = render_cache
        self.template_kwargs = dict(template_kwargs or {})
        added = sorted((t.content for t in tokenizer.added_tokens_decoder.values()), key=len, reverse=True)
        self._added = re.compile("|".join(re.escape(a) for a in added)) if added else None
        self.control_strings = ControlStrings(control_strings(tokenizer))
        self._backend = _plain_backend(tokenizer)
        # payloads are immutable: a text is counted, and a capped tool output cut, once (keyed
        # by the text's sha256, so the memo does not hold the text)
        self.count_text = memoize(COUNT_MEMO_BYTES, key=text_key,
                                  sizeof=lambda _: 32 + ENTRY_OVERHEAD)(self._count_text)
        self.head_tail, self.cut_ends = memoized_cuts(self._head_tail, HEAD_TAIL_MEMO_BYTES)
        self._heads: ByteLRU[str, tuple[int, int, int]] = ByteLRU(HEADS_BYTES, lambda key, _: len(key) + ENTRY_OVERHEAD)
        self._recent: ByteLRU[str, tuple[str, Any]] = ByteLRU(
            RECENT_BYTES, lambda key, value: len(key) + _encoded_bytes(*value))
        self._prefetcher: ThreadPoolExecutor | None = None  # prefetch's workers, started on first use
        self._last_head: tuple[int, str, str] | None = None  # measure: the last request's root+trunk key
        self._prefetching = 0  # prefetch jobs submitted and not finished
        self._prefetch_lock = threading.Lock()
        # the native renderer's last render per conversation (render_qwen3's ``renders``)
        self._renders: ByteLRU[int, Any] = ByteLRU(RENDERS_BYTES, rendered_bytes)
        if render_cache not in ("native", "placeholders", "none"):
            raise ValueError(f"unknown render_cache {render_cache!r}; expected native, placeholders or none")
        self._native = native_renderer(getattr(tokenizer, "chat_template", None)) if render_cache == "native" else None
        if render_cache == "native" and self._native is None:
            log.warning("render_cache = native: no native renderer for this chat template (sha256 %s); "
                        "using the placeholder render", template_sha256(str(tokenizer.chat_template))[:16])
        self._template = self._compile(tokenizer) if render_cache in ("native", "placeholders") else None
        self._special = dict(tokenizer.special_tokens_map)

    @staticmethod
    def _compile(tokenizer: Any) -> Any:
        """The chat template compiled in a plain (non-sandboxed) jinja environment with the
        same options, filters and globals as transformers' sandboxed one. Used only for the
        bundled template the profile trusts (``render_cache = "placeholders"``): the
        sandbox's attribute checks cost most of a render (tests compare both renders)."""
        import jinja2
        from transformers.utils.chat_template_utils import _compile_jinja_template

        sandboxed = _compile_jinja_template(tokenizer.chat_template).environment
        env = jinja2.Environment(trim_blocks=sandboxed.trim_blocks, lstrip_blocks=sandboxed.lstrip_blocks,
                                 keep_trailing_newline=sandboxed.keep_trailing_newline,
                                 extensions=[jinja2.ext.loopcontrols])
        env.filters.update(sandboxed.filters)
        env.globals.update(sandboxed.globals)
        return env.from_string(tokenizer.chat_template)

    @property
    def tokenizer_id(self) -> str:
        """A stable id of the tokenizer (32 hex chars of its fingerprint): the key of stored
        payload token counts. Computed once."""
        known = getattr(self, "_tokenizer_id", None)
        if known is None:
            if self.encoder is not None:
                known = str(self.encoder.fingerprint)[:32]
            else:
                from app.tokenizers.segments import tokenizer_fingerprint

                known = tokenizer_fingerprint(self.tokenizer.backend_tokenizer)[:32]
            self._tokenizer_id = known
        return known

    # -- text-level --------------------------------------------------------------------

    # Counts and cuts call the backend's batch methods, never ``Tokenizer.encode``: a batch
    # releases the GIL while it tokenizes, ``encode`` takes it back after every switch, so
    # counting a payload after its POST (a background task, ~0.5 s per MB) slowed every other
    # thread of the worker (the event loop, the next GET) to about a quarter of its speed.

    def _count_text(self, text: str) -> int:
        if self._backend is not None:
            return len(self._backend.encode_batch_fast([text], add_special_tokens=False)[0])
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        """Cut ``text`` at token boundaries (character offset mapping): an exact prefix and
        suffix, never inside a character (:func:`app.domain.text.cut_head_tail`)."""
        if self._backend is not None:
            spans = self._backend.encode_batch([text], add_special_tokens=False)[0].offsets
        else:
            spans = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return cut_head_tail(text, spans, head_tokens, tail_tokens, snap=snap)

    def encode(self, text: str) -> list[int]:
        if self.encoder is not None:
            return list(self.encoder.encode(text).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # -- rendering ---------------------------------------------------------------------

    def render(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, *,
               add_generation_prompt: bool = True, memos: Sequence[dict[Any, Any] | None] | None = None,
               ends: list[int] | None = None) -> str:
        """The chat template's text for ``messages`` (same output as
        ``tokenizer.apply_chat_template(..., tokenize=False, **template_kwargs)``). ``memos``:
        per message, a memo the native renderer may keep its work in (messages passed
        again unchanged in later renders). ``ends``: filled with where each message's text
        ends in the render when the native renderer made it (see
        :func:`app.tokenizers.native.render_qwen3`); left empty by the other renders."""
        if self._native is not None:
            text = self._native(messages, tools, add_generation_prompt, memos=memos,
                                renders=self._renders if memos is not None else None, ends=ends,
                                **self.template_kwargs)
            if text is not None:
                return text
        if self._template is None or any(_marked(m) for m in messages):
            return str(self.tokenizer.apply_chat_template(
                messages, tools=list(tools) if tools else None, add_generation_prompt=add_generation_prompt,
                tokenize=False, **self.template_kwargs))
        contents: list[str] = []
        skeleton = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, str) and inert(m["role"], content):
                m = dict(m, content=f"\ue000{len(contents)}\ue001")
                contents.append(content)
            skeleton.append(m)
        text = self._template.render(messages=skeleton, tools=list(tools) if tools else None,
                                     add_generation_prompt=add_generation_prompt,
                                     **(self._special | self.template_kwargs))
        return PLACEHOLDER.sub(lambda match: contents[int(match.group(1))], text)

    def _boundary_before(self, text: str, pos: int) -> int:
        """The start of the last added token at or before ``pos`` (a safe cut point)."""
        if self._added is None:
            return pos
        start = 0
        for match in self._added.finditer(text, max(0, pos - 4096), pos + 1):
            if match.start() <= pos:
                start = match.start()
        return start

    def _head(self, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> tuple[int, int, int]:
        """(trunk start, leaf start, root tokens without tools) in the render of the root and
        trunk; cached by their content (they change only when the trunk is rewritten).
        Raises TemplateUnsupported (a 500 problem: the profile's, not the caller's) when the
        template renders the trunk differently with and without tools."""
        key = hashlib.sha256(_canonical_json([messages[:2], tools])).hexdigest()
        known = self._heads.get(key)
        if known is not None:
            return known
        head = self.render(messages[:2], tools, add_generation_prompt=False)
        probe = self.render([messages[0], {"role": "user", "content": ""}], tools, add_generation_prompt=False)
        common = next((i for i, (a, b) in enumerate(zip(probe, head)) if a != b), min(len(probe), len(head)))
        trunk_start = self._boundary_before(head, common)
        leaf_start = len(head)
        bare_root = 0
        if tools:
            bare = self.render(messages[:2], None, add_generation_prompt=False)
            bare_probe = self.render([messages[0], {"role": "user", "content": ""}], None, add_generation_prompt=False)
            bare_common = next((i for i, (a, b) in enumerate(zip(bare_probe, bare)) if a != b), 0)
            bare_trunk = self._boundary_before(bare, bare_common)
            if bare[bare_trunk:] != head[trunk_start:]:
                raise TemplateUnsupported(
                    "the chat template renders the trunk differently with and without tools, so the tools' "
                    "tokens cannot be counted apart", reason="trunk_depends_on_tools")
            bare_root = len(self.encode(bare[:bare_trunk]))
        value = (trunk_start, leaf_start, bare_root)
        self._heads.put(key, value)
        return value

    def prefetch(self, messages: Sequence[LeafMessage], *, handoff: bool = True) -> None:
        """Start tokenizing the text segments of ``messages`` (rendered apart, natively)
        that the segment cache lacks, on a worker thread: the batch encode releases the
        GIL, so it runs on another core while the caller plans; the caller's
        :meth:`measure` then finds them in the cache (or waits for them instead of encoding
        them again). Only with the segment cache and the native renderer, and while a
        worker is free (under load every core is busy anyway: measure then encodes them as
        before); a no-op otherwise. Measurements do not change (see
        ``SegmentEncoder.prefetch_job``)."""
        if self.encoder is None or self._native is None or not messages or self._prefetching >= PREFETCH_WORKERS:
            return
        entries = [_shared_template_entry(m, self.render_reasoning) for m in messages]
        text = self._native([e[0] for e in entries], None, False, memos=[e[1] for e in entries],
                            **self.template_kwargs)
        job = self.encoder.prefetch_job(text) if text else None
        if job is None:
            return
        started = threading.Event()

        def run() -> None:
            started.set()
            try:
                job()
            except Exception:  # measure encodes the segments itself: slower, still exact
                log.warning("prefetch: tokenizing the new messages failed; the request encodes them itself",
                            exc_info=True)
            finally:
                with self._prefetch_lock:
                    self._prefetching -= 1

        with self._prefetch_lock:
            if self._prefetcher is None:
                self._prefetcher = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="ctxd-prefetch")
            self._prefetching += 1
            self._prefetcher.submit(run)
        # hand the GIL over until the worker is inside the GIL-free encode (bounded, in case
        # the pool filled up meanwhile: the segments are then encoded later, or by measure);
        # not for a background caller (handoff False), which measures nothing after
        if handoff:
            started.wait(PREFETCH_HANDOFF_S)

    def measure(self, conversation: Conversation) -> Measurement:
        """Render once, encode through the segment cache, count each zone exactly.

        tools = root tokens with the declarations - root tokens without them (the template
        renders the trunk and leaf identically either way; checked on the trunk).

        Raises:
            ProviderRuleViolation: the chat template refused the request (a Jinja error,
                e.g. a template's ``raise_exception``, or a ValueError from rendering).
        """
        import jinja2

        try:
            return self._measure(conversation)
        except (jinja2.TemplateError, ValueError) as exc:
            raise ProviderRuleViolation(f"the profile's chat template refused the request: {exc}",
                                        rule="chat-template", reason=str(exc)) from exc

    def _measure(self, conversation: Conversation) -> Measurement:
        memos: list[dict[Any, Any] | None] | None = None
        ends: list[int] = []  # where each message's text ends in the render (native renders only)
        if self._native is not None:
            messages = [{"role": "system", "content": conversation.system},
                        {"role": "user", "content": conversation.trunk}]
            memos = [None, None]
            key = ("template", self.render_reasoning)
            for m in conversation.leaf:
                entry = m.memo.get(key) or _shared_template_entry(m, self.render_reasoning)
                messages.append(entry[0])
                memos.append(entry[1])
        else:
            messages = template_messages(conversation, render_reasoning=self.render_reasoning)
        tools = list(conversation.tools)
        text = self.render(messages, tools, memos=memos, ends=ends)
        trunk_start, leaf_start, bare_root = self._head(messages, tools or None)
        if self._added is not None and not self._added.match(text, leaf_start):
            leaf_start = self._boundary_before(text, leaf_start)
        stats: dict[str, object] = {}
        if self.encoder is not None:
            # the previous request with the same root and trunk (usually the session's
            # last one): reuse its encoding over the common prefix
            last_head = self._last_head  # (length, text, key) of the last root + trunk: one read, thread-safe
            if last_head is not None and last_head[0] == leaf_start and text.startswith(last_head[1]):
                head_key = last_head[2]  # the same root and trunk as the last request (compared in C, not hashed)
            else:
                head = text[:leaf_start]
                head_key = hashlib.sha256(head.encode("utf-8", "surrogatepass")).hexdigest()
                self._last_head = (leaf_start, head, head_key)
            recent = self._recent.get(head_key)
            encoded = self.encoder.encode_after(text, *recent) if recent else self.encoder.encode(text)
            self._recent.put(head_key, (text, encoded))
            ids = encoded.id_array
            if not (encoded.is_boundary(trunk_start) and encoded.is_boundary(leaf_start)):
                raise TemplateUnsupported(
                    f"a zone start (trunk at char {trunk_start}, leaf at char {leaf_start}) is not next to an added "
                    "token of the render, so the zones cannot be counted exactly", reason="zone_not_at_boundary")
            root_n = encoded.token_offset_at(trunk_start)
            leaf_at = encoded.token_offset_at(leaf_start)
            # segments by zone: zone starts are segment boundaries, so slices of status
            offsets, status = encoded.char_offsets, encoded.status
            cuts = (0, bisect_left(offsets, trunk_start), bisect_left(offsets, leaf_start), len(status))
            stats["segments"] = {
                zone: {"hits": part.count("hit"), "misses": part.count("miss")}
                for z, zone in enumerate(("root", "trunk", "leaf"))
                for part in (status[cuts[z] : cuts[z + 1]],)}
            leaf_tokens = _leaf_tokens(encoded, ends, len(messages), leaf_at)
        else:
            root_ids = self.tokenizer.encode(text[:trunk_start], add_special_tokens=False)
            trunk_ids = self.tokenizer.encode(text[trunk_start:leaf_start], add_special_tokens=False)
            leaf_ids = self.tokenizer.encode(text[leaf_start:], add_special_tokens=False)
            ids = tuple(root_ids + trunk_ids + leaf_ids)
            root_n, leaf_at = len(root_ids), len(root_ids) + len(trunk_ids)
            leaf_tokens = None  # no segments: the leaf is encoded as one text
        by_zone = {"root": root_n, "trunk": leaf_at - root_n, "leaf": len(ids) - leaf_at}
        tool_tokens = by_zone["root"] - bare_root if tools else 0
        by_role = {"system": by_zone["root"] - tool_tokens, "tools": tool_tokens,
                   "task_state": by_zone["trunk"], "observations": by_zone["leaf"]}
        return Measurement(total=len(ids), by_zone=by_zone, by_role=by_role, ids=ids, leaf_tokens=leaf_tokens,
                           extra={"text": text, "zone_chars": (trunk_start, leaf_start), **stats})


def _leaf_tokens(encoded: Any, ends: Sequence[int], n_messages: int, leaf_at: int) -> tuple[int, ...] | None:
    """Each leaf message's tokens in the request, its chat framing included: the tokens
    between the end of the message before it and its own end in the render (``ends``, from
    the native renderer: system, trunk, then the leaf), read off the segments of the one
    encoding (every message of a native render ends next to an added token, so each end is
    a segment boundary). What follows the last message is the generation prompt. None when
    the render gave no ends (not native) or an end is not a boundary (then nothing is
    guessed), or when the leaf would not start where its zone does."""
    if len(ends) != n_messages or n_messages < 2:
        return None
    at = encoded.token_offsets_at(ends[1:])  # the trunk's end (the leaf's start), then each leaf message's
    if at is None or at[0] != leaf_at:
        return None
    return tuple(b - a for a, b in pairwise(at))


__all__ = ["HFChatMeter", "arguments_text", "inert", "openai_to_template_messages", "parse_arguments", "template_messages"]
