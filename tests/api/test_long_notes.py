"""A step, hypothesis or obligation text far over the budget is shown cut, not pinned whole.

Before: the next step is pinned at the end of the leaf and the progress record shows the
step and every current note verbatim, so a 200 kB step (or a 200 kB hypothesis once a pass
folded it into the record) made every GET of its session a 422 until the agent replaced it:
the fault kind of an oversized message kept in the history and refused on every later turn
(gi-dellav/zerostack#132, already fixed for user messages). Now each is shown as its first
two thirds and last third of ``NOTE_CHARS`` characters around a marker naming the event."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.domain.notes import NOTE_CHARS, bounded_note
from tests.api.test_api import new_session, post
from tests.api.test_budget_api import older_history

HEAD = 2 * NOTE_CHARS // 3
TAIL = NOTE_CHARS - HEAD


def long_text(word: str, size: int = 200_000) -> str:
    return "".join(f"{word} line {i}: check the waiter path in pool.py\n" for i in range(size // 40))[:size]


def test_bounded_note_keeps_a_short_text_and_cuts_a_long_one_at_its_ends() -> None:
    assert bounded_note("short", 3, "step") == "short"
    exact = "x" * NOTE_CHARS
    assert bounded_note(exact, 3, "step") == exact
    text = long_text("a", 10_000)
    cut = bounded_note(text, 7, "hypothesis")
    assert cut.startswith(text[:HEAD]) and cut.endswith(text[-TAIL:])
    assert f"[... {len(text) - NOTE_CHARS:,} characters of this hypothesis elided by ctxd" in cut
    assert "event seq 7" in cut and "after_seq=6&limit=1&representation=full" in cut


def test_a_200_kb_step_is_cut_to_head_and_tail(client: TestClient) -> None:
    sid = new_session(client)  # qwen3: input_limit 28,160
    text = long_text("step")
    r = post(client, sid, {"event_id": "u1", "kind": "message", "role": "user", "content": "Fix the waiter."},
             {"event_id": "s1", "kind": "step", "text": text})
    assert r.status_code == 200, r.text
    got = client.get(f"/v1/sessions/{sid}/request")
    assert got.status_code == 200, got.text  # was a 422: the pinned content exceeded input_limit
    out = got.json()
    last = out["request"]["messages"][-1]["content"]
    assert last.startswith("Next step: " + text[:HEAD]) and last.endswith(text[-TAIL:])
    assert f"{len(text) - NOTE_CHARS:,} characters of this step elided by ctxd" in last
    manifest = out["manifest"]
    step = next(i for i in manifest["items"] if i["kind"] == "step")
    assert (step["representation"], step["tokens_known"]) == ("head_tail", False)
    assert step["elided_bytes"] == len(text) - NOTE_CHARS  # ASCII: a character is a byte
    assert manifest["elided_tokens_exact"] is False
    assert manifest["tokens"]["total"] <= manifest["budget"]["input_limit"]
    # the same GET again: the same body (the cut is deterministic)
    assert client.get(f"/v1/sessions/{sid}/request").json()["request"] == out["request"]


def test_long_notes_and_step_folded_into_the_record_are_cut(client: TestClient) -> None:
    sid = new_session(client)
    notes = [{"event_id": "h1", "kind": "hypothesis", "key": "cause", "text": long_text("hypothesis"),
              "status": "working", "depends_on": []},
             {"event_id": "o1", "kind": "obligation", "key": "suite", "text": long_text("obligation"),
              "status": "open"},
             {"event_id": "s1", "kind": "step", "text": long_text("step")}]
    r = post(client, sid, *notes, *older_history("qwen3", groups=8))
    assert r.status_code == 200, r.text
    got = client.get(f"/v1/sessions/{sid}/request")
    assert got.status_code == 200, got.text
    manifest = got.json()["manifest"]
    assert manifest["layout"]["cut_seq"] > 3, "a pass folded the notes and the step into the record"
    trunk = got.json()["request"]["messages"][1]["content"]
    for kind in ("hypothesis", "obligation", "step"):
        assert f"characters of this {kind} elided by ctxd" in trunk
    record = client.get(f"/v1/sessions/{sid}/record").json()
    hypothesis = record["record"]["hypotheses"][0]["text"]
    assert hypothesis == bounded_note(notes[0]["text"], 1, "hypothesis")
    assert manifest["tokens"]["total"] <= manifest["budget"]["input_limit"]
