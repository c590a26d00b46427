"""The synchronous client: :class:`Client` (one keep-alive httpx connection pool, API key,
retries) and :class:`Session` (one ctxd session)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import httpx
from tenacity import Retrying

from ctxd_client._core import (
    DEFAULT_RETRY,
    AssembledRequest,
    CtxdError,
    Format,
    MessageLog,
    PostFormat,
    RecallArgumentsError,
    RetryPolicy,
    error_for,
    handle_params,
    http_options,
    merge_answers,
    post_plan,
    recall_call,
    recall_failed,
    recall_text,
    request_content,
    search_params,
    session_body,
)


class Client:
    """A connection to ctxd at ``url`` (default ``$CTXD_URL`` or http://127.0.0.1:8000).
    ``api_key`` (default ``$CTXD_API_KEY``) is sent as ``Authorization: Bearer``. Every call
    is retried per ``retry`` on transport errors and 429/502/503/504 (honouring
    ``Retry-After``); a 4xx problem raises a :class:`~ctxd_client.CtxdError` subclass."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 60.0,
                 retry: RetryPolicy = DEFAULT_RETRY, transport: httpx.BaseTransport | None = None) -> None:
        self.retry = retry
        self.http = httpx.Client(transport=transport, **http_options(url, api_key, timeout))

    def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             json: Any = None, content: bytes | None = None) -> httpx.Response:
        """One call with retries; the response of a 2xx, else raises CtxdError. The body:
        ``json`` (a JSON value) or ``content`` (its bytes, from ``json_body``); text UTF-8
        cannot carry raises InvalidInputError naming the field, before anything is sent."""
        body, headers = request_content(json, content)  # encoded once, before the first attempt
        for attempt in Retrying(**self.retry.tenacity_kwargs()):
            with attempt:
                response = self.http.request(method, path, params=params, content=body, headers=headers)
                if response.status_code >= 400:
                    raise error_for(response)
        return response

    def session(self, session_id: str) -> Session:
        """An existing session."""
        return Session(self, session_id)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Session:
    """One ctxd session: post what happened, get the next model request."""

    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.id = session_id
        self._log = MessageLog()

    @classmethod
    def create(cls, *, goal: str | None = None, constraints: Sequence[str | Mapping[str, Any]] = (),
               contract: Mapping[str, Any] | None = None, system: str = "", tools: Sequence[Any] = (),
               profile: str | None = None, model: str | None = None, metadata: Mapping[str, Any] | None = None,
               title: str | None = None, url: str | None = None, api_key: str | None = None,
               client: Client | None = None) -> Session:
        """Create a session: the task contract (``goal`` and ``constraints``, strings or
        ``{id, text}``; or a whole ``contract``), the system instructions, the tools (OpenAI
        function declarations, dicts or SDK objects), the profile, the bodies' ``model`` and a
        ``title`` (a short label the sessions list and the inspector show)."""
        client = client or Client(url, api_key=api_key)
        body = session_body(goal=goal, constraints=constraints, contract=contract, system=system, tools=tools,
                            profile=profile, model=model, metadata=metadata, title=title)
        return cls(client, str(client.call("POST", "/v1/sessions", json=body).json()["id"]))

    def post(self, items: Sequence[Any], *, format: PostFormat = "openai", system: Any = None) -> dict[str, Any]:
        """Post provider messages (``format`` openai or anthropic: the whole history as the
        agent keeps it, SDK objects or dicts; only the messages from the first new or changed
        position on are sent) or ctxd events (``format="events"``, or items with a
        ``kind``; missing ``event_id``s are assigned once, so a retry is a duplicate).
        ``system``: the Anthropic top-level system prompt. Returns ctxd's answer."""
        kind, calls, digests, sent_system = post_plan(self._log, items, format, system)
        answers = [self.client.call("POST", f"/v1/sessions/{self.id}/{kind}", params=params, content=body).json()
                   for params, body in calls]
        if kind == "messages":
            self._log.acknowledge(digests, sent_system)
        return merge_answers(kind, answers)

    def request(self, format: Format = "openai") -> AssembledRequest:
        """The next model request in ``format`` (openai, anthropic or tokens) and its manifest."""
        out = self.client.call("GET", f"/v1/sessions/{self.id}/request", params={"format": format}).json()
        return AssembledRequest(body=out["request"], manifest=out["manifest"])

    def handle(self, handle: str, *, lines: str | None = None, offset: int | None = None,
               length: int | None = None) -> str:
        """The payload behind ``handle`` as posted (``lines="a:b"``, 1-based inclusive, or
        ``offset`` / ``length`` in bytes), decoded as UTF-8."""
        params = handle_params(lines, offset, length)
        return self.client.call("GET", f"/v1/sessions/{self.id}/handles/{handle}", params=params).text

    def search(self, q: str, *, limit: int | None = None, context: int | None = None,
               cursor: str | None = None) -> dict[str, Any]:
        """Search the session's events (``GET /search?q=``, a substring search: identifiers
        match exactly): ``{query, hits: [{seq, event_id, kind, rank, handle, matches: [{field,
        handle, lines "a:b", text, ...}]}], next_cursor, capped}`` (``context``: lines around
        each match; ``cursor``: the previous page's ``next_cursor``)."""
        out: dict[str, Any] = self.client.call("GET", f"/v1/sessions/{self.id}/search",
                                               params=search_params(q, limit, context, cursor)).json()
        return out

    def recall(self, arguments: Mapping[str, Any] | str) -> str:
        """Execute a ``recall`` tool call (a profile with ``recall = true`` declares the tool;
        README "Recall"): ``arguments`` as the SDK returns them (JSON string or mapping),
        ``{"query": ...}`` searches the session, ``{"handle": ..., "lines": "a:b"}`` reads a
        stored output back. Returns the text to post as the call's tool result; a refused
        call (arguments that are not a JSON object or name neither, a 4xx) becomes "recall
        failed...: detail" for the model to correct. Raises retryable or server errors."""
        try:
            path, params = recall_call(arguments)
            response = self.client.call("GET", f"/v1/sessions/{self.id}/{path}", params=params)
        except (CtxdError, RecallArgumentsError) as exc:
            return recall_failed(exc)
        return recall_text(path, response)

    def info(self) -> dict[str, Any]:
        """The session (``GET /v1/sessions/{id}``)."""
        out: dict[str, Any] = self.client.call("GET", f"/v1/sessions/{self.id}").json()
        return out

    def set_title(self, title: str | None) -> dict[str, Any]:
        """Set the session's title (None clears it): ``PATCH /v1/sessions/{id}``; returns the session."""
        out: dict[str, Any] = self.client.call("PATCH", f"/v1/sessions/{self.id}", json={"title": title}).json()
        return out

    def delete(self) -> dict[str, Any]:
        out: dict[str, Any] = self.client.call("DELETE", f"/v1/sessions/{self.id}").json()
        return out
