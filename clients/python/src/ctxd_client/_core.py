"""What the sync and async clients share: request bodies, the message-position
bookkeeping, response parsing, errors and the retry policy (no I/O here)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from tenacity import (
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

Format = Literal["openai", "anthropic", "tokens"]
PostFormat = Literal["openai", "anthropic", "events"]
DEFAULT_URL = "http://127.0.0.1:8000"
#: Most events or messages in one POST (the server's limit).
BATCH = 1000
#: Statuses worth retrying: the request changed nothing (429 rate limit, 503 contention)
#: or may not have reached ctxd (502, 504 from a proxy).
RETRY_STATUSES = frozenset({429, 502, 503, 504})


class CtxdError(Exception):
    """A problem+json answer of ctxd (``status``, ``problem``: the RFC 9457 body)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")


class NotFoundError(CtxdError):
    """404: no such session or handle (or another tenant's)."""


class ConflictError(CtxdError):
    """409: an event id or a message position re-used with other content."""


class InvalidInputError(CtxdError):
    """422: bad input; ctxd stored nothing."""


class RetryableError(CtxdError):
    """429 / 502 / 503 / 504 (retried; raised once the attempts are spent)."""


#: A surrogate code point (U+D800 to U+DFFF): a Python string holds one when JSON's ``\ud83d``
#: escape (half of an emoji) was decoded alone; UTF-8 cannot encode it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _key_path(path: str, key: str) -> str:
    """``path`` and one object key: ``.name`` for an identifier, else ``["..."]`` (JSON-escaped,
    so printable whatever the key holds)."""
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _lone_surrogate(value: Any, path: str, loc: tuple[str | int, ...], shift: Mapping[str, int]
                    ) -> tuple[str, tuple[str | int, ...], int, str, str | None] | None:
    """``(path, loc, index, surrogate, key)`` of the first string of ``value`` holding a
    surrogate code point, in document order (``key``: the object key holding it, when it is
    a key rather than a value; ``path`` and ``loc`` then name its object); None when there is
    none. ``shift``: added to the indices of the top-level lists it names."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return (path, loc, found.start(), found.group(), None) if found else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            key = str(key)
            found = _SURROGATE.search(key)
            if found:
                return path, loc, found.start(), found.group(), key
            offset = shift.get(key, 0) if not loc else 0
            hit = _lone_surrogate(item, _key_path(path, key), (*loc, key), {key: offset} if offset else {})
            if hit is not None:
                return hit
        return None
    if isinstance(value, (list, tuple)):
        offset = shift.get(str(loc[-1]), 0) if loc else 0
        for i, item in enumerate(value):
            hit = _lone_surrogate(item, f"{path}[{i + offset}]", (*loc, i + offset), {})
            if hit is not None:
                return hit
    return None


def json_body(value: Any, *, shift: Mapping[str, int] | None = None) -> bytes:
    """``value`` as the request body ctxd is sent: compact JSON in UTF-8, the bytes httpx's
    ``json=`` would send. Every body of the client goes through here, before its request.

    Text that UTF-8 cannot encode (a lone surrogate, e.g. a tool output holding half of an
    emoji) raises :class:`InvalidInputError` naming the field, before anything is sent:
    ``events[3].payload: a lone surrogate U+D83D at character 12 cannot be sent as UTF-8
    JSON`` (the character index is 0-based; ``problem["loc"]`` is the field as ctxd's own
    422 would name it, ``["body", "events", 3, "payload"]``). ``shift``: added to the
    indices of the top-level lists it names, so that a batch names the item's place in what
    the caller passed (``{"events": 1000}`` for the second batch of 1,000)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        hit = _lone_surrogate(value, "", (), shift or {})
        if hit is None:  # pragma: no cover - json.dumps writes only what value holds
            raise
        path, loc, at, char, key = hit
        where = f"character {at}" if key is None else f"character {at} of the key {json.dumps(key)}"
        detail = (f"{path or 'body'}: a lone surrogate U+{ord(char):04X} at {where} cannot be sent as UTF-8 JSON "
                  "(half of an emoji or of another character outside the BMP?); nothing was sent")
        raise InvalidInputError(422, {"title": "Text not encodable as UTF-8", "status": 422, "detail": detail,
                                      "loc": ["body", *loc]}) from None


