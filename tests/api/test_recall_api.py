"""Recall endpoints (issue 14 item 3) on SQLite and PostgreSQL: ``GET .../events`` (keyset
pages on seq, summary | full, next page in the body and a Link header) and ``GET
.../search`` (substring search with handles and line ranges that ``?lines=a:b`` slices),
the ``recall`` tool of a profile.

Peer faults turned into tests here (their kinds):
* tobi/qmd#305 (FTS5 ``unicode61`` split ``atomic_write_json`` on ``_`` while the query
  sanitiser glued it: 0 hits) and topcheer/ggcode#805 (a BM25 tokenizer and snake_case):
  identifiers with ``_`` match whole, never as their words, and ``_`` / ``%`` are no
  wildcards.
* tommy0103/obelisk#76 and #194 (trigram: a sub-3-character term silently dropped, quotes
  bypassing the guard), Bouni/kicad-jlcpcb-tools#449: a short query is a clear 422, never
  an empty or unfiltered answer; FTS5 syntax in a query is literal text.
* marqo-ai/marqo#356 and whoosh-community/whoosh#130 (pages duplicating or skipping hits),
  letta-ai/letta#405 (archival search stuck on its first page): paging events and search
  hits visits each exactly once, also with events posted between pages.
* rohitg00/agentmemory#817 (one search path without the agent scope filter leaked another
  agent's memories) and makenotion/lore#208 (filters applied after the page cut): search
  and events of another tenant's session are the same 404 as an absent session; a
  session's search never returns another session's events, and the session filter is in
  the query, before the limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.domain.recall import RECALL_TOOL
from tests.api.test_api import SESSION, assert_problem, assistant, post, result
from tests.api.test_tenancy import ABSENT, _same_problem, app_client, session_with_output, two  # noqa: F401
from tests.recall_profiles import qwen3_variant, recall_app
from tests.secret_corpus import GH_CLASSIC


def new_session(client: TestClient, **extra: Any) -> str:
    r = client.post("/v1/sessions", json=SESSION | extra)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def outputs(client: TestClient, sid: str, *payloads: str, start: int = 0) -> list[int]:
    """Post one assistant call + result per payload; returns the results' seqs."""
    seqs = []
    for n, payload in enumerate(payloads, start=start):
        r = post(client, sid, assistant(f"a{n}", f"c{n}"), result(f"r{n}", f"c{n}", payload))
        assert r.status_code == 200, r.text
        seqs.append(r.json()["results"][1]["seq"])
    return seqs


def search(client: TestClient, sid: str, q: str, **params: Any) -> dict:
    r = client.get(f"/v1/sessions/{sid}/search", params={"q": q} | params)
    assert r.status_code == 200, r.text
    return r.json()


# --- search: exact identifiers, ranking, line ranges ----------------------------------

def test_identifiers_with_underscores_match_whole_and_rank_word_exact_case(client: TestClient) -> None:
    sid = new_session(client)
    words, longer, caps, exact, newest = outputs(
        client, sid,
        "the get template tag modules are listed here\n",          # the words only: no hit
        "x\ny = get_template_tag_modules_cache()\n",                 # inside a longer identifier
        "GET_TEMPLATE_TAG_MODULES = 1\n",                            # another case
        "a\nb\ndef get_template_tag_modules():\n    pass\n",         # standing alone
        "get_template_tag_modules\n")                                # standing alone, newest
    found = search(client, sid, "get_template_tag_modules")
    assert [(h["seq"], h["rank"]) for h in found["hits"]] == [
        (newest, "word"), (exact, "word"), (longer, "exact"), (caps, "case_insensitive")]
    assert words not in {h["seq"] for h in found["hits"]}
    hit = next(h for h in found["hits"] if h["seq"] == exact)
    (match,) = hit["matches"]
    assert (match["field"], match["lines"], match["exact"], match["word"]) == ("payload", "3:3", True, True)
    assert match["text"] == "def get_template_tag_modules():\n"
    # the range slices the handle: the same line comes back
    assert match["handle"] == hashlib.sha256(b"a\nb\ndef get_template_tag_modules():\n    pass\n").hexdigest()
    sliced = client.get(f"/v1/sessions/{sid}/handles/{match['handle']}", params={"lines": match["lines"]})
    assert sliced.content == b"def get_template_tag_modules():\n"


