"""A GET reads stored payload token counts only for outputs it does not know yet, and gives
up on a missing count after COUNT_LOOKUPS GETs, so a count that never arrives (its
background task failed) costs no read per GET (issue 9, item 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa

from app.services.memo import AssemblyMemo
from app.services.requests import COUNT_LOOKUPS, assemble_request
from app.services.sessions import create_session, ingest_events
from app.store import repository as repo
from app.store.db import make_engine, make_read_factory, make_session_factory
from app.store.migrate import upgrade_head
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry, load_profiles
from app.tokenizers.segments import LocalLRUCache


def test_count_lookups_stop_and_known_counts_are_read_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    upgrade_head(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    profiles = ProfileRegistry(load_profiles())
    meters = MeterRegistry(LocalLRUCache(1 << 24))
    memo = AssemblyMemo()  # the app's (app.state.ctxd.memo)
    with factory() as db:
        sid = create_session(db, profiles, profile="qwen3", contract={"goal": "g", "constraints": []}, system="s",
                             tools=[], metadata={})
        out = ingest_events(db, sid, [
            {"event_id": "a", "kind": "message", "role": "assistant", "content": "", "reasoning": None,
             "tool_calls": [{"call_id": "c1", "name": "bash", "arguments": "{}"},
                            {"call_id": "c2", "name": "bash", "arguments": "{}"}]},
            {"event_id": "r1", "kind": "tool_result", "call_id": "c1", "payload": "one\n", "exit_code": 0},
            {"event_id": "r2", "kind": "tool_result", "call_id": "c2", "payload": "two\n", "exit_code": 0}])
        db.commit()
    one, _two = out["new_tool_outputs"]
    tokenizer_id = meters.get(profiles.get("qwen3")).tokenizer_id
    with factory() as db:  # one output's count is stored, the other's never is
        repo.store_token_counts(db, tokenizer_id, {one: 777})  # a distinctive value: read from storage
        db.commit()
    statements: list[str] = []

    def capture(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    def get() -> tuple[list[dict[str, Any]], int]:
        statements.clear()
        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            got = assemble_request(factory, profiles, meters, sid, memo=memo, read_factory=make_read_factory(engine))
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)
        lookups = sum(1 for s in statements if "token_counts" in s and s.lstrip().upper().startswith("SELECT"))
        return [i for i in got.manifest.to_json()["items"] if i["kind"] == "tool_result"], lookups

    for n in range(COUNT_LOOKUPS + 2):
        items, lookups = get()
        # the stored count is reported; the other output, within the cap, is counted in the GET
        inline = meters.get(profiles.get("qwen3")).count_text("two\n")
        assert [(i["tokens_known"], i.get("tokens")) for i in items] == [(True, 777), (True, inline)]
        assert lookups == (1 if n < COUNT_LOOKUPS else 0), f"GET {n + 1}"
    engine.dispose()
