"""ctxd-client and text UTF-8 cannot carry: a lone surrogate (half of an emoji: the JSON
escape ``\\ud83d`` decoded alone, or a tool output cut mid-character) in anything a call
sends. Before: ``session.post(...)`` raised a bare UnicodeEncodeError from httpx's JSON
encoding. After: every call with a body (sync and async; events, messages, session create)
raises the client's InvalidInputError naming the field, before any request is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from ctxd_client import AsyncClient, AsyncSession, Client, InvalidInputError, Session

HALF = "\ud83d"  # the first half of U+1F600's surrogate pair, alone


class Spy(httpx.HTTPTransport):
    """The real transport, recording each request's method and path."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        return super().handle_request(request)


class AsyncSpy(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((request.method, request.url.path))
        return await super().handle_async_request(request)


def _posts(spy: Spy | AsyncSpy) -> list[tuple[str, str]]:
    return [s for s in spy.sent if s[0] == "POST"]


def _events() -> list[dict[str, Any]]:
    """Four events; the fourth's payload has the lone surrogate at character 12."""
    return [{"kind": "message", "role": "user", "content": "List the files."},
            {"kind": "message", "role": "assistant", "content": "",
             "tool_calls": [{"call_id": "c1", "name": "bash", "arguments": "{\"command\": \"ls\"}"}]},
            {"kind": "step", "text": "Read the listing."},
            {"kind": "tool_result", "call_id": "c1", "payload": "a.py\nb.py\nc." + HALF + "py\n"}]


def _assert_names(exc: InvalidInputError, detail: str, loc: list[Any]) -> None:
    assert detail in str(exc) and exc.problem["detail"].startswith(detail), str(exc)
    assert exc.problem["loc"] == loc and exc.status == 422


def test_events_name_the_field_and_nothing_is_sent(ctxd_url: str) -> None:
    spy = Spy()
    session = Session.create(goal="Encode safely.", client=Client(ctxd_url, transport=spy))
    assert _posts(spy) == [("POST", "/v1/sessions")]
    with pytest.raises(InvalidInputError) as err:
        session.post(_events(), format="events")
    _assert_names(err.value, "events[3].payload: a lone surrogate U+D83D at character 12 cannot be sent as UTF-8 JSON",
                  ["body", "events", 3, "payload"])
    assert _posts(spy) == [("POST", "/v1/sessions")], "no request was sent"
    assert session.info()["last_seq"] == 0
    # the same events once the text is whole: accepted (an emoji, a surrogate pair, is one character)
    fixed = _events()
    fixed[3]["payload"] = "a.py\nb.py\nc.😀py\n"
    assert [r["status"] for r in session.post(fixed)["results"]] == ["created"] * 4


@pytest.mark.parametrize(("where", "detail", "loc"), [
    ("content", "messages[2].content: a lone surrogate U+D83D at character 4", ["body", "messages", 2, "content"]),
    ("arguments", "messages[1].tool_calls[0].function.arguments: a lone surrogate U+D83D at character 13",
     ["body", "messages", 1, "tool_calls", 0, "function", "arguments"]),
])
def test_messages_name_the_position_in_the_history(ctxd_url: str, where: str, detail: str, loc: list[Any]) -> None:
    """The index is the message's place in the history the caller passed, also when the client
    sends only the messages from the first new one on."""
    spy = Spy()
    session = Session.create(goal="Encode safely.", client=Client(ctxd_url, transport=spy))
    history: list[Any] = [{"role": "user", "content": "List the files."}]
    session.post(history)
    arguments = "{\"command\": \"" + (HALF if where == "arguments" else "") + "ls\"}"
    history += [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": ("a.py" + HALF) if where == "content" else "a.py"}]
    sent = len(_posts(spy))
    with pytest.raises(InvalidInputError) as err:
        session.post(history)
    _assert_names(err.value, detail, loc)
    assert len(_posts(spy)) == sent, "no request was sent"
    assert session.info()["last_seq"] == 1


def test_a_later_batch_is_named_in_the_whole_list_and_no_batch_is_sent(ctxd_url: str) -> None:
    """Over 1,000 events go in batches of 1,000: every batch is encoded before the first is
    sent, and the error names the event's index in the list passed."""
    spy = Spy()
    session = Session.create(goal="Encode safely.", client=Client(ctxd_url, transport=spy))
    events = [{"kind": "step", "text": f"step {i}"} for i in range(1500)]
    events[1234]["text"] = "step " + HALF
    with pytest.raises(InvalidInputError) as err:
        session.post(events)
    _assert_names(err.value, "events[1234].text: a lone surrogate U+D83D at character 5",
                  ["body", "events", 1234, "text"])
    assert _posts(spy) == [("POST", "/v1/sessions")] and session.info()["last_seq"] == 0


@pytest.mark.parametrize(("fields", "detail", "loc"), [
    ({"goal": "Fix " + HALF}, "contract.goal: a lone surrogate U+D83D at character 4", ["body", "contract", "goal"]),
    ({"goal": "Fix.", "constraints": ["ok", "no " + HALF]}, ("contract.constraints[1].text: a lone surrogate U+D83D "
     "at character 3"), ["body", "contract", "constraints", 1, "text"]),
    ({"goal": "Fix.", "system": HALF}, "system: a lone surrogate U+D83D at character 0", ["body", "system"]),
    ({"goal": "Fix.", "metadata": {"run name": "x" + HALF}}, ('metadata["run name"]: a lone surrogate U+D83D at '
     "character 1"), ["body", "metadata", "run name"]),
    ({"goal": "Fix.", "metadata": {"k" + HALF: 1}}, ('metadata: a lone surrogate U+D83D at character 1 of the key '
     '"k\\ud83d"'), ["body", "metadata"]),
])
def test_session_create_names_the_field_and_sends_nothing(fields: dict[str, Any], detail: str,
                                                          loc: list[Any]) -> None:
    sent: list[httpx.Request] = []
    client = Client("http://ctxd.invalid", transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(
        201, json={"id": "0" * 32})))
    with pytest.raises(InvalidInputError) as err:
        Session.create(client=client, **fields)
    _assert_names(err.value, detail, loc)
    assert not sent


def test_async_calls_raise_the_same_before_sending(ctxd_url: str) -> None:
    async def flow() -> tuple[list[str], list[tuple[str, str]], int]:
        spy = AsyncSpy()
        client = AsyncClient(ctxd_url, transport=spy)
        details = []
        try:
            with pytest.raises(InvalidInputError) as err:
                await AsyncSession.create(goal="Async " + HALF, client=client)
            details.append(err.value.problem["detail"])
            session = await AsyncSession.create(goal="Async.", client=client)
            with pytest.raises(InvalidInputError) as err:
                await session.post(_events())
            details.append(err.value.problem["detail"])
            with pytest.raises(InvalidInputError) as err:
                await session.post([{"role": "user", "content": "Hi " + HALF}])
            details.append(err.value.problem["detail"])
            with pytest.raises(InvalidInputError) as err:
                await session.post([{"role": "user", "content": "Hi."}], format="anthropic",
                                   system=[{"type": "text", "text": "Be " + HALF}])
            details.append(err.value.problem["detail"])
            last_seq = (await session.info())["last_seq"]
            return details, _posts(spy), last_seq
        finally:
            await client.aclose()

    details, posts, last_seq = asyncio.run(flow())
    assert [d.split(" cannot be sent")[0] for d in details] == [
        "contract.goal: a lone surrogate U+D83D at character 6",
        "events[3].payload: a lone surrogate U+D83D at character 12",
        "messages[0].content: a lone surrogate U+D83D at character 3",
        "system[0].text: a lone surrogate U+D83D at character 3"]
    assert posts == [("POST", "/v1/sessions")] and last_seq == 0