def test_like_wildcards_and_fts_syntax_are_literal(client: TestClient) -> None:
    sid = new_session(client)
    plain, pct, quoted = outputs(client, sid, "axxb and aXb\n", "100% a%b done\n",
                                 'say "quick" ok now\nquick check ok\nNEAR(quick ok)\n')
    assert search(client, sid, "a_b")["hits"] == []          # _ is no single-character wildcard
    assert [h["seq"] for h in search(client, sid, "a%b")["hits"]] == [pct]   # % is no wildcard
    hits = search(client, sid, '"quick" ok')["hits"]        # quotes are text, not an FTS5 phrase
    assert [(h["seq"], h["matches"][0]["lines"]) for h in hits] == [(quoted, "1:1")]
    for q in ("NEAR(quick ok)", "quick OR zzz", "quick*", "c AND ok"):
        got = search(client, sid, q)["hits"]
        expected = [quoted] if q == "NEAR(quick ok)" else []
        assert [h["seq"] for h in got] == expected, q
    assert [h["seq"] for h in search(client, sid, "axx")["hits"]] == [plain]


def test_short_queries_are_422_with_a_clear_message(client: TestClient) -> None:
    sid = new_session(client)
    outputs(client, sid, "ok 花名是 xy\n")
    for q in ("ok", "  ok  ", "花名", "é"):
        body = assert_problem(client.get(f"/v1/sessions/{sid}/search", params={"q": q}), 422)
        assert "at least 3 characters" in body["detail"] and body["min_chars"] == 3
    assert_problem(client.get(f"/v1/sessions/{sid}/search", params={"q": ""}), 422)
    assert_problem(client.get(f"/v1/sessions/{sid}/search", params={"q": "x" * 501}), 422)
    assert len(search(client, sid, "花名是")["hits"]) == 1     # 3 characters (not bytes) are enough
    assert len(search(client, sid, "ok 花")["hits"]) == 1     # short words inside a longer query are fine


def test_line_ranges_context_multiline_and_lines_without_newline(client: TestClient) -> None:
    sid = new_session(client)
    text = "l1\r\nl2 needle_one\nl3\nl4\nl5 needle_one\nl6\nl7\nl8\nl9 needle_one"   # CRLF, no final newline
    (seq,) = outputs(client, sid, text)
    (hit,) = search(client, sid, "needle_one")["hits"]
    assert hit["seq"] == seq
    assert [m["lines"] for m in hit["matches"]] == ["2:2", "5:5", "9:9"] and hit["match_count"] == 3
    (hit,) = search(client, sid, "needle_one", context=2)["hits"]
    assert [m["lines"] for m in hit["matches"]] == ["1:9"]     # 1:4, 3:7 and 7:9 overlap: one range
    (hit,) = search(client, sid, "needle_one", context=1)["hits"]
    assert [m["lines"] for m in hit["matches"]] == ["1:3", "4:6", "8:9"]
    for m in hit["matches"]:
        sliced = client.get(f"/v1/sessions/{sid}/handles/{m['handle']}", params={"lines": m["lines"]}).text
        assert sliced == m["text"] and "needle_one" in sliced
    (hit,) = search(client, sid, "l3\nl4\nl5")["hits"]        # a query spanning lines
    assert [m["lines"] for m in hit["matches"]] == ["3:5"]
    assert hit["seq"] == seq


def test_messages_and_steps_are_searched_with_their_fields(client: TestClient) -> None:
    sid = new_session(client)
    r = post(client, sid, {"event_id": "u1", "kind": "message", "role": "user", "content": "fix parse_header_block"},
             {"event_id": "a1", "kind": "message", "role": "assistant", "content": "ok", "reasoning": "maybe parse_header_block",
              "tool_calls": [{"call_id": "c1", "name": "bash", "arguments": {"command": "grep -n parse_header_block x.py"}}]},
             result("r1", "c1", "12: def parse_header_block(self):\n"),
             {"event_id": "s1", "kind": "step", "text": "next: test parse_header_block"})
    assert r.status_code == 200, r.text
    hits = search(client, sid, "parse_header_block")["hits"]
    assert [h["seq"] for h in hits] == [4, 3, 2, 1]
    fields = {h["seq"]: sorted(m["field"] for m in h["matches"]) for h in hits}
    assert fields == {1: ["content"], 2: ["reasoning", "tool_calls"], 3: ["payload"], 4: ["text"]}
    assert all(m["handle"] is None for h in hits if h["kind"] != "tool_result" for m in h["matches"])
    assert hits[1]["call_id"] == "c1" and hits[2]["role"] == "assistant"


