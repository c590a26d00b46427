"""Concurrent agents on one server: no 500s, no lost or duplicated events."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from tests.api.test_api import assistant, new_session, post, result


def test_concurrent_posts_and_gets(client: TestClient) -> None:
    sessions = [new_session(client) for _ in range(3)]

    def agent(job: tuple[str, int]) -> list[int]:
        sid, worker = job
        statuses = []
        for turn in range(6):
            call = f"w{worker}t{turn}"
            statuses.append(post(client, sid, assistant(f"a-{call}", call), result(f"r-{call}", call, f"out {call}\\n")).status_code)
            statuses.append(client.get(f"/v1/sessions/{sid}/request").status_code)
        return statuses

    jobs = [(sid, w) for sid in sessions for w in range(2)]  # two writers per session, three sessions
    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = [s for batch in pool.map(agent, jobs) for s in batch]
    assert set(statuses) == {200}
    for sid in sessions:
        state = client.get(f"/v1/sessions/{sid}").json()
        assert state["events"] == 24 and state["last_seq"] == 24, "every acknowledged event kept, seqs dense"
