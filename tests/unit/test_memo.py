"""The assembly memo (app/services/memo.py) on a real SQLite database: incremental event
loading through the load step's reader, and its byte and session bounds."""

from __future__ import annotations

import pytest

from app.domain.prefix import CacheModel, prefix_state
from app.domain.state import RememberedIds
from app.services.memo import AssemblyMemo
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


def memo_events(memo: AssemblyMemo, factory, sid: str, upto: int, reads: list[int] | None = None):
    """``memo.events`` with the repository as its loader (recording each ``after_seq`` read)."""
    from app.store import repository as repo

    with factory() as db:
        def load(after: int):
            if reads is not None:
                reads.append(after)
            return repo.load_events(db, sid, after_seq=after, upto_seq=upto)

        return memo.events(sid, upto, load)


def test_events_are_loaded_incrementally_and_equal_a_full_load(factory) -> None:
    from app.store import repository as repo

    memo = AssemblyMemo()
    sid = new_session(factory, 3, 100)
    reads: list[int] = []
    first = memo_events(memo, factory, sid, last_seq(factory, sid), reads)
    assert len(first) == 6 and reads == [0]
    with factory() as db:
        ingest_events(db, sid, [{"event_id": "s", "kind": "step", "text": "next"}])
        db.commit()
    seq = last_seq(factory, sid)
    again = memo_events(memo, factory, sid, seq, reads)
    assert reads == [0, 6], "only the rows after the memo's last seq are read"
    with factory() as db:
        assert again == repo.load_events(db, sid)
    assert again[:6] == first and again[6].seq == 7
    assert memo.bytes >= 2 * 3 * 100
    older = memo_events(memo, factory, sid, 6, reads)  # a snapshot older than the memo's
    assert older == first and reads == [0, 6], "served from the memo, nothing read"


def test_byte_bound_drops_least_recently_used_sessions(factory) -> None:
    memo = AssemblyMemo(max_bytes=30_000)
    sids = [new_session(factory, 2, 5_000) for _ in range(4)]  # ~20 kB each in the memo
    for sid in sids:
        memo_events(memo, factory, sid, last_seq(factory, sid))
        memo.leaf_cache(sid)["k"] = "v"
    assert memo.bytes <= 30_000 and len(memo) == 1, "only the most recent session fits"
    assert memo.leaf_cache(sids[-1]) == {"k": "v"}
    assert memo.leaf_cache(sids[0]) == {}, "an evicted session starts empty"


def test_session_bound_and_remembered_requests(factory) -> None:
    memo = AssemblyMemo(max_sessions=2)
    ids = [1, 2, 3, 4]
    remembered = RememberedIds(state=prefix_state(ids, CacheModel.vllm_blocks(4)), packed=b"\x01\x00\x00\x00" * 4,
                               chain=(b"d" * 32,))
    for name in ("a", "b", "c"):
        memo.remember(name, "openai", remembered)
    assert memo.remembered("a", "openai") is None
    assert memo.remembered("c", "openai") == remembered
    assert memo.remembered("c", "anthropic") is None
    assert memo.bytes == 2 * (16 + 32 + 8)


def test_bad_bounds() -> None:
    with pytest.raises(ValueError):
        AssemblyMemo(max_sessions=0)