def test_redacted_secrets_are_not_searchable(client: TestClient) -> None:
    sid = new_session(client)
    payload = f"token = {GH_CLASSIC}\nrest of config_value_x\n"
    (seq,) = outputs(client, sid, payload)
    assert search(client, sid, GH_CLASSIC)["hits"] == []
    assert search(client, sid, GH_CLASSIC[4:20])["hits"] == []
    (hit,) = search(client, sid, "config_value_x")["hits"]
    assert hit["seq"] == seq
    (match,) = hit["matches"]
    raw = hashlib.sha256(payload.encode()).hexdigest()
    assert hit["handle"] == raw and match["handle"] != raw     # the range slices the redacted view
    view = client.get(f"/v1/sessions/{sid}/handles/{match['handle']}").text
    assert GH_CLASSIC not in view and "config_value_x" in view.splitlines()[match["start_line"] - 1]


def test_nul_characters_are_indexed_and_found(client: TestClient) -> None:
    sid = new_session(client)
    (seq,) = outputs(client, sid, "bin\x00ary head\nfind_me_after_nul\n")
    (hit,) = search(client, sid, "find_me_after_nul")["hits"]
    assert hit["seq"] == seq and hit["matches"][0]["lines"] == "2:2"


def test_search_pages_visit_every_hit_once(client: TestClient) -> None:
    sid = new_session(client)
    seqs = outputs(client, sid, *[f"row {n}: shared_marker{'_x' if n % 3 else ''}\n" for n in range(11)])
    everything = [h["seq"] for h in search(client, sid, "shared_marker", limit=100)["hits"]]
    assert sorted(everything) == sorted(seqs)
    paged, cursor, pages = [], None, 0
    while True:
        r = client.get(f"/v1/sessions/{sid}/search", params={"q": "shared_marker", "limit": 4} |
                       ({"cursor": cursor} if cursor else {}))
        body = r.json()
        paged += [h["seq"] for h in body["hits"]]
        cursor, pages = body["next_cursor"], pages + 1
        if cursor is None:
            assert "link" not in r.headers
            break
        assert r.headers["link"].endswith('; rel="next"') and f"cursor={cursor}" in r.headers["link"]
        if pages == 1:  # an event posted between pages comes on no later page, and nothing repeats
            outputs(client, sid, "new shared_marker\n", start=100)
    assert paged == everything and pages == 3
    for bad in ("x", "9.1", "1.-2", "0.x"):
        assert_problem(client.get(f"/v1/sessions/{sid}/search", params={"q": "shared_marker", "cursor": bad}), 422)


# --- events pages -----------------------------------------------------------------------

def test_events_pages_are_keyset_with_link_headers(client: TestClient) -> None:
    sid = new_session(client)
    outputs(client, sid, *[f"out {n}\n" + "".join(f"line {i}\n" for i in range(8)) for n in range(5)])
    seen: list[int] = []
    url: str | None = f"/v1/sessions/{sid}/events?limit=3"
    added = False
    while url:
        r = client.get(url)
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [e["seq"] for e in page["events"]]
        if page["next_after_seq"] is None:
            assert "link" not in r.headers
            url = None
        else:
            link = r.headers["link"]
            assert link == (f'</v1/sessions/{sid}/events?after_seq={page["next_after_seq"]}&limit=3'
                            f'&representation=summary>; rel="next"')
            url = link[1:link.index(">")]
        if not added:  # posted between pages: they come at the end, nothing skipped or repeated
            outputs(client, sid, "late one\n", start=50)
            added = True
    assert seen == list(range(1, 13))


