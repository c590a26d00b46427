"""Payload token counts (issue 9, item 7): computed once after the POST that stored the
payload, with the session profile's tokenizer, kept beside the payload per tokenizer, on
SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.services.sessions import count_payload_tokens
from app.store.db import unit_of_work
from tests.api.test_api import assistant, new_session, post, result
from tests.api.test_large_output import SpyTokenizer


def stored_counts(client: TestClient, handle: str) -> dict | None:
    with client.app.state.ctxd.engine.connect() as conn:
        value = conn.execute(sa.text("SELECT token_counts FROM payloads WHERE sha256 = :h"), {"h": handle}).scalar_one()
    if isinstance(value, str):  # SQLite returns JSON text through a textual query
        import json

        value = json.loads(value)
    return value


def test_tool_output_tokens_are_counted_once_after_the_post(client: TestClient) -> None:
    payload = "Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad input\n" * 20
    handle = hashlib.sha256(payload.encode()).hexdigest()
    sid = new_session(client)  # qwen3
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", payload)).status_code == 200
    state = client.app.state.ctxd
    meter = state.meters.get(state.profiles.get("qwen3"))
    expected = len(meter.tokenizer.encode(payload, add_special_tokens=False))
    assert stored_counts(client, handle) == {meter.tokenizer_id: expected}

    def uow():
        return unit_of_work(state.session_factory)

    # already counted: nothing is computed again (the stored count is returned, for the memo);
    # qwen3-128k shares the tokenizer, so the count
    meter.count_text.cache_clear()
    spy = SpyTokenizer(meter.tokenizer)
    backend = SpyTokenizer(meter._backend)  # counts call the tokenizers backend directly (HFChatMeter._backend)
    meter.tokenizer, meter._backend = spy, backend
    try:
        assert count_payload_tokens(uow, state.profiles, state.meters, sid, [handle]) == \
            (meter.tokenizer_id, {handle: expected})
        assert meter.count_text("not stored anywhere") > 0
    finally:
        meter.tokenizer, meter._backend = spy._inner, backend._inner
    assert spy.seen + backend.seen == [len("not stored anywhere")], "a stored count is not computed again"
    other = new_session(client, profile="qwen3-128k")
    assert post(client, other, assistant("a1", "c1"), result("r1", "c1", payload)).status_code == 200
    assert stored_counts(client, handle) == {meter.tokenizer_id: expected}
    # another tokenizer adds its own count beside the first
    mistral = new_session(client, profile="mistral-tekken")
    assert post(client, mistral, assistant("a1", "c1"), result("r1", "c1", payload)).status_code == 200
    counts = stored_counts(client, handle)
    tekken = state.meters.get(state.profiles.get("mistral-tekken"))
    assert counts == {meter.tokenizer_id: expected, tekken.tokenizer_id: tekken.count_text(payload)}
    assert tekken.tokenizer_id != meter.tokenizer_id
    # a message's payload and unknown handles are not counted; a session that is gone is skipped
    assert count_payload_tokens(uow, state.profiles, state.meters, sid, ["0" * 64]) == (meter.tokenizer_id, {})
    assert count_payload_tokens(uow, state.profiles, state.meters, "f" * 32, [handle]) == ("", {})
