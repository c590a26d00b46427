"""The assembly memo (app/services/memo.py) on a real SQLite database: incremental event
loading through the load step's reader, and its byte and session bounds."""

from __future__ import annotations

import json

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
    sids = [new_session(factory, 2, 5_000) for _ in range(4)]
    one = AssemblyMemo()
    memo_events(one, factory, sids[0], last_seq(factory, sids[0]))
    bound = one.bytes * 3 // 2  # one session fits, two do not
    memo = AssemblyMemo(max_bytes=bound)
    for sid in sids:
        memo_events(memo, factory, sid, last_seq(factory, sid))
        memo.leaf_cache(sid).warm_profile = "v"
    assert memo.bytes <= bound and len(memo) == 1, "only the most recent session fits"
    assert memo.leaf_cache(sids[-1]).warm_profile == "v"
    assert memo.leaf_cache(sids[0]).warm_profile is None, "an evicted session starts empty"


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


def _kinds_session(factory) -> str:
    """A session declaring a bash tool (so ingest infers artifact writes from its commands)."""
    from tests.api.test_api import BASH

    with factory() as db:
        sid = create_session(db, ProfileRegistry(load_profiles()), profile="qwen3",
                             contract={"goal": "g", "constraints": []}, system="s", tools=[BASH], metadata={})
        db.commit()
    return sid


def _bash(event_id: str, call_id: str, command: str) -> dict:
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": "ok",
            "tool_calls": [{"call_id": call_id, "name": "bash", "arguments": json.dumps({"command": command})}]}


def _every_kind(n: int) -> list[dict]:
    """One batch of most event kinds: a message with a call, an inferred artifact write (a
    heredoc), a tool result with a secret (stored redacted as a ``view`` of its own), a
    step, a plan, a document, a hypothesis and an obligation."""
    from tests.secret_corpus import AWS_SECRET

    return [
        {"event_id": f"u{n}", "kind": "message", "role": "user", "content": f"task {n} \u00e9\U0001f600"},
        _bash(f"a{n}", f"c{n}", f"cat > f{n}.txt <<'EOF'\nvalue {n}\nEOF"),
        {"event_id": f"r{n}", "kind": "tool_result", "call_id": f"c{n}", "payload": "", "exit_code": 0},
        _bash(f"b{n}", f"d{n}", "env"),
        {"event_id": f"s{n}", "kind": "tool_result", "call_id": f"d{n}",
         "payload": f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\nline {n}", "exit_code": 1},
        {"event_id": f"st{n}", "kind": "step", "text": f"step {n}"},
        {"event_id": f"p{n}", "kind": "plan", "text": f"- [ ] plan {n}"},
        {"event_id": f"d{n}", "kind": "document", "key": "spec", "source": "user", "text": f"spec {n}"},
        {"event_id": f"h{n}", "kind": "hypothesis", "key": f"h{n}", "text": "maybe", "status": "open",
         "depends_on": [1]},
        {"event_id": f"o{n}", "kind": "obligation", "key": f"o{n}", "text": "run tests", "status": "open"},
    ]


def test_a_post_appends_its_committed_events_equal_to_what_storage_reads_back(migrated_factory) -> None:
    """Issue 9 (speed): a POST hands the events it committed to the worker's memo, so the
    next GET's load reads no event row; they equal what the repository reads back (every
    kind, the redacted view's text, inferred writes, timestamps), batch after batch."""
    from app.store import repository as repo
    from app.store.db import make_read_factory

    factory = migrated_factory
    memo = AssemblyMemo()
    sid = _kinds_session(factory)
    reads: list[int] = []
    for n in range(3):
        with factory() as db:
            out = ingest_events(db, sid, _every_kind(n), memo=memo)
            db.commit()
        seq = out["last_seq"]
        got = memo_events(memo, factory, sid, seq, reads)
        assert reads == [], "nothing read: the POST's events are in the memo"
        with factory() as db:
            stored = repo.load_events(db, sid)
        assert got == stored and [e.seq for e in got] == list(range(1, seq + 1))
        assert any(e.kind == "artifact_write" for e in got) and any(getattr(e, "redactions", ()) for e in got)
        assert all(e.at is not None for e in got if hasattr(e, "at") and e.kind != "hypothesis")
    # a second memo (another worker) reads them all from storage: the same events
    other = AssemblyMemo()
    assert memo_events(other, make_read_factory(factory.kw["bind"]), sid, seq, reads) == got and reads == [0]


def test_a_rolled_back_or_out_of_order_batch_leaves_the_memo_as_it_was(migrated_factory) -> None:
    """Only committed events enter the memo, and only when they follow its last seq exactly:
    a rolled-back batch adds nothing; a batch after a gap (another worker's POST the memo
    has not seen) is not appended, and the GET reads what the memo lacks."""
    from app.store import repository as repo

    factory = migrated_factory
    memo = AssemblyMemo()
    sid = _kinds_session(factory)
    with factory() as db:
        ingest_events(db, sid, _every_kind(0), memo=memo)
        db.commit()
    first = last_seq(factory, sid)
    with factory() as db:
        ingest_events(db, sid, _every_kind(1), memo=memo)
        db.rollback()
    reads: list[int] = []
    assert memo_events(memo, factory, sid, last_seq(factory, sid), reads) == memo_events(AssemblyMemo(), factory, sid,
                                                                                           first)
    assert last_seq(factory, sid) == first and reads == []
    with factory() as db:  # another worker's POST: this memo does not see it
        ingest_events(db, sid, [{"event_id": "x1", "kind": "step", "text": "elsewhere"}])
        db.commit()
    with factory() as db:  # this worker's next POST starts after the gap: not appended
        ingest_events(db, sid, [{"event_id": "x2", "kind": "step", "text": "here"}], memo=memo)
        db.commit()
    got = memo_events(memo, factory, sid, first + 2, reads)
    assert reads == [first], "the GET reads the rows after the memo's last seq"
    with factory() as db:
        assert got == repo.load_events(db, sid) and [e.text for e in got[-2:]] == ["elsewhere", "here"]


def test_extend_appends_only_dense_seqs_after_the_memo(factory) -> None:
    from app.domain.types import StepEvent

    memo = AssemblyMemo()
    step = [StepEvent(seq=s, event_id=f"s{s}", text="t") for s in range(1, 6)]
    assert not memo.extend("a", step[1:3]), "a session the memo does not hold starts at seq 1"
    assert memo.extend("a", step[:2]) and memo.bytes > 0
    assert not memo.extend("a", step[3:5]) and not memo.extend("a", [step[2], step[4]]) and not memo.extend("a", [])
    assert memo.extend("a", step[2:5])
    # a late hand-over of events the memo already holds (a slower POST's, after a GET read
    # newer ones: praxis-proxy/ai#877's kind, a stale writer overwriting a newer cache) is refused
    assert not memo.extend("a", step[:2]) and not memo.extend("a", step[4:5])
    assert memo.events("a", 5, lambda after: pytest.fail("nothing to read")) == step
    assert memo.events("a", 3, lambda after: pytest.fail("nothing to read")) == step[:3]
