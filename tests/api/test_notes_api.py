"""Hypothesis and obligation events over HTTP (issue 10 item 4): ingest, validation of
``depends_on``, storage round trip, the current value per key, and their manifest entries
(they pass through assembly without being rendered in the leaf)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.api.test_api import assert_problem, assistant, new_session, post, result


def hyp(event_id: str, key: str, text: str, status: str = "working", depends_on: list[int] | None = None) -> dict:
    return {"event_id": event_id, "kind": "hypothesis", "key": key, "text": text, "status": status,
            "depends_on": depends_on or []}


def obl(event_id: str, key: str, text: str, status: str = "open") -> dict:
    return {"event_id": event_id, "kind": "obligation", "key": key, "text": text, "status": status}


def test_notes_are_stored_superseded_by_key_and_listed_in_the_manifest(client: TestClient) -> None:
    sid = new_session(client)
    r = post(client, sid, assistant("a1", "c1"), result("r1", "c1", "FAILED tests/test_pool.py::test_waiter\n",
                                                        exit_code=1),
             hyp("h1", "timeout", "The waiter times out before the return.", depends_on=[2]),
             hyp("h2", "missed-notify", "The return path never notifies the waiter.", depends_on=[1, 2, 3]),
             obl("o1", "api", "Check public API compatibility."))
    assert r.status_code == 200, r.text
    assert [x["seq"] for x in r.json()["results"]] == [1, 2, 3, 4, 5]
    # a later event with the same key supersedes the earlier one
    r = post(client, sid, hyp("h3", "timeout", "Timeout explanation lacks support.", "refuted", depends_on=[2]),
             obl("o2", "api", "Check public API compatibility.", "done"))
    assert r.status_code == 200, r.text
    got = client.get(f"/v1/sessions/{sid}/request")
    assert got.status_code == 200, got.text
    items = {i["seq"]: i for i in got.json()["manifest"]["items"]}
    assert set(items) == {1, 2, 3, 4, 5, 6, 7}, "every event is accounted for in the manifest"
    assert items[3]["representation"] == "superseded" and "'timeout'" in items[3]["why"]
    assert items[5]["representation"] == "superseded"
    assert items[4]["representation"] == "not_rendered" and items[4]["kind"] == "hypothesis"
    assert items[6]["representation"] == "not_rendered" and "(refuted)" in items[6]["why"]
    assert items[7]["representation"] == "not_rendered" and "(done)" in items[7]["why"]
    body = json.dumps(got.json()["request"])
    assert "never notifies" not in body, "notes are not rendered in the leaf (README)"
    # idempotent like every event
    again = post(client, sid, hyp("h3", "timeout", "Timeout explanation lacks support.", "refuted", depends_on=[2]))
    assert again.json()["results"][0] == {"event_id": "h3", "seq": 6, "status": "duplicate", "revision": None}


def test_depends_on_must_name_existing_earlier_events(client: TestClient) -> None:
    sid = new_session(client)
    assert post(client, sid, obl("o1", "suite", "Run the broader suite.")).status_code == 200
    for bad in ([2], [1, 7], [0], [-1]):  # 2 would be the hypothesis itself; 0 and -1 are no seq
        r = post(client, sid, hyp("hx", "k", "text", depends_on=bad))
        body = assert_problem(r, 422)
        if bad[-1] >= 1:
            assert body["depends_on"] == [b for b in bad if b >= 2]
    # an event earlier in the same batch is an earlier event
    r = post(client, sid, obl("o2", "api", "Check the API."), hyp("h1", "k", "text", depends_on=[1, 2]))
    assert r.status_code == 200, r.text
    # nothing was stored by the rejected batches
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == 3


def test_bad_notes_are_422(client: TestClient) -> None:
    sid = new_session(client)
    for bad in (hyp("x", "k", "t", status="maybe"), obl("x", "k", "t", status="working"), hyp("x", "", "t"),
                obl("x", "k", ""), hyp("x", "k\x00", "t"), {**hyp("x", "k", "t"), "extra": 1},
                {**hyp("x", "k", "t"), "depends_on": ["one"]}):
        assert_problem(post(client, sid, bad), 422)
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == 0
