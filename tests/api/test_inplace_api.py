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
