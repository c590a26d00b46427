"""Issue 8 item 6: the manifest says exactly what was sent. A message no format sends
(empty, or whitespace-only text that the Anthropic serializer must skip) is listed as
``dropped`` with its reason, in every format, and is absent from every body."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import assistant, new_session, post, result


@pytest.mark.parametrize(("role", "content", "reason"), [
    ("assistant", "", "empty message"),
    ("assistant", "\n\n", "whitespace-only text"),
])
def test_unsent_message_is_dropped_in_every_format(client: TestClient, qwen3_ids, role: str, content: str,
                                                   reason: str) -> None:
    """Before: each was listed as verbatim. The empty assistant message was in no body
    (239 tokens); the others were in the openai body (5 messages: 245, 244 and 248 tokens)
    but not in the anthropic one, whose manifest counted them all the same. After: dropped
    with the reason in every format; 4 openai messages, 239 tokens, as rendered (268 since
    the tool output is framed as untrusted data: 29 tokens, issue 11 item 7; 4 more since
    ingest binds the `cat c1.py` result: `revision="c1.py@r0"`, issue 11 item 1)."""
    sid = new_session(client)
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", "a.py\n"),
                {"event_id": "m", "kind": "message", "role": role, "content": content}).status_code == 200
    for fmt in ("openai", "anthropic", "tokens"):
        got = client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()
        item = next(i for i in got["manifest"]["items"] if i["event_id"] == "m")
        assert (item["representation"], item["zone"]) == ("dropped", None) and item["why"].startswith(reason)
        assert got["manifest"]["tokens"]["total"] == 239 + 29 + 4
    body = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert len(qwen3_ids(body)) == 239 + 29 + 4
    anthropic = client.get(f"/v1/sessions/{sid}/request?format=anthropic").json()["request"]
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant", "user"]


@pytest.mark.parametrize("content", ["", "   ", "\n"])
def test_blank_user_message_is_refused_at_ingest(client: TestClient, content: str) -> None:
    """A blank user message is never sendable (provider rules): POST answers 422 and stores nothing."""
    sid = new_session(client)
    before = client.get(f"/v1/sessions/{sid}").json()["last_seq"]
    r = post(client, sid, {"event_id": "m", "kind": "message", "role": "user", "content": content})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == before


def test_unsent_message_is_dropped_on_mistral_tekken(client: TestClient) -> None:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from app.tokenizers.mistral import default_tekken_path, load_tekken

    sid = new_session(client, profile="mistral-tekken")
    assert post(client, sid, assistant("a1", "c1", content=""), result("r1", "c1", "a.py\n"),
                {"event_id": "m", "kind": "message", "role": "assistant", "content": " \t "}).status_code == 200
    got = client.get(f"/v1/sessions/{sid}/request").json()
    item = next(i for i in got["manifest"]["items"] if i["event_id"] == "m")
    assert item["representation"] == "dropped"
    assert [m["role"] for m in got["request"]["messages"]] == ["system", "user", "assistant", "tool"]
    request, _ = load_tekken().to_mistral(got["request"]["messages"], got["request"].get("tools", []))
    assert got["manifest"]["tokens"]["total"] == len(MistralTokenizer.from_file(default_tekken_path())
                                                     .encode_chat_completion(request).tokens)


def test_blank_text_beside_a_call_is_sent_and_verbatim(client: TestClient) -> None:
    """An assistant turn whose text is blank but whose call has its result is sent (the
    call): it stays verbatim; so does a user message with text around spaces."""
    sid = new_session(client)
    assert post(client, sid, assistant("a1", "c1", content="  "), result("r1", "c1", "ok\n"),
                {"event_id": "u", "kind": "message", "role": "user", "content": " go on "}).status_code == 200
    items = {i["event_id"]: i for i in client.get(f"/v1/sessions/{sid}/request").json()["manifest"]["items"]}
    assert items["a1"]["representation"] == items["u"]["representation"] == "verbatim"