def test_events_representations(client: TestClient) -> None:
    sid = new_session(client)
    payload = "".join(f"line {i}\n" for i in range(1, 9))
    outputs(client, sid, payload)
    summary = client.get(f"/v1/sessions/{sid}/events").json()
    assert summary["representation"] == "summary" and summary["next_after_seq"] is None
    message, output = summary["events"]
    assert message["kind"] == "message" and message["content_summary"] == {
        "head": "Let me look.", "lines": 1, "chars": 12, "truncated": False}
    assert output["payload_summary"] == {"head": "line 1\nline 2\nline 3\nline 4\nline 5\n", "lines": 8,
                                         "chars": len(payload), "truncated": True}
    assert output["handle"] == hashlib.sha256(payload.encode()).hexdigest() and "payload" not in output
    full = client.get(f"/v1/sessions/{sid}/events", params={"representation": "full", "after_seq": 1}).json()
    (only,) = full["events"]
    assert only["seq"] == 2 and only["payload"] == payload and only["call_id"] == "c0"


def test_events_parameter_bounds_are_422(client: TestClient) -> None:
    sid = new_session(client)
    for params in ({"limit": 0}, {"limit": 201}, {"after_seq": -1}, {"representation": "raw"},
                   {"after_seq": 2**31}, {"limit": "x"}):
        assert_problem(client.get(f"/v1/sessions/{sid}/events", params=params), 422)
    for params in ({"limit": 0}, {"limit": 101}, {"context": 51}, {"context": -1}):
        assert_problem(client.get(f"/v1/sessions/{sid}/search", params={"q": "abc"} | params), 422)
    assert_problem(client.get(f"/v1/sessions/{ABSENT}/events"), 404)
    assert_problem(client.get(f"/v1/sessions/{ABSENT}/search", params={"q": "abc"}), 404)
    assert client.get(f"/v1/sessions/{sid}/events", params={"after_seq": 10**6}).json()["events"] == []


# --- scope: tenants and sessions ---------------------------------------------------------

def test_search_never_crosses_sessions(client: TestClient) -> None:
    mine, other = new_session(client), new_session(client)
    outputs(client, other, *["leak_marker_zz in other\n"] * 30)
    (seq,) = outputs(client, mine, "leak_marker_zz in mine\n")
    found = search(client, mine, "leak_marker_zz", limit=1)
    assert [h["seq"] for h in found["hits"]] == [seq] and found["next_cursor"] is None
    assert all(e["seq"] <= 2 for e in client.get(f"/v1/sessions/{mine}/events").json()["events"])


def test_another_tenants_events_and_search_are_404_like_absent(app_client: TestClient, two: Any) -> None:  # noqa: F811
    a, b = two
    sid, _ = session_with_output(app_client, a, "tenant_a_secret_marker\n")
    assert app_client.get(f"/v1/sessions/{sid}/search", params={"q": "tenant_a_secret_marker"},
                          headers=a).json()["hits"][0]["seq"] == 3
    for tail in ("/events", "/events?representation=full", "/search?q=tenant_a_secret_marker"):
        theirs = app_client.get(f"/v1/sessions/{sid}{tail}", headers=b)
        absent = app_client.get(f"/v1/sessions/{ABSENT}{tail}", headers=b)
        _same_problem(theirs, absent, absent_id=ABSENT, real_id=sid)
    b_sid, _ = session_with_output(app_client, b, "b's own\n")
    assert app_client.get(f"/v1/sessions/{b_sid}/search", params={"q": "tenant_a_secret_marker"},
                          headers=b).json()["hits"] == []


def test_deleting_a_session_deletes_its_index(client: TestClient) -> None:
    sid = new_session(client)
    outputs(client, sid, "gone_after_delete_marker\n")
    assert client.delete(f"/v1/sessions/{sid}").status_code == 200
    engine = client.app.state.ctxd.engine  # type: ignore[attr-defined]
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM event_texts WHERE session_id = :s"), {"s": sid}).scalar() == 0
        if engine.dialect.name == "sqlite":
            assert conn.execute(sa.text("SELECT count(*) FROM event_texts_fts WHERE event_texts_fts MATCH "
                                        "'\"gone_after_delete_marker\"'")).scalar() == 0
    other = new_session(client)
    assert search(client, other, "gone_after_delete_marker")["hits"] == []


# --- the recall tool -------------------------------------------------------------------

PROFILES = qwen3_variant("qwen3-recall", recall=True)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def recall_client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    yield from recall_app(request, tmp_path_factory, PROFILES)


