"""ctxd-client (clients/python) end to end: the example agent loops on the official OpenAI
and Anthropic SDKs against a scripted loopback model server and a real `ctxd serve`; the
sync and async sessions; retries that re-send the same ids (issue 14 item 2)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from ctxd_client import (
    AsyncClient,
    AsyncSession,
    Client,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    RetryPolicy,
    Session,
)
from scripted_llm import ScriptedLLM

from app.domain.framing import unframe
from tests.client.conftest import example

TASK = "Tell me what hello.py prints."


def workspace(tmp_path: Path) -> str:
    (tmp_path / "hello.py").write_text("print('hello')\n")
    return str(tmp_path)


def test_openai_sdk_agent_loop(ctxd_url: str, tmp_path: Path) -> None:
    agent = example("openai_agent")
    script = [
        {"role": "assistant", "content": None, "reasoning_content": "Look first.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "bash",
                                                              "arguments": '{"command": "cat hello.py"}'}}]},
        {"role": "assistant", "content": "hello.py prints hello."},
    ]
    with ScriptedLLM(openai_replies=script) as llm:
        answer, session = agent.main(TASK, llm_url=llm.url + "/v1", ctxd_url=ctxd_url, workdir=workspace(tmp_path))
    assert answer == "hello.py prints hello."
    assert len(llm.requests) == 2
    first, second = (r["messages"] for r in llm.requests)
    assert first[0] == {"role": "system", "content": agent.SYSTEM}  # the system message became the root
    assert TASK in first[1]["content"] and first[2] == {"role": "user", "content": TASK}
    assert llm.requests[0]["tools"] == agent.TOOLS and llm.requests[0]["prompt_cache_key"].startswith("ctxd-")
    assert second[3] == {"role": "assistant", "content": "", "tool_calls": script[0]["tool_calls"]}
    assert [(m["tool_call_id"], unframe(m["content"])) for m in second[4:]] == [
        ("call_1", "hello.py\n"), ("call_2", "print('hello')\n")]
    assert second[:3] == first  # the second request extends the first: its prefix is cached
    info = session.info()
    assert (info["last_seq"], info["system"]) == (5, agent.SYSTEM)  # user, assistant, 2 results, answer
    request = session.request()
    assert request.tokens == request.manifest["tokens"]["total"] > 0
    assert request.body["messages"][-1] == {"role": "assistant", "content": "hello.py prints hello."}


def test_anthropic_sdk_agent_loop_sends_thinking_back(ctxd_url: str, tmp_path: Path) -> None:
    agent = example("anthropic_agent")
    thinking = {"type": "thinking", "thinking": "List first.\n", "signature": "EqQBCgIYAh+/sig=="}
    script = [[thinking, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
              [{"type": "text", "text": "Only hello.py."}]]
    with ScriptedLLM(anthropic_replies=script) as llm:
        answer, session = agent.main(TASK, llm_url=llm.url, ctxd_url=ctxd_url, workdir=workspace(tmp_path))
    assert answer == "Only hello.py."
    second = llm.requests[1]
    assert second["system"][0]["text"] == agent.SYSTEM
    assistant = [m for m in second["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"][0] == thinking  # byte for byte, first in its message
    assert assistant[0]["content"][1] == {"type": "tool_use", "id": "toolu_1", "name": "bash",
                                          "input": {"command": "ls"}}
    result = second["messages"][-1]["content"][0]
    assert (result["type"], result["tool_use_id"], unframe(result["content"])) == ("tool_result", "toolu_1",
                                                                                 "hello.py\n")
    assert session.info()["last_seq"] == 4


class DropFirstResponse(httpx.BaseTransport):
    """Forwards every request to the real server, but loses the answer of the first POST to
    a path ending in ``suffix`` (the server applied it): what a dropped connection does."""

    def __init__(self, suffix: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.suffix = suffix
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith(self.suffix) and not self.dropped:
            response.read()
            response.close()
            self.dropped += 1
            raise httpx.ReadError("connection reset after the request was applied", request=request)
        return response


@pytest.mark.parametrize("suffix", ["/events", "/messages"])
def test_a_retry_after_a_lost_answer_is_applied_once(ctxd_url: str, suffix: str) -> None:
    transport = DropFirstResponse(suffix)
    client = Client(ctxd_url, transport=transport, retry=RetryPolicy(attempts=3, initial=0.01))
    session = Session.create(goal="Retry safely.", client=client)
    if suffix == "/events":  # no event ids given: the client assigns them once, before the first attempt
        out = session.post([{"kind": "message", "role": "user", "content": "Hi."},
                            {"kind": "step", "text": "Answer."}])
        statuses = [r["status"] for r in out["results"]]
    else:
        out = session.post([{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}])
        statuses = [m["status"] for m in out["messages"]]
    assert transport.dropped == 1
    assert statuses == ["duplicate", "duplicate"]  # the retry found what the lost attempt stored
    assert session.info()["last_seq"] == 2


def test_retry_after_503_then_success() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"title": "Layout contention"})
        return httpx.Response(200, json={"id": "0" * 32, "last_seq": 0})

    client = Client("http://ctxd.invalid", transport=httpx.MockTransport(handler), retry=RetryPolicy(attempts=2))
    assert Session(client, "0" * 32).info()["last_seq"] == 0 and len(calls) == 2


def test_only_new_messages_are_sent_and_changes_are_conflicts(ctxd_url: str) -> None:
    seen: list[dict[str, Any]] = []

    class Spy(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and request.url.path.endswith("/messages"):
                seen.append(json.loads(request.content))
            return super().handle_request(request)

    session = Session.create(goal="Grow the history.", client=Client(ctxd_url, transport=Spy()))
    history: list[Any] = [{"role": "user", "content": "One."}]
    session.post(history)
    history += [{"role": "assistant", "content": "Two."}, {"role": "user", "content": "Three."}]
    out = session.post(history)
    assert [(b["start"], len(b["messages"])) for b in seen] == [(0, 1), (1, 2)]
    assert [m["position"] for m in out["messages"]] == [1, 2] and out["next_position"] == 3
    history[1] = {"role": "assistant", "content": "Two, changed."}
    with pytest.raises(ConflictError) as err:
        session.post(history)
    assert err.value.problem["position"] == 1 and seen[-1]["start"] == 1
    with pytest.raises(InvalidInputError) as bad:
        session.post(history[:1] + [{"role": "user", "content": [{"type": "input_audio"}]}])
    assert bad.value.problem["loc"][:3] == ["body", "messages", 0]
    with pytest.raises(NotFoundError):
        Session(session.client, "0" * 32).info()
    assert session.info()["last_seq"] == 3


def test_async_session(ctxd_url: str) -> None:
    from openai.types.chat import ChatCompletionMessage

    async def flow() -> tuple[str, str, list[str]]:
        session = await AsyncSession.create(goal="Async.", constraints=["Keep it short."], url=ctxd_url)
        reply = ChatCompletionMessage.model_validate({"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
        await session.post([{"role": "user", "content": "Go."}, reply,
                            {"role": "tool", "tool_call_id": "call_9", "content": "line 1\nline 2\n"}])
        request = await session.request("anthropic")
        item = next(i for i in request.manifest["items"] if i["kind"] == "tool_result")
        line = await session.handle(item["handle"], lines="2:2")
        whole = await session.handle(item["handle"][:12])
        trunk = request.body["messages"][0]["content"][0]["text"]
        await session.client.aclose()
        return line, whole, [trunk]

    line, whole, trunk = asyncio.run(flow())
    assert (line, whole) == ("line 2\n", "line 1\nline 2\n")
    assert "[c1]\nKeep it short." in trunk[0]


@pytest.mark.parametrize("name", ["openai_agent", "anthropic_agent"])
def test_lines_to_plug_ctxd_into_an_sdk_loop(name: str) -> None:
    """README "Python client": 4 lines (3 added, 1 changed) plug ctxd into each loop; one
    more, optional, logs the final answer."""
    from tests.client.conftest import EXAMPLES

    marked = [line for line in (EXAMPLES / f"{name}.py").read_text().splitlines() if "  # ctxd" in line]
    required = [line for line in marked if "optional" not in line]
    assert len(required) == 4 and sum("(was:" in line for line in required) == 1
    assert len(marked) - len(required) == 1


def helper_session(ctxd_url: str) -> Session:
    """A session whose one tool output (seq 3) holds ``def get_template_tag_modules():`` on line 3."""
    session = Session.create(goal="Find the helper.", url=ctxd_url)
    output = "import os\n\ndef get_template_tag_modules():\n    return []\n"
    session.post([{"role": "user", "content": "Where is the helper?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_g", "type": "function",
                       "function": {"name": "bash", "arguments": '{"command": "cat tags.py"}'}}]},
                  {"role": "tool", "tool_call_id": "call_g", "content": output}])
    return session


def test_search_finds_a_posted_tool_output_and_its_lines_read_back(ctxd_url: str) -> None:
    """session.search on GET /search (issue 14 item 3's contract): the event holding an
    identifier, its handle and line range; the range read back through session.handle."""
    session = helper_session(ctxd_url)
    found = session.search("get_template_tag_modules", limit=5)
    hit = next(h for h in found["hits"] if h["event_id"] == "msg:2")
    match = next(m for m in hit["matches"] if m["field"] == "payload")
    assert match["lines"] == "3:3" and match["handle"] == hit["handle"]
    assert session.handle(match["handle"], lines=match["lines"]) == "def get_template_tag_modules():\n"
    assert session.search("get_template_tag_modulez")["hits"] == []


def test_recall_runs_a_recall_tool_call_as_the_sdk_returns_it(ctxd_url: str) -> None:
    """session.recall executes a `recall` tool call (the arguments JSON string from the SDK):
    a query lists the matches with handle and line range, a handle reads the lines back, a
    refused call (query under 3 characters, unknown handle) is a tool result the model reads,
    not an exception in the agent's loop; async the same. Before: users copied run_recall
    from the README."""
    session = helper_session(ctxd_url)
    found = session.recall('{"query": "get_template_tag_modules", "context": 0}')
    handle = session.search("get_template_tag_modules")["hits"][0]["handle"]
    assert found.startswith(f"seq 3 tool_result, handle {handle[:12]} lines 3:3:\n")
    assert "def get_template_tag_modules():" in found
    assert session.recall({"handle": handle[:12], "lines": "3:3"}) == "def get_template_tag_modules():\n"
    assert session.recall({"query": "nothing_like_this"}) == "no match"
    assert session.recall({"query": "ab"}).startswith("recall failed (422): ")
    assert session.recall({"handle": "f" * 64}).startswith("recall failed (404): ")
    # arguments a model got wrong come back as text it can act on, never an exception in the loop
    assert session.recall("[1, 2]").startswith("recall failed: the arguments must be a JSON object")
    assert session.recall('{"query": "get_templ').startswith("recall failed: the arguments are not valid JSON")
    assert session.recall("{}").startswith("recall failed: give `query` (at least 3 characters")

    async def flow() -> str:
        async_session = AsyncSession(AsyncClient(ctxd_url), session.id)
        try:
            return await async_session.recall({"handle": handle, "lines": "3:3"})
        finally:
            await async_session.client.aclose()

    assert asyncio.run(flow()) == "def get_template_tag_modules():\n"