def error_for(response: httpx.Response) -> CtxdError:
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason_phrase, "detail": response.text[:500]}
    if not isinstance(problem, dict):
        problem = {"detail": problem}
    cls = {404: NotFoundError, 409: ConflictError, 422: InvalidInputError}.get(response.status_code, CtxdError)
    if response.status_code in RETRY_STATUSES:
        cls = RetryableError
    error = cls(response.status_code, problem)
    error.retry_after = _retry_after(response)  # type: ignore[attr-defined]
    return error


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def retryable(exc: BaseException) -> bool:
    """A transport failure (the request may or may not have been applied: a retry is safe
    because it carries the same event ids / message positions) or a retryable status."""
    return isinstance(exc, (httpx.TransportError, RetryableError))


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` in all (1: no retry); exponential waits from ``initial`` seconds up to
    ``maximum``, or the server's ``Retry-After`` when it gives one."""

    attempts: int = 4
    initial: float = 0.2
    maximum: float = 5.0

    def tenacity_kwargs(self) -> dict[str, Any]:
        backoff = wait_exponential(multiplier=self.initial, max=self.maximum) + wait_random(0, self.initial)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            after = getattr(exc, "retry_after", None)
            return min(float(after), self.maximum) if after is not None else float(backoff(state))

        return {"stop": stop_after_attempt(self.attempts), "wait": wait, "retry": retry_if_exception(retryable),
                "reraise": True}


DEFAULT_RETRY = RetryPolicy()


#: The headers of a request with a body (the bytes of :func:`json_body`).
JSON_HEADERS = {"Content-Type": "application/json"}


def request_content(json: Any, content: bytes | None) -> tuple[bytes | None, dict[str, str] | None]:
    """The body bytes and headers of one call: ``content`` as given (already encoded by
    :func:`json_body`), else ``json`` encoded by :func:`json_body` (which raises
    InvalidInputError, before anything is sent, for text UTF-8 cannot carry), else none."""
    if content is None and json is not None:
        content = json_body(json)
    return content, (JSON_HEADERS if content is not None else None)


def http_options(url: str | None, api_key: str | None, timeout: float) -> dict[str, Any]:
    """The httpx client options: ``url`` (default ``$CTXD_URL``, else http://127.0.0.1:8000),
    ``Authorization: Bearer`` with ``api_key`` (default ``$CTXD_API_KEY``), ``timeout``."""
    key = api_key if api_key is not None else os.environ.get("CTXD_API_KEY")
    return {"base_url": url or os.environ.get("CTXD_URL") or DEFAULT_URL, "timeout": timeout,
            "headers": {"Authorization": f"Bearer {key}"} if key else None}


def handle_params(lines: str | None, offset: int | None, length: int | None) -> dict[str, Any]:
    return {k: v for k, v in (("lines", lines), ("offset", offset), ("length", length)) if v is not None}


def search_params(q: str, limit: int | None, context: int | None, cursor: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"q": q}
    params.update({k: v for k, v in (("limit", limit), ("context", context), ("cursor", cursor)) if v is not None})
    return params


def jsonable(value: Any) -> Any:
    """``value`` with the SDKs' pydantic objects (``ChatCompletionMessage``, an Anthropic
    ``Message`` or its content blocks) dumped to plain JSON values, at any depth."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                          .encode("utf-8", "surrogatepass")).hexdigest()


def is_event(item: Any) -> bool:
    """An item of ``POST /events`` (it has a ``kind``) rather than a provider message (which
    has a ``role`` and no ``kind``)."""
    return isinstance(item, Mapping) and "kind" in item


def with_event_ids(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events, each with an ``event_id`` (a new random one where missing): assigned once,
    before the first attempt, so a retry re-sends the same ids and ctxd answers duplicate."""
    return [dict(e) if e.get("event_id") else {**e, "event_id": uuid.uuid4().hex} for e in events]


def contract_body(goal: str | None, constraints: Sequence[str | Mapping[str, Any]],
                  contract: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task contract: ``contract`` as given, or ``goal`` with ``constraints`` (strings get
    the ids c1, c2, ...)."""
    if contract is not None:
        return dict(contract)
    if not goal:
        raise ValueError("give a goal (or a whole contract)")
    items = [dict(c) if isinstance(c, Mapping) else {"id": f"c{i}", "text": c} for i, c in enumerate(constraints, 1)]
    return {"goal": goal, "constraints": items}


def session_body(*, goal: str | None, constraints: Sequence[str | Mapping[str, Any]],
                 contract: Mapping[str, Any] | None, system: str, tools: Sequence[Any], profile: str | None,
                 model: str | None, metadata: Mapping[str, Any] | None, title: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"contract": contract_body(goal, constraints, contract), "system": system,
                            "tools": jsonable(list(tools))}
    for key, value in (("profile", profile), ("model", model), ("metadata", metadata), ("title", title)):
        if value is not None:
            body[key] = jsonable(value)
    return body


@dataclass
class MessageLog:
    """Which provider messages ctxd holds, by position (digests of what was posted), so
    each ``post`` sends only the messages from the first new or changed one on (``start``);
    ctxd compares any it already holds (equal: no-op, changed: 409)."""

    digests: list[str] = field(default_factory=list)
    system: str | None = None

    def plan(self, messages: Sequence[Any], system: Any = None) -> tuple[int, list[Any], list[str], Any]:
        """(start, the messages to send, the digests of all, the system to send or None)."""
        dumped = [jsonable(m) for m in messages]
        digests = [digest(m) for m in dumped]
        start = 0
        while start < min(len(digests), len(self.digests)) and digests[start] == self.digests[start]:
            start += 1
        sys_dumped = jsonable(system) if system is not None else None
        send_system = sys_dumped if sys_dumped is not None and digest(sys_dumped) != self.system else None
        return start, dumped[start:], digests, send_system

    def acknowledge(self, digests: list[str], system: Any) -> None:
        self.digests = digests
        if system is not None:
            self.system = digest(system)


@dataclass(frozen=True)
class AssembledRequest:
    """``GET /request``'s answer: ``body`` (the wire request to send as is) and ``manifest``
    (what it holds and why: tokens, budget, cache, items)."""

    body: dict[str, Any]
    manifest: dict[str, Any]

    def openai_kwargs(self) -> dict[str, Any]:
        """``body`` as keyword arguments of ``OpenAI().chat.completions.create``: fields the
        SDK does not name (``chat_template_kwargs`` for vLLM / SGLang) go in ``extra_body``."""
        body = dict(self.body)
        extra = {k: body.pop(k) for k in ("chat_template_kwargs",) if k in body}
        return body | ({"extra_body": extra} if extra else {})

    @property
    def tokens(self) -> int:
        """Exact tokens of the request (the profile's tokenizer and chat template)."""
        return int(self.manifest["tokens"]["total"])


def post_plan(log: MessageLog, items: Sequence[Any], fmt: PostFormat,
              system: Any) -> tuple[str, list[tuple[dict[str, Any], bytes]], list[str], Any]:
    """What ``Session.post`` sends: ``(kind, [(query params, JSON body bytes)], digests,
    system)``; kind ``events`` (ids assigned here, once) or ``messages`` (from the first new
    or changed position on, in batches of :data:`BATCH`). Every batch is encoded here
    (:func:`json_body`), before the first is sent: text UTF-8 cannot carry raises
    InvalidInputError naming the item by its index in ``items`` (``events[3].payload``,
    ``messages[7].content``) and nothing is sent."""
    if fmt == "events" or (items and all(is_event(i) for i in items)):
        events = with_event_ids(jsonable(list(items)))
        return "events", [({}, json_body({"events": list(c)}, shift={"events": i * BATCH}))
                          for i, c in enumerate(chunks(events))], [], None
    start, todo, digests, send_system = log.plan(items, system)
    calls = []
    for i, chunk in enumerate(chunks(todo)):
        body: dict[str, Any] = {"messages": list(chunk), "start": start + i * BATCH}
        if send_system is not None and i == 0:
            body["system"] = send_system
        calls.append(({"format": fmt}, json_body(body, shift={"messages": start + i * BATCH})))
    return "messages", calls, digests, send_system


def merge_answers(kind: str, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One answer for the batches of one ``post``: the last one's fields, every result."""
    if not answers:
        return {}
    key = "results" if kind == "events" else "messages"
    return answers[-1] | {key: [r for a in answers for r in a.get(key, [])]}


def chunks(items: Sequence[Any], size: int = BATCH) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [items]


RECALL_TOOL_NAME = "recall"
RECALL_HITS = 5


class RecallArgumentsError(ValueError):
    """A ``recall`` call's arguments that ctxd cannot run: not a JSON object, or neither a
    ``query`` nor a ``handle``. Its message is written for the model to correct its call."""


def recall_call(arguments: Mapping[str, Any] | str) -> tuple[str, dict[str, Any]]:
    """What a ``recall`` tool call asks (the declaration a profile with ``recall = true``
    adds; README "Recall"): ``("handles/<h>", {"lines": ...})`` to read a stored output back,
    or ``("search", {"q": ..., "limit": 5, "context": ...})`` to find earlier content.
    ``arguments``: the call's arguments, a mapping or the JSON string an SDK returns.
    Raises RecallArgumentsError (models often write truncated JSON or leave both out)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    except ValueError as exc:
        raise RecallArgumentsError(f"the arguments are not valid JSON ({exc}); send a JSON object") from exc
    if not isinstance(args, dict):
        raise RecallArgumentsError("the arguments must be a JSON object, e.g. {\"query\": \"parse_header\"}")
    if args.get("handle"):
        return f"handles/{args['handle']}", handle_params(args.get("lines"), None, None)
    if not str(args.get("query") or "").strip():
        raise RecallArgumentsError("give `query` (at least 3 characters, e.g. an identifier or an error text) or "
                                   "`handle` (and optionally `lines`, \"a:b\")")
    return "search", search_params(str(args["query"]), RECALL_HITS, args.get("context", 2), None)


def recall_text(path: str, response: httpx.Response) -> str:
    """The text to post as a ``recall`` call's tool result (``path`` from
    :func:`recall_call`): the payload read back, or the search hits one per match (seq,
    kind, handle or field, line range, the lines), or "no match"."""
    if path != "search":
        return response.text
    found = [f"seq {hit['seq']} {hit['kind']}, "
             + (f"handle {m['handle'][:12]} lines {m['lines']}" if m.get("handle") else f"{m['field']} lines {m['lines']}")
             + f":\n{m['text']}"
             for hit in response.json()["hits"] for m in hit["matches"]]
    return "\n".join(found) or "no match"


def recall_failed(exc: CtxdError | RecallArgumentsError) -> str:
    """A refused ``recall`` call as the tool result the model reads to correct its call:
    arguments ctxd cannot run, or a 4xx (an unknown handle, a query under 3 characters, bad
    lines). Re-raises a retryable or server error (429, 5xx): the agent's loop should see
    those."""
    if isinstance(exc, RecallArgumentsError):
        return f"recall failed: {exc}"
    if exc.status == 429 or exc.status >= 500:
        raise exc
    return f"recall failed ({exc.status}): {exc.problem.get('detail', exc.problem.get('title', ''))}"
