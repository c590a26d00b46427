"""Action-time preconditions (issue 11 item 6, seed 000 section 4.7.2): POST
/v1/sessions/{id}/preconditions answers 200 when the artifact state an action was
planned on still holds, 409 problem+json with the current revision (and content
hash when known) when it does not; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import assert_problem, assistant, new_session, post, result


def check(client: TestClient, sid: str, **body):
    return client.post(f"/v1/sessions/{sid}/preconditions", json=body)


def write(event_id: str, artifact: str, **extra) -> dict:
    return {"event_id": event_id, "kind": "artifact_write", "artifact": artifact} | extra


def test_unknown_artifact_is_revision_0(client: TestClient) -> None:
    """Creating a new file is planned on revision 0 and holds (opencrabs#954: new files
    must still be writable under a stale-write guard)."""
    sid = new_session(client)
    r = check(client, sid, artifact="new.py", revision=0)
    assert r.status_code == 200, r.text
    assert r.json() == {"artifact": "new.py", "revision": 0, "content_hash": None, "holds": True}
    # the check is read-only: no event, no artifact row
    assert client.get(f"/v1/sessions/{sid}").json()["events"] == 0
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {}


def test_config_example_revision_compare_and_swap(client: TestClient) -> None:
    """The issue's example: config.yaml read at r0 (timeout: 30), written (r1), read
    again (timeout: 60). An action planned on r0 fails with the current revision; one
    planned on r1 holds."""
    sid = new_session(client)
    assert post(client, sid, assistant("a1", "c1"),
                result("t1", "c1", "timeout: 30\n", binding={"artifact": "config.yaml", "kind": "file",
                                                               "content_hash": "h30"})).status_code == 200
    planned_on = check(client, sid, artifact="config.yaml", revision=0)
    assert planned_on.status_code == 200 and planned_on.json()["content_hash"] == "h30"
    assert post(client, sid, write("w1", "config.yaml", content_hash="h60")).json()["results"][0]["revision"] == 1
    # between planning and acting the file changed: 409, current revision and hash
    body = assert_problem(check(client, sid, artifact="config.yaml", revision=0), 409)
    assert body["title"] == "Precondition failed"
    assert (body["artifact"], body["revision"], body["content_hash"]) == ("config.yaml", 1, "h60")
    assert body["presented"] == {"revision": 0} and body["reason"] == "revision_changed"
    assert "revision 1" in body["detail"]
    ok = check(client, sid, artifact="config.yaml", revision=1)
    assert ok.status_code == 200 and ok.json() == {"artifact": "config.yaml", "revision": 1, "content_hash": "h60",
                                                   "holds": True}


def test_content_hash_compare_and_swap(client: TestClient) -> None:
    """By content hash (gents#1605: an expected_content_hash that no longer matches
    rejects the write)."""
    sid = new_session(client)
    post(client, sid, write("w1", "a.py", content_hash="h1"))
    assert check(client, sid, artifact="a.py", content_hash="h1").json()["revision"] == 1
    body = assert_problem(check(client, sid, artifact="a.py", content_hash="h0"), 409)
    assert (body["revision"], body["content_hash"], body["reason"]) == (1, "h1", "content_hash_changed")
    assert body["presented"] == {"content_hash": "h0"}
    # both given: both must hold
    assert check(client, sid, artifact="a.py", revision=1, content_hash="h1").status_code == 200
    assert assert_problem(check(client, sid, artifact="a.py", revision=1, content_hash="h0"), 409)["reason"] == \
        "content_hash_changed"
    assert assert_problem(check(client, sid, artifact="a.py", revision=0, content_hash="h1"), 409)["reason"] == \
        "revision_changed"


def test_content_hash_unknown_for_the_current_revision_is_not_confirmed(client: TestClient) -> None:
    """A write without a hash: the new revision's content is unknown, so a hash
    precondition cannot be confirmed (409, no content_hash in the answer) until a read
    bound to that revision records one; the latest record wins."""
    sid = new_session(client)
    post(client, sid, write("w1", "a.py", content_hash="h1"), write("w2", "a.py"))
    body = assert_problem(check(client, sid, artifact="a.py", content_hash="h1"), 409)
    assert body["revision"] == 2 and "content_hash" not in body and body["reason"] == "content_hash_unknown"
    body = assert_problem(check(client, sid, artifact="never.py", content_hash="h"), 409)
    assert body["revision"] == 0 and body["reason"] == "content_hash_unknown"
    post(client, sid, assistant("a1", "c1", "c2"),
         result("t1", "c1", "x\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h2"}))
    assert check(client, sid, artifact="a.py", content_hash="h2").json() == \
        {"artifact": "a.py", "revision": 2, "content_hash": "h2", "holds": True}
    # a read bound to an older revision says nothing about the current one
    post(client, sid, result("t2", "c2", "old\n", binding={"artifact": "a.py", "kind": "file", "revision": 1,
                                                            "content_hash": "h-old"}))
    assert check(client, sid, artifact="a.py", content_hash="h2").status_code == 200
    post(client, sid, assistant("a2", "c3"),
         result("t3", "c3", "y\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h2b"}))
    assert assert_problem(check(client, sid, artifact="a.py", content_hash="h2"), 409)["content_hash"] == "h2b"


def test_checked_at_action_time_not_cached(client: TestClient) -> None:
    """The answer is the state when asked (kimi-code#3165: a check made when the call
    was prepared missed a write made before it ran): holds, a write lands, fails."""
    sid = new_session(client)
    post(client, sid, write("w1", "a.py"))
    assert check(client, sid, artifact="a.py", revision=1).status_code == 200
    post(client, sid, write("w2", "a.py"))
    assert assert_problem(check(client, sid, artifact="a.py", revision=1), 409)["revision"] == 2
    # the agent's own consecutive writes: it plans on the revision its write made (qwen-code#3839)
    assert check(client, sid, artifact="a.py", revision=2).status_code == 200


def test_other_artifacts_and_sessions_do_not_count(client: TestClient) -> None:
    """A write to b.py, or to a.py in another session, leaves a.py's precondition holding."""
    sid, other = new_session(client), new_session(client)
    post(client, sid, write("w1", "b.py", content_hash="hb"))
    post(client, other, write("w1", "a.py", content_hash="ha"))
    assert check(client, sid, artifact="a.py", revision=0).json()["revision"] == 0
    assert check(client, sid, artifact="b.py", revision=1).json()["content_hash"] == "hb"
    assert check(client, other, artifact="a.py", revision=1).status_code == 200


def test_revision_from_the_future_is_422(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, write("w1", "a.py"))
    body = assert_problem(check(client, sid, artifact="a.py", revision=2), 422)
    assert body["title"] == "Invalid precondition" and body["revision"] == 1 and "does not exist yet" in body["detail"]
    assert assert_problem(check(client, sid, artifact="new.py", revision=1), 422)["revision"] == 0


@pytest.mark.parametrize("bad", [
    {},
    {"artifact": "a.py"},  # neither revision nor content_hash
    {"artifact": "", "revision": 0},
    {"artifact": "a.py", "revision": -1},
    {"artifact": "a.py", "revision": "one"},
    {"artifact": "a.py", "content_hash": ""},
    {"artifact": "a.py", "revision": 0, "surprise": 1},
    {"artifact": "x" * 1025, "revision": 0},
])
def test_invalid_bodies_are_422(client: TestClient, bad: dict) -> None:
    sid = new_session(client)
    assert_problem(client.post(f"/v1/sessions/{sid}/preconditions", json=bad), 422)


def test_unknown_session_is_404(client: TestClient) -> None:
    body = assert_problem(check(client, "nope", artifact="a.py", revision=0), 404)
    assert body["title"] == "Session not found"
