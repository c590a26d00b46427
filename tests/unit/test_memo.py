"""The assembly memo (app/services/memo.py) on a real SQLite database: incremental event
loading, and its byte and session bounds."""

from __future__ import annotations

import pytest

from app.services.memo import AssemblyMemo, install_memo, memo_of
from app.services.sessions import create_session, ingest_events
from app.store.db import make_engine, make_session_factory
from app.store.migrate import upgrade_head
from app.tokenizers.profiles import ProfileRegistry, load_profiles


@pytest.fixture()
def factory(tmp_path):
    url = f"sqlite:///{tmp_path / 'memo.sqlite3'}"
    upgrade_head(url)
    engine = make_engine(url)
    yield make_session_factory(engine)
    engine.dispose()


def new_session(factory, n_results: int, size: int) -> str:
    profiles = ProfileRegistry(load_profiles())
    with factory() as db:
        sid = create_session(db, profiles, profile="qwen3", contract={"goal": "g", "constraints": []},
                             system="s", tools=[], metadata={})
        events = []
        for i in range(n_results):
            events.append({"event_id": f"m{i}", "kind": "message", "role": "assistant", "content": "",
                           "tool_calls": [{"call_id": f"c{i}", "name": "bash", "arguments": "{}"}]})
            events.append({"event_id": f"r{i}", "kind": "tool_result", "call_id": f"c{i}", "payload": "x" * size})
        ingest_events(db, sid, events)
        db.commit()
    return sid


def last_seq(factory, sid: str) -> int:
    from app.store import repository as repo

    with factory() as db:
        return repo.get_session_row(db, sid).last_seq


def test_events_are_loaded_incrementally_and_equal_a_full_load(factory) -> None:
    from app.store import repository as repo

    memo = AssemblyMemo()
    sid = new_session(factory, 3, 100)
    with factory() as db:
        first = memo.events(db, sid, last_seq(factory, sid))
    assert len(first) == 6
    with factory() as db:
        ingest_events(db, sid, [{"event_id": "s", "kind": "step", "text": "next"}])
        db.commit()
    seq = last_seq(factory, sid)
    with factory() as db:
        again = memo.events(db, sid, seq)
        assert again == repo.load_events(db, sid)
    assert again[:6] == first and again[6].seq == 7
    assert memo.bytes >= 2 * 3 * 100


def test_byte_bound_drops_least_recently_used_sessions(factory) -> None:
    memo = AssemblyMemo(max_bytes=30_000)
    sids = [new_session(factory, 2, 5_000) for _ in range(4)]  # ~20 kB each in the memo
    for sid in sids:
        with factory() as db:
            memo.events(db, sid, last_seq(factory, sid))
        memo.leaf_cache(sid)["k"] = "v"
    assert memo.bytes <= 30_000 and len(memo) == 1, "only the most recent session fits"
    assert memo.leaf_cache(sids[-1]) == {"k": "v"}
    assert memo.leaf_cache(sids[0]) == {}, "an evicted session starts empty"


def test_session_bound_and_remembered_requests(factory) -> None:
    memo = AssemblyMemo(max_sessions=2)
    for name in ("a", "b", "c"):
        memo.remember_request(name, "openai", b"\x01\x00\x00\x00" * 4, (b"d" * 32,))
    assert memo.previous_request("a", "openai") is None
    assert memo.previous_request("c", "openai") == (b"\x01\x00\x00\x00" * 4, (b"d" * 32,))
    assert memo.previous_request("c", "anthropic") is None
    assert memo.bytes == 2 * (16 + 32)


def test_install_memo_and_bad_bounds() -> None:
    class Owner:
        pass

    owner = Owner()
    assert memo_of(owner) is memo_of(owner)
    mine = install_memo(owner, AssemblyMemo(max_bytes=1))
    assert memo_of(owner) is mine
    with pytest.raises(ValueError):
        AssemblyMemo(max_sessions=0)
