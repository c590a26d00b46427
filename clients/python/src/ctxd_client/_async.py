"""The asynchronous client (asyncio, httpx.AsyncClient): :class:`AsyncClient` and
:class:`AsyncSession`, the same calls as ``ctxd_client._sync`` awaited."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

import httpx
from tenacity import AsyncRetrying

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


class AsyncClient:
    """:class:`ctxd_client.Client` for asyncio."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: float = 60.0,
                 retry: RetryPolicy = DEFAULT_RETRY, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.retry = retry
        self.http = httpx.AsyncClient(transport=transport, **http_options(url, api_key, timeout))

    async def call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                   json: Any = None, content: bytes | None = None) -> httpx.Response:
        body, headers = request_content(json, content)  # encoded once, before the first attempt
        async for attempt in AsyncRetrying(**self.retry.tenacity_kwargs()):
            with attempt:
                response = await self.http.request(method, path, params=params, content=body, headers=headers)
                if response.status_code >= 400:
                    raise error_for(response)
        return response

    def session(self, session_id: str) -> AsyncSession:
        return AsyncSession(self, session_id)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession:
    """:class:`ctxd_client.Session` for asyncio (same arguments, awaited)."""

    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self.client = client
        self.id = session_id
        self._log = MessageLog()

    @classmethod
    async def create(cls, *, goal: str | None = None, constraints: Sequence[str | Mapping[str, Any]] = (),
                     contract: Mapping[str, Any] | None = None, system: str = "", tools: Sequence[Any] = (),
                     profile: str | None = None, model: str | None = None,
                     metadata: Mapping[str, Any] | None = None, title: str | None = None, url: str | None = None,
                     api_key: str | None = None, client: AsyncClient | None = None) -> AsyncSession:
        client = client or AsyncClient(url, api_key=api_key)
        body = session_body(goal=goal, constraints=constraints, contract=contract, system=system, tools=tools,
                            profile=profile, model=model, metadata=metadata, title=title)
        return cls(client, str((await client.call("POST", "/v1/sessions", json=body)).json()["id"]))

    async def post(self, items: Sequence[Any], *, format: PostFormat = "openai",
                   system: Any = None) -> dict[str, Any]:
        kind, calls, digests, sent_system = post_plan(self._log, items, format, system)
        answers = [(await self.client.call("POST", f"/v1/sessions/{self.id}/{kind}", params=params,
                                           content=body)).json() for params, body in calls]
        if kind == "messages":
            self._log.acknowledge(digests, sent_system)
        return merge_answers(kind, answers)

    async def request(self, format: Format = "openai") -> AssembledRequest:
        out = (await self.client.call("GET", f"/v1/sessions/{self.id}/request", params={"format": format})).json()
        return AssembledRequest(body=out["request"], manifest=out["manifest"])

    async def handle(self, handle: str, *, lines: str | None = None, offset: int | None = None,
                     length: int | None = None) -> str:
        params = handle_params(lines, offset, length)
        return (await self.client.call("GET", f"/v1/sessions/{self.id}/handles/{handle}", params=params)).text

    async def search(self, q: str, *, limit: int | None = None, context: int | None = None,
                     cursor: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = (await self.client.call("GET", f"/v1/sessions/{self.id}/search",
                                                      params=search_params(q, limit, context, cursor))).json()
        return out

    async def recall(self, arguments: Mapping[str, Any] | str) -> str:
        try:
            path, params = recall_call(arguments)
            response = await self.client.call("GET", f"/v1/sessions/{self.id}/{path}", params=params)
        except (CtxdError, RecallArgumentsError) as exc:
            return recall_failed(exc)
        return recall_text(path, response)

    async def info(self) -> dict[str, Any]:
        out: dict[str, Any] = (await self.client.call("GET", f"/v1/sessions/{self.id}")).json()
        return out

    async def set_title(self, title: str | None) -> dict[str, Any]:
        """Set the session's title (None clears it): ``PATCH /v1/sessions/{id}``; returns the session."""
        out: dict[str, Any] = (await self.client.call("PATCH", f"/v1/sessions/{self.id}",
                                                      json={"title": title})).json()
        return out

    async def delete(self) -> dict[str, Any]:
        out: dict[str, Any] = (await self.client.call("DELETE", f"/v1/sessions/{self.id}")).json()
        return out
