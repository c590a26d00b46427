"""DELETE of a session against a concurrent insert of the same content (issue 12 item 3),
on SQLite and PostgreSQL, in both orders, with real transactions in two threads:

* the delete locks and removes the shared payload first, the insert waits: after both
  commit the payload is stored again and readable through the inserting session;
* the insert links the payload first, the delete waits: the payload is kept.

Either way no link names a missing payload and the inserting session reads its bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.domain.tenancy import Principal
from app.services import sessions as session_service
from app.services import tenancy
from app.store.db import unit_of_work

SHARED = "the same bytes in two sessions\n"
T = Principal("default")


@pytest.fixture
def factory(migrated_factory: sessionmaker[OrmSession]) -> sessionmaker[OrmSession]:
    return migrated_factory


def _session_with(factory: sessionmaker[OrmSession], event_id: str, payload: str | None) -> str:
    with unit_of_work(factory) as db:
        sid = session_service.create_session(db, _NoProfiles(), profile="qwen3", contract={"goal": "g"}, system="",
                                             tools=[], metadata={})
        if payload is not None:
            _ingest(db, sid, event_id, payload)
    return sid


def _ingest(db: OrmSession, sid: str, event_id: str, payload: str) -> None:
    session_service.ingest_events(db, sid, [
        {"event_id": f"{event_id}-a", "kind": "message", "role": "assistant", "content": "",
         "tool_calls": [{"call_id": f"{event_id}-c", "name": "bash", "arguments": "{}"}]},
        {"event_id": f"{event_id}-r", "kind": "tool_result", "call_id": f"{event_id}-c", "payload": payload}])


class _NoProfiles:
    def get(self, name: str) -> object:
        return object()


def _payload_rows(factory: sessionmaker[OrmSession]) -> int:
    with factory() as db:
        return int(db.execute(sa.text("SELECT count(*) FROM payloads WHERE data = :d"),
                              {"d": SHARED.encode()}).scalar_one())


def _dangling_links(factory: sessionmaker[OrmSession]) -> int:
    with factory() as db:
        return int(db.execute(sa.text("SELECT count(*) FROM payload_owners o WHERE NOT EXISTS "
                                      "(SELECT 1 FROM payloads p WHERE p.sha256 = o.sha256)")).scalar_one())


def _read(factory: sessionmaker[OrmSession], sid: str) -> bytes:
    import hashlib

    with factory() as db:
        full = tenancy.resolve_handle(db, hashlib.sha256(SHARED.encode()).hexdigest(), T, session_id=sid)
        return session_service.read_handle(db, full)[1]


def _in_thread(work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def test_delete_first_then_concurrent_insert_stores_the_bytes_again(factory: sessionmaker[OrmSession]) -> None:
    a = _session_with(factory, "a", SHARED)
    b = _session_with(factory, "b", None)
    with unit_of_work(factory) as db:
        out = tenancy.delete_session(db, a, T)  # payload locked and deleted, not committed yet
        assert out == {"payloads_deleted": 2, "payloads_kept": 0}

        def insert() -> None:
            with unit_of_work(factory) as other:
                _ingest(other, b, "b1", SHARED)

        thread, errors = _in_thread(insert)
        time.sleep(0.5)
        assert thread.is_alive(), "the insert did not wait for the delete's transaction"
    thread.join(30)
    assert not errors, errors
    assert _payload_rows(factory) == 1 and _dangling_links(factory) == 0
    assert _read(factory, b) == SHARED.encode()


def test_insert_first_then_concurrent_delete_keeps_the_payload(factory: sessionmaker[OrmSession]) -> None:
    a = _session_with(factory, "a", SHARED)
    b = _session_with(factory, "b", None)
    result: dict[str, int] = {}
    with unit_of_work(factory) as db:
        _ingest(db, b, "b1", SHARED)  # linked, not committed yet

        def delete() -> None:
            with unit_of_work(factory) as other:
                result.update(tenancy.delete_session(other, a, T))

        thread, errors = _in_thread(delete)
        time.sleep(0.5)
        assert thread.is_alive(), "the delete did not wait for the insert's transaction"
    thread.join(30)
    assert not errors, errors
    assert result["payloads_kept"] >= 1
    assert _payload_rows(factory) == 1 and _dangling_links(factory) == 0
    assert _read(factory, b) == SHARED.encode()