def test_recall_tool_is_declared_last_counted_and_stable(recall_client: TestClient, qwen3_ids) -> None:
    client = recall_client
    profiles = {p["name"]: p for p in client.get("/v1/profiles").json()["profiles"]}
    assert profiles["qwen3-recall"]["recall"] is True and profiles["qwen3"]["recall"] is False
    sid, plain = new_session(client, profile="qwen3-recall"), new_session(client)
    for s in (sid, plain):
        outputs(client, s, "some output\n")
    with_tool = client.get(f"/v1/sessions/{sid}/request").json()
    without = client.get(f"/v1/sessions/{plain}/request").json()
    assert with_tool["request"]["tools"] == [*SESSION["tools"], RECALL_TOOL]
    assert without["request"]["tools"] == SESSION["tools"]
    # counted exactly, under tools: the difference is the tool's tokens, nowhere else
    assert with_tool["manifest"]["tokens"]["total"] == len(qwen3_ids(with_tool["request"]))
    by_role, base = with_tool["manifest"]["tokens"]["by_role"], without["manifest"]["tokens"]["by_role"]
    assert by_role["tools"] > base["tools"] and {k: v for k, v in by_role.items() if k != "tools"} == \
        {k: v for k, v in base.items() if k != "tools"}
    # byte-identical on a second GET; the root unchanged by a new event
    again = client.get(f"/v1/sessions/{sid}/request")
    assert again.json()["request"] == with_tool["request"]
    outputs(client, sid, "more\n", start=1)
    later = client.get(f"/v1/sessions/{sid}/request").json()
    assert later["request"]["tools"] == with_tool["request"]["tools"]
    assert later["request"]["messages"][0] == with_tool["request"]["messages"][0]
    for fmt in ("anthropic", "tokens"):
        assert client.get(f"/v1/sessions/{sid}/request", params={"format": fmt}).status_code == 200


def test_a_session_declaring_recall_itself_keeps_its_own(recall_client: TestClient) -> None:
    own = {"type": "function", "function": {"name": "recall", "description": "mine",
                                            "parameters": {"type": "object", "properties": {}}}}
    sid = new_session(recall_client, profile="qwen3-recall", tools=[*SESSION["tools"], own])
    outputs(recall_client, sid, "x\n")
    tools = recall_client.get(f"/v1/sessions/{sid}/request").json()["request"]["tools"]
    assert [t["function"]["name"] for t in tools] == ["bash", "recall"] and tools[1] == own


def test_recall_setting_must_be_a_boolean(tmp_path: Path) -> None:
    from app.tokenizers.profiles import load_profiles

    bad = tmp_path / "bad.toml"
    bad.write_text(qwen3_variant("qwen3-recall", recall="false"), encoding="utf-8")
    with pytest.raises(ValueError, match="recall must be true or false"):
        load_profiles(bad)
    assert load_profiles()["qwen3"].recall is False


def _readme_helper() -> Any:
    """``run_recall`` exactly as README "Recall" gives it."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("```python\nimport httpx\n\n\ndef run_recall")
    code = readme[start + len("```python\n"):readme.index("```", start + 10)]
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the repository's own README)
    return namespace["run_recall"]


def test_the_readme_helper_executes_recall_calls(client: TestClient) -> None:
    run_recall = _readme_helper()
    sid = new_session(client)
    (seq,) = outputs(client, sid, "a\nb\nc\ndef evicted_helper_fn():\n    return 1\n")
    post(client, sid, {"event_id": "n1", "kind": "step", "text": "call evicted_helper_fn next"})
    text = run_recall(client, sid, {"query": "evicted_helper_fn", "context": 1})
    handle = hashlib.sha256(b"a\nb\nc\ndef evicted_helper_fn():\n    return 1\n").hexdigest()
    assert text == (f"seq {seq + 1} step, text lines 1:1:\ncall evicted_helper_fn next\n"
                    f"seq {seq} tool_result, handle {handle[:12]} lines 3:5:\nc\ndef evicted_helper_fn():\n    return 1\n")
    assert run_recall(client, sid, {"handle": handle[:12], "lines": "4:4"}) == "def evicted_helper_fn():\n"
    assert run_recall(client, sid, {"query": "no_such_identifier"}) == "no match"
    assert run_recall(client, sid, {"query": "ab"}).startswith("recall failed (422): q must have at least 3")
    assert run_recall(client, sid, {"handle": "f" * 12}).startswith("recall failed (404)")
