"""Content hashes through the API (issue 11, "Also"), SQLite and PostgreSQL: the events the
mini-swe-agent adapter infers (hashed whole-file reads, hashed writes of known text) are
posted as a replay posts them; the server detects an external change only where a whole
read's hash contradicts the hash known for the current revision."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient

from ctxd_tools.miniswe import trajectory_events
from tests.api.test_api import assert_problem, new_session, post, result
from tests.api.test_invalidation_api import bash, item, request
from tests.unit.test_content_hashes import _trajectory


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def artifacts(client: TestClient, sid: str) -> dict[str, int]:
    return client.get(f"/v1/sessions/{sid}").json()["artifacts"]


def test_adapter_events_reveal_only_the_real_external_change(client: TestClient) -> None:
    """read (h1) -> heredoc write (h2) -> read (h2) -> sed -i (no hash) -> read (h3, adopted)
    -> read (h4: the file changed outside the agent's tools). Only the last read is an
    external change: a.py goes r1 (write), r2 (sed -i), r3 (external); the read of h3 is
    historical, named by a.py@r3, and the other reads by the writes after them."""
    traj = _trajectory([("cat a.py", "x = 1\n", 0), ("cat > a.py <<'EOF'\nx = 2\nEOF", "", 0),
                        ("cat a.py", "x = 2\n", 0), ("sed -i 's/2/3/' a.py", "", 0), ("cat a.py", "x = 3\n", 0),
                        ("cat b.py", "import a  # a.py says x = 3\n", 0), ("cat a.py", "x = 4\n", 0)])
    events = trajectory_events(traj, infer_bindings=True)
    sid = new_session(client)
    r = post(client, sid, *events)
    assert r.status_code == 200, r.text
    assert artifacts(client, sid) == {"a.py": 3}  # b.py never changed (the negative control)
    manifest = request(client, sid)["manifest"]
    states = {e: (item(manifest, e)["state"], item(manifest, e).get("superseded_by"))
              for e in ("m0003-tool", "m0007-tool", "m0011-tool", "m0013-tool", "m0015-tool")}
    assert states == {"m0003-tool": ("historical", ["a.py@r1"]), "m0007-tool": ("historical", ["a.py@r2"]),
                      "m0011-tool": ("historical", ["a.py@r3"]), "m0013-tool": ("current", None),
                      "m0015-tool": ("current", None)}
    assert item(manifest, "m0011-tool")["write"]["cause"] == "external"
    assert item(manifest, "m0011-tool")["write"]["event_id"] == "m0015-tool"
    # the precondition endpoint knows the externally changed content's hash
    ok = client.post(f"/v1/sessions/{sid}/preconditions", json={"artifact": "a.py", "content_hash": sha("x = 4\n")})
    assert ok.status_code == 200 and ok.json()["revision"] == 3


def test_a_range_hash_is_never_compared_with_the_file_hash(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat a.py"),
         result("t1", "c1", "x = 1\ny = 1\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h1"}))
    post(client, sid, bash("a2", "c2", "sed -n 2,2p a.py"),
         result("t2", "c2", "y = 1\n", binding={"artifact": "a.py", "kind": "file", "range": "2:2",
                                                 "content_hash": "h-range"}))
    assert artifacts(client, sid) == {}  # no change
    ok = client.post(f"/v1/sessions/{sid}/preconditions", json={"artifact": "a.py", "content_hash": "h1"})
    assert ok.status_code == 200  # the range's hash was not taken for the file's
    post(client, sid, bash("a3", "c3", "cat a.py"),
         result("t3", "c3", "x = 1\ny = 2\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h2"}))
    assert artifacts(client, sid) == {"a.py": 1}


def test_a_hash_after_an_unknown_write_is_adopted_not_an_external_change(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat a.py"),
         result("t1", "c1", "x = 1\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h1"}))
    post(client, sid, {"event_id": "w1", "kind": "artifact_write", "artifact": "a.py"})  # sed -i: text unknown
    post(client, sid, bash("a2", "c2", "cat a.py"),
         result("t2", "c2", "x = 3\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h3"}))
    assert artifacts(client, sid) == {"a.py": 1}
    assert item(request(client, sid)["manifest"], "t1")["write"]["cause"] == "write"
    assert client.post(f"/v1/sessions/{sid}/preconditions",
                       json={"artifact": "a.py", "content_hash": "h3"}).json()["revision"] == 1


def test_malformed_hashes_and_read_entries_are_422_and_change_nothing(client: TestClient) -> None:
    """A hash is kept as SQL text with the artifact's revision: one with a NUL, longer than
    256 characters, empty, or not a string (in a free-form ``conditions.reads`` entry) is a
    422 problem+json on both databases (a NUL was a 500 on PostgreSQL), and so is a reads
    entry naming an artifact SQL text cannot hold; nothing is stored."""
    sid = new_session(client)
    bad = ["a\u0000b", "x" * 257, ""]
    for k, h in enumerate(bad):
        r = post(client, sid, bash(f"a{k}", f"c{k}", "cat a.py"),
                 result(f"t{k}", f"c{k}", "x\n", binding={"artifact": "a.py", "kind": "file", "content_hash": h}))
        assert_problem(r, 422)
        assert_problem(post(client, sid, {"event_id": f"w{k}", "kind": "artifact_write", "artifact": "a.py",
                                          "content_hash": h}), 422)
    for k, entry in enumerate([{"artifact": "a.py", "content_hash": h} for h in [*bad, 7]]
                              + [{"artifact": "a\u0000.py"}, {"artifact": "a" * 1025}]):
        r = post(client, sid, bash(f"r{k}", f"d{k}", "cat a.py b.py"),
                 result(f"s{k}", f"d{k}", "x\n", conditions={"reads": [entry]}))
        assert_problem(r, 422)
    assert client.get(f"/v1/sessions/{sid}").json()["events"] == 0
    ok = post(client, sid, bash("a9", "c9", "cat a.py"),
              result("t9", "c9", "x\n", binding={"artifact": "a.py", "kind": "file", "content_hash": "h" * 256}))
    assert ok.status_code == 200
