"""The tool-call table (issue 9, item 5) on SQLite and PostgreSQL: ingest checks only its
batch's call ids against it with the same errors as before, its constraints hold one
result per call, and the ingest migration backfills it from an existing event log exactly
as live ingest fills it (and adds the payloads' token_counts column, empty)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from app.domain.errors import EventConflict, InvalidEvent
from app.services.sessions import create_session, ingest_events
from app.store.db import make_engine, make_session_factory
from app.store.migrate import alembic_config, upgrade_head
from app.tokenizers.profiles import ProfileRegistry, load_profiles

PROFILES = ProfileRegistry(load_profiles())


@pytest.fixture(params=["sqlite", "postgres"])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """A function giving the URL of a fresh, empty database (SQLite file or PostgreSQL)."""
    if request.param == "postgres":
        factory = request.getfixturevalue("postgres_database_factory")
        return factory  # type: ignore[no-any-return]
    counter = iter(range(1000))
    return lambda: f"sqlite:///{tmp_path / f'db{next(counter)}.sqlite3'}"


@pytest.fixture()
def engine(new_url: Callable[[], str]) -> Iterator[sa.Engine]:
    url = new_url()
    upgrade_head(url)
    eng = make_engine(url)
    yield eng
    eng.dispose()


def assistant(event_id: str, *calls: str) -> dict[str, Any]:
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": "Looking.", "reasoning": None,
            "tool_calls": [{"call_id": c, "name": "bash", "arguments": "{}"} for c in calls]}


def result(event_id: str, call_id: str, payload: str = "ok\n") -> dict[str, Any]:
    return {"event_id": event_id, "kind": "tool_result", "call_id": call_id, "payload": payload, "exit_code": 0,
            "binding": None, "conditions": {}}


def new_session(factory: Any) -> str:
    with factory() as db:
        sid = create_session(db, PROFILES, profile="qwen3", contract={"goal": "g", "constraints": []}, system="s",
                             tools=[], metadata={})
        db.commit()
    return sid


def post(factory: Any, sid: str, *events: dict[str, Any]) -> dict[str, Any]:
    with factory() as db:
        try:
            out = ingest_events(db, sid, list(events))
            db.commit()
            return out
        except BaseException:
            db.rollback()
            raise


def calls_of(engine: sa.Engine, sid: str | None = None) -> set[tuple[str, str, int, int | None]]:
    query = "SELECT session_id, call_id, call_seq, result_seq FROM tool_calls"
    with engine.connect() as conn:
        rows = conn.execute(sa.text(query + (" WHERE session_id = :sid" if sid else "")), {"sid": sid} if sid else {})
        return {tuple(r) for r in rows}  # type: ignore[misc]


def test_ingest_fills_the_table_and_keeps_todays_errors(engine: sa.Engine) -> None:
    factory = make_session_factory(engine)
    sid = new_session(factory)
    # parallel calls, one answered in the same batch, one later
    post(factory, sid, assistant("a1", "c1", "c2"), result("r1", "c1"))
    assert calls_of(engine, sid) == {(sid, "c1", 1, 2), (sid, "c2", 1, None)}
    post(factory, sid, result("r2", "c2"), {"event_id": "s1", "kind": "step", "text": "go on"})
    assert calls_of(engine, sid) == {(sid, "c1", 1, 2), (sid, "c2", 1, 3)}

    before = calls_of(engine)
    failing: list[tuple[tuple[dict[str, Any], ...], type[Exception], str]] = [
        ((result("r9", "ghost"),), InvalidEvent, "names no earlier tool call"),
        ((result("r9", "c1"),), InvalidEvent, "already has a result"),
        ((assistant("a9", "c3"), result("r9", "c3"), result("r10", "c3")), InvalidEvent, "already has a result"),
        ((assistant("a9", "c2"),), InvalidEvent, "already used"),
        ((assistant("a9", "c4"), assistant("a10", "c4")), InvalidEvent, "already used"),
        ((result("r10", "c5"), assistant("a9", "c5")), InvalidEvent, "names no earlier tool call"),
        ((assistant("a9", "c6"), result("r1", "c6")), EventConflict, "different body"),
    ]
    for events, error, words in failing:
        with pytest.raises(error, match=words):
            post(factory, sid, *events)
        assert calls_of(engine) == before, f"a refused batch changes nothing: {events}"

    # idempotent duplicates: the same batch again is a no-op with the original seqs
    again = post(factory, sid, assistant("a1", "c1", "c2"), result("r1", "c1"), result("r2", "c2"))
    assert [(r["seq"], r["status"]) for r in again["results"]] == [(1, "duplicate"), (2, "duplicate"), (3, "duplicate")]
    assert calls_of(engine) == before

    # call ids are per session: another session may use c1
    other = new_session(factory)
    post(factory, other, assistant("a1", "c1"), result("r1", "c1"))
    assert calls_of(engine, other) == {(other, "c1", 1, 2)}


def test_constraints_allow_one_result_per_call(engine: sa.Engine) -> None:
    factory = make_session_factory(engine)
    sid = new_session(factory)
    post(factory, sid, assistant("a1", "c1", "c2"), result("r1", "c1"))
    insert = sa.text("INSERT INTO tool_calls (session_id, call_id, call_seq, result_seq) VALUES (:s, :c, :cs, :rs)")
    update = sa.text("UPDATE tool_calls SET result_seq = :rs WHERE session_id = :s AND call_id = :c")
    refused = [
        (insert, {"s": sid, "c": "c1", "cs": 5, "rs": None}),  # a call id twice in a session
        (update, {"s": sid, "c": "c2", "rs": 2}),  # one result event answering two calls
        (update, {"s": sid, "c": "c2", "rs": 1}),  # a result at or before its call
        (insert, {"s": sid, "c": "c9", "cs": 4, "rs": 3}),  # idem, on insert
        (insert, {"s": "0" * 32, "c": "c1", "cs": 1, "rs": None}),  # no such session
    ]
    for statement, params in refused:
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(statement, params)
    with engine.begin() as conn:  # many unanswered calls (result_seq NULL) are fine
        conn.execute(insert, [{"s": sid, "c": f"p{i}", "cs": 3, "rs": None} for i in range(3)])
    with engine.begin() as conn:  # deleting a session deletes its calls
        conn.execute(sa.text("DELETE FROM sessions WHERE id = :s"), {"s": sid})
    assert calls_of(engine, sid) == set()


def test_migration_backfills_from_existing_events(new_url: Callable[[], str]) -> None:
    """Events written by today's ingest into one database are copied into a database at
    revision 0002 (before the table existed); upgrading it yields exactly the rows live
    ingest wrote; ingest then goes on from the backfilled table; downgrade drops it."""
    from alembic import command

    live_url, old_url = new_url(), new_url()
    upgrade_head(live_url)
    live = make_engine(live_url)
    factory = make_session_factory(live)
    sids = [new_session(factory) for _ in range(3)]
    post(factory, sids[0], {"event_id": "u", "kind": "message", "role": "user", "content": "hi"},
         assistant("a1", "c1", "c2", "c3"), result("r1", "c2"), result("r2", "c1"))
    post(factory, sids[0], {"event_id": "w", "kind": "artifact_write", "artifact": "a.py"}, assistant("a2", "c4"))
    for i in range(40):
        post(factory, sids[1], assistant(f"a{i}", f"x{i}"), result(f"r{i}", f"x{i}", payload=f"{i}\n"))
    # sids[2] has no events at all
    expected = calls_of(live)
    assert len(expected) == 44

    config = alembic_config(old_url)
    command.upgrade(config, "0002")
    old = sa.create_engine(old_url)
    schema = sa.MetaData()
    schema.reflect(old, only=["sessions", "payloads", "artifacts", "events"])  # the tables as at 0002
    live_columns = {name: {c["name"] for c in sa.inspect(live).get_columns(name)}
                    for name in ("sessions", "payloads", "artifacts", "events")}
    with live.connect() as src, old.begin() as dst:
        for name in ("sessions", "payloads", "artifacts", "events"):
            table = schema.tables[name]
            columns = [c for c in table.columns if c.name in live_columns[name]]
            rows = [dict(r._mapping) for r in src.execute(sa.select(*columns))]
            if name == "sessions":  # the cut as 0002 kept it (migration 0005_layout_states moved it to layout_states)
                rows = [r | {"cut_seq": 0} for r in rows]
            if rows:
                dst.execute(table.insert(), rows)
        if old.dialect.name == "postgresql":  # copied ids: move the serial past them
            dst.execute(sa.text("SELECT setval(pg_get_serial_sequence('events', 'id'), (SELECT max(id) FROM events))"))
    old.dispose()
    live.dispose()

    command.upgrade(config, "head")
    migrated = make_engine(old_url)
    try:
        assert calls_of(migrated) == expected
        assert "token_counts" in {c["name"] for c in sa.inspect(migrated).get_columns("payloads")}
        with migrated.connect() as conn:  # existing payloads start uncounted
            assert conn.execute(sa.text("SELECT count(*) FROM payloads WHERE token_counts IS NOT NULL")).scalar_one() == 0
        factory = make_session_factory(migrated)
        with pytest.raises(InvalidEvent, match="already has a result"):
            post(factory, sids[0], result("r9", "c1"))
        with pytest.raises(InvalidEvent, match="already used"):
            post(factory, sids[1], assistant("a99", "x7"))
        out = post(factory, sids[0], result("r3", "c3"), result("r4", "c4"))
        assert [r["seq"] for r in out["results"]] == [7, 8]
        assert (sids[0], "c3", 2, 7) in calls_of(migrated, sids[0])
    finally:
        migrated.dispose()

    command.downgrade(config, "0002")
    check = sa.create_engine(old_url)
    try:
        assert "tool_calls" not in sa.inspect(check).get_table_names()
        assert "token_counts" not in {c["name"] for c in sa.inspect(check).get_columns("payloads")}
    finally:
        check.dispose()


def test_a_post_reads_only_its_batch(engine: sa.Engine) -> None:
    """The same batch posted into an empty session and into one of 600 events sends the same
    statements; the tool-call read is one SELECT naming the batch's call ids (before the
    table, every POST read every message and tool result of the session)."""
    factory = make_session_factory(engine)
    small, large = new_session(factory), new_session(factory)
    for i in range(300):
        post(factory, large, assistant(f"a{i}", f"x{i}"), result(f"r{i}", f"x{i}"))
    captured: list[str] = []

    def capture(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        captured.append(statement)

    def statements_of(sid: str) -> list[str]:
        captured.clear()
        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            post(factory, sid, assistant("b1", "y1", "y2"), result("q1", "y1"), result("q2", "y2"))
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)
        return list(captured)

    few, many = statements_of(small), statements_of(large)
    assert few == many
    reads = [s for s in many if "tool_calls" in s and s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1 and " IN " in reads[0].upper()
    assert not any("FROM events" in s and "event_id IN" not in s.replace("events.event_id", "event_id") for s in many
                   if s.lstrip().upper().startswith("SELECT")), many


def test_a_batch_stores_its_payloads_together(engine: sa.Engine) -> None:
    """A batch's payloads (messages, tool outputs; repeats stored once) go in with one insert
    and are linked to the session with one more, whatever their number; each is stored
    under its sha256 and linked, the session's stored_bytes counts each event's payload, and
    content another session stored already is linked, not stored twice."""
    factory = make_session_factory(engine)
    first, sid = new_session(factory), new_session(factory)
    post(factory, first, assistant("a0", "c0"), result("r0", "c0", "shared\n"))
    calls = [f"c{i}" for i in range(1, 41)]
    events = [assistant("a1", *calls)]
    events += [result(f"r{i}", c, "shared\n" if i == 0 else ("same\n" if i < 5 else f"out {i}\n"))
               for i, c in enumerate(calls)]
    captured: list[str] = []

    def capture(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        captured.append(" ".join(statement.split()).upper())

    sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        post(factory, sid, *events)
    finally:
        sa.event.remove(engine, "before_cursor_execute", capture)
    assert sum(s.startswith("INSERT INTO PAYLOADS ") for s in captured) == 1, captured
    assert sum(s.startswith("INSERT INTO PAYLOAD_OWNERS ") for s in captured) == 1, captured
    with engine.connect() as conn:
        bodies = [row[0] for row in conn.execute(sa.text("SELECT body FROM events WHERE session_id = :s"), {"s": sid})]
        bodies = [b if isinstance(b, dict) else json.loads(b) for b in bodies]
        handles = {b["handle"] for b in bodies}
        owned = {row[0] for row in conn.execute(sa.text("SELECT sha256 FROM payload_owners WHERE session_id = :s"),
                                                {"s": sid})}
        stored = dict(conn.execute(sa.text("SELECT sha256, data FROM payloads")).all())
        stored_bytes = conn.execute(sa.text("SELECT stored_bytes FROM sessions WHERE id = :s"), {"s": sid}).scalar_one()
    assert len(bodies) == 41 and owned == handles
    assert len(handles) == 1 + 1 + 1 + 35  # the message, "shared", "same" and 35 distinct outputs
    for handle in handles:
        assert hashlib.sha256(bytes(stored[handle])).hexdigest() == handle
    sizes = {h: len(bytes(stored[h])) for h in handles}
    assert stored_bytes == sum(sizes[b["handle"]] for b in bodies)  # as if not deduplicated
