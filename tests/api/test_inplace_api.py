"""In-place writers found by rule through the API (README "Invalidation"): an agent posts
only its bash calls and their results; after ``perl -pi``, ``npx prettier --write``,
``gofmt -w`` or ``git checkout -B release origin/release`` the earlier read of the file is
historical and its stale text no longer current in the request. Before: the read stayed
current and verbatim, and the agent edited from stale text (kimchi#404, Kiro#8035)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import new_session, post, result
from tests.api.test_invalidation_api import bash, item, request

CASES = {
    "perl": ("src/service.py", "perl -pi -e 's/TIMEOUT = 30/TIMEOUT = 60/' src/service.py"),
    "prettier": ("src/app.ts", "npx prettier --write src/app.ts"),
    "gofmt": ("main.go", "gofmt -w main.go"),
    "git start point": ("src/service.py", "git checkout -B release origin/release"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_in_place_write_makes_the_earlier_read_historical(client: TestClient, case: str) -> None:
    path, command = CASES[case]
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", f"cat {path}"), result("t1", "c1", "TIMEOUT = 30\n"))
    post(client, sid, bash("a2", "c2", command), result("t2", "c2", ""))
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"].get(path) == 1, "the write was inferred"
    t1 = item(request(client, sid)["manifest"], "t1")
    assert t1["state"] == "historical" and t1["superseded_by"] == [f"{path}@r1"]


def test_a_check_mode_leaves_the_read_current(client: TestClient) -> None:
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat main.go"), result("t1", "c1", "package main\n"))
    post(client, sid, bash("a2", "c2", "gofmt -l main.go"), result("t2", "c2", ""))
    assert item(request(client, sid)["manifest"], "t1")["state"] == "current"


@pytest.mark.parametrize("command", ["codemod --rename old new src/service.py", "./scripts/regen src/service.py",
                                     "bin/vendorize src/service.py vendor/"])
def test_an_unknown_program_naming_a_read_file_makes_it_possibly_stale(client: TestClient, command: str) -> None:
    """A command ctxd does not know as read-only that names an artifact the session read: the
    earlier read is ``possibly_stale``, shown with a notice after the command's turn (not a
    tombstone: nothing proves a write, and the revision does not move)."""
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat src/service.py"), result("t1", "c1", "TIMEOUT = 30\n"))
    post(client, sid, bash("a2", "c2", command), result("t2", "c2", "ok\n"))
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"].get("src/service.py", 0) == 0, "no write inferred"
    out = request(client, sid)
    t1 = item(out["manifest"], "t1")
    assert t1["state"] == "possibly_stale" and t1["representation"] == "verbatim"
    text = "\n".join(m["content"] or "" for m in out["request"]["messages"])
    assert "TIMEOUT = 30" in text and "names src/service.py" in text and "possibly stale" in text


@pytest.mark.parametrize("command", ["python tools/check.py src/service.py", "pytest tests/test_service.py",
                                     "node scripts/lint.js src/service.py", "make test", "wc -l src/service.py"])
def test_interpreters_test_runners_and_readers_mark_nothing(client: TestClient, command: str) -> None:
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat src/service.py"), result("t1", "c1", "TIMEOUT = 30\n"))
    post(client, sid, bash("a2", "c2", command), result("t2", "c2", "ok\n"))
    assert item(request(client, sid)["manifest"], "t1")["state"] == "current"
