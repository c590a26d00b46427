"""Issue 16 over HTTP on SQLite and PostgreSQL: plans (versioned, appended to the leaf,
folded into the progress record at a pass, counted under task_state), retrieved documents
(next to the instruction while current, replaced by key, folded to one line with their
handle), and child sessions for sub-agents (inherit the constraints verbatim; a conclusion
returns to the parent as one observation; nothing else of the child enters the parent;
deleting a parent with children is refused)."""

from __future__ import annotations

import hashlib
import itertools
import json

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import (
    SESSION,
    assert_problem,
    assistant,
    new_session,
    post,
    result,
)
from tests.api.test_budget_api import older_history, parallel_turn, results
from tests.api.test_tenancy import app_client, two  # noqa: F401  (fixtures)


def plan(event_id: str, text: str) -> dict:
    return {"event_id": event_id, "kind": "plan", "text": text}


def document(event_id: str, key: str, text: str, source: str = "https://docs.example/api") -> dict:
    return {"event_id": event_id, "kind": "document", "key": key, "source": source, "text": text}


def user(event_id: str, text: str) -> dict:
    return {"event_id": event_id, "kind": "message", "role": "user", "content": text}


def get(client: TestClient, sid: str, fmt: str = "openai") -> dict:
    r = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
    assert r.status_code == 200, r.text
    return r.json()


def items_by_seq(manifest: dict) -> dict[int, dict]:
    return {i["seq"]: i for i in manifest["items"] + manifest["elided"]}


def count_text(client: TestClient, text: str, profile: str = "qwen3") -> int:
    state = client.app.state.ctxd
    return int(state.meters.get(state.profiles.get(profile)).count_text(text))


def accounted(manifest: dict) -> None:
    listed = [i["seq"] for i in manifest["items"] + manifest["elided"]]
    ranged = sum(r["events"] for r in manifest.get("ranges") or ())
    assert len(set(listed)) == len(listed) and len(listed) + ranged == manifest["last_seq"]


def assert_appended(cache: dict, previous_total: int) -> None:
    """The request keeps the previous one whole but for its generation prompt (Qwen3:
    ``<|im_start|>assistant\n``, 3 tokens), which a new user message replaces."""
    assert cache["common_prefix_exact"] and previous_total - 3 <= cache["common_prefix_tokens"] <= previous_total, cache
    divergence = cache["first_divergence"]
    assert divergence is None or "generation prompt" in divergence["reason"], divergence


# --------------------------------------------------------------------------- plans


def test_plan_versions_append_to_the_leaf_and_count_under_task_state(client: TestClient) -> None:
    sid = new_session(client)
    r = post(client, sid, user("u", "Fix the parser."), plan("p1", "1. reproduce\n2. fix parse()"),
             assistant("a1", "c1"), result("r1", "c1", "def parse(s):\n    return None\n"))
    assert r.status_code == 200, r.text
    first = get(client, sid)
    messages = first["request"]["messages"]
    assert messages[3] == {"role": "user", "content": "## Plan (version 1)\n1. reproduce\n2. fix parse()"}, \
        "the plan is a user message at its seq, after the turn before it"
    item = items_by_seq(first["manifest"])[2]
    assert (item["kind"], item["representation"], item["zone"]) == ("plan", "verbatim", "leaf")
    assert item["handle"] == hashlib.sha256(b"1. reproduce\n2. fix parse()").hexdigest()
    assert client.get(f"/v1/handles/{item['handle']}").content == b"1. reproduce\n2. fix parse()"
    tokens = first["manifest"]["tokens"]
    plan_tokens = count_text(client, messages[3]["content"])
    # BEFORE issue 16 the leaf was all observations; the plan's text now counts as task state
    assert tokens["by_role"]["task_state"] == tokens["by_zone"]["trunk"] + plan_tokens
    assert tokens["by_role"]["observations"] == tokens["by_zone"]["leaf"] - plan_tokens
    assert sum(tokens["by_role"].values()) == tokens["total"]

    # a new version is appended: the previous request is a prefix of the next one
    r = post(client, sid, plan("p2", "1. reproduce (done)\n2. fix parse()"))
    assert r.status_code == 200
    second = get(client, sid)
    cache = second["manifest"]["cache"]
    assert_appended(cache, first["manifest"]["tokens"]["total"])
    bodies = [m["content"] for m in second["request"]["messages"]]
    assert bodies[-1] == "## Plan (version 2)\n1. reproduce (done)\n2. fix parse()"
    assert bodies[3].startswith("## Plan (version 1)"), "the earlier version stays until a pass folds it"
    # idempotent; versions count stored plans only
    again = post(client, sid, plan("p2", "1. reproduce (done)\n2. fix parse()"))
    assert again.json()["results"][0]["status"] == "duplicate"
    assert post(client, sid, plan("p3", "2. fix parse()")).status_code == 200
    assert get(client, sid)["request"]["messages"][-1]["content"].startswith("## Plan (version 3)")
    accounted(get(client, sid)["manifest"])


def test_plan_is_folded_into_the_record_at_a_pass_and_later_versions_append(client: TestClient) -> None:
    sid = new_session(client)
    events = [user("u", "Fix the parser."), plan("p1", "1. reproduce\n2. fix parse()"),
              plan("p2", "1. reproduce (done)\n2. fix parse()\n3. run the suite"),
              *older_history("qwen3", groups=5), parallel_turn("newest", "n", 3), *results("qwen3", "n", [2000] * 3)]
    assert post(client, sid, *events).status_code == 200
    got = get(client, sid)
    manifest, trunk = got["manifest"], got["request"]["messages"][1]["content"]
    assert manifest["compaction"]["pass"], "the history is over T_hi: a pass ran"
    assert "## Plan (version 2, seq 3;" in trunk and "3. run the suite" in trunk
    assert "1. reproduce\n2. fix parse()" not in trunk, "only the latest folded version is in the record"
    seen = items_by_seq(manifest)
    assert seen[2]["representation"] == seen[3]["representation"] == "folded"
    assert all("## Plan (version" not in (m["content"] or "") for m in got["request"]["messages"][2:])
    record = client.get(f"/v1/sessions/{sid}/record").json()["record"]
    assert record["plan"] == {"seq": 3, "version": 2, "text": "1. reproduce (done)\n2. fix parse()\n3. run the suite"}
    assert {2, 3} <= set(record["folded_seqs"])
    accounted(manifest)
    # a version after the pass is appended to the leaf; the trunk (and so the prefix) stays
    assert post(client, sid, plan("p3", "3. run the suite")).status_code == 200
    after = get(client, sid)
    assert after["request"]["messages"][1]["content"] == trunk
    assert_appended(after["manifest"]["cache"], got["manifest"]["tokens"]["total"])
    assert after["request"]["messages"][-1]["content"] == "## Plan (version 3)\n3. run the suite"
    accounted(after["manifest"])


def test_a_plan_longer_than_half_the_record_budget_is_cut_around_its_handle(client: TestClient) -> None:
    """A plan of ~15,800 tokens folded at a pass made a record of 16,006 tokens against its
    budget of 1,500 (task_state over its role limit, unannounced). The record now keeps the
    plan's first and last lines within half its budget, and names the handle of the whole."""
    sid = new_session(client)
    big = "\n".join(f"{i}. step {i}: inspect module_{i}.py and fix function_{i} carefully" for i in range(600))
    events = [user("u", "Fix the parser."), plan("p1", big),
              *older_history("qwen3", groups=5), parallel_turn("newest", "n", 3), *results("qwen3", "n", [2000] * 3)]
    assert post(client, sid, *events).status_code == 200
    got = get(client, sid)
    manifest, trunk = got["manifest"], got["request"]["messages"][1]["content"]
    assert manifest["compaction"]["pass"]
    record = manifest["compaction"]["record"]
    assert record["tokens"] <= record["budget"] == 1500
    assert manifest["tokens"]["by_role"]["task_state"] <= manifest["budget"]["role_limits"]["task_state"]
    handle = items_by_seq(manifest)[2]["handle"]
    folded = client.get(f"/v1/sessions/{sid}/record").json()["record"]["plan"]["text"]
    lines = folded.split("\n")
    assert lines[0] == "0. step 0: inspect module_0.py and fix function_0 carefully"
    assert lines[-1] == "599. step 599: inspect module_599.py and fix function_599 carefully"
    marker = next(line for line in lines if line.startswith("[... "))
    cut = [line for line in big.split("\n") if line not in lines]
    assert marker == (f"[... {len(cut):,} lines ({len(chr(10).join(cut).encode()):,} bytes) of this plan cut here to "
                      f"fit the record; the whole plan is handle {handle[:12]} ...]")
    assert count_text(client, folded) <= 750 and folded in trunk
    assert client.get(f"/v1/handles/{handle[:12]}").content == big.encode()
    accounted(manifest)


# --------------------------------------------------------------------------- documents


def test_documents_sit_next_to_the_instruction_and_are_replaced_by_key(client: TestClient) -> None:
    sid = new_session(client)
    assert post(client, sid, user("u", "Use the new API."), document("d1", "api", "parse(s) -> list"),
                document("d2", "style", "Use snake_case."), assistant("a1", "c1"),
                result("r1", "c1", "def parse(s):\n    return None\n"),
                {"event_id": "s1", "kind": "step", "text": "Change parse() to return []."}).status_code == 200
    got = get(client, sid)
    contents = [m["content"] for m in got["request"]["messages"]]
    # BEFORE: a document at its seq would sit in the middle (seq 2, before the turn); AFTER: at the end
    assert contents[-3].startswith("## Retrieved document [api] from https://docs.example/api (seq 2, handle ")
    assert contents[-3].endswith("\nparse(s) -> list")
    assert contents[-2].startswith("## Retrieved document [style]") and contents[-1].startswith("Next step:")
    seen = items_by_seq(got["manifest"])
    assert (seen[2]["kind"], seen[2]["representation"], seen[2]["zone"]) == ("document", "verbatim", "leaf")
    tokens = got["manifest"]["tokens"]
    assert tokens["by_role"]["observations"] == tokens["by_zone"]["leaf"], "documents are observations"
    # a later document with the same key replaces it
    assert post(client, sid, document("d3", "api", "parse(s) -> list[str]", source="https://docs.example/v2")
                ).status_code == 200
    after = get(client, sid)
    contents = [m["content"] for m in after["request"]["messages"]]
    assert not any("parse(s) -> list\n" in c or c.endswith("parse(s) -> list") for c in contents)
    assert contents[-3].startswith("## Retrieved document [style]")
    assert contents[-2].startswith("## Retrieved document [api] from https://docs.example/v2 (seq 7")
    seen = items_by_seq(after["manifest"])
    assert seen[2]["representation"] == "superseded" and "(seq 7) replaced it" in seen[2]["why"]
    assert client.get(f"/v1/handles/{seen[2]['handle']}").content == b"parse(s) -> list"
    divergence = after["manifest"]["cache"]["first_divergence"]
    assert divergence["zone"] == "leaf" and divergence["seq"] == 2, "only the tail (documents, step) changed"
    accounted(after["manifest"])


def test_a_document_over_the_per_item_cap_is_cut_to_head_and_tail_around_its_handle(client: TestClient) -> None:
    """A retrieved document of ~37,600 tokens was pinned whole next to the instruction, so
    every GET of its session was a 422 (pinned content over input_limit) until the agent
    replaced it. It is now cut like a tool output: head + tail at the per-item cap, the
    marker naming the handle and the elided line range, which reads back the cut part."""
    sid = new_session(client)
    big = "\n".join(f"{i}. see module_{i}.py: function_{i} returns a list" for i in range(1400))
    assert post(client, sid, user("u", "Fix it."), document("d1", "api", big), assistant("a1", "c1"),
                result("r1", "c1", "ok")).status_code == 200
    got = get(client, sid)
    manifest, last = got["manifest"], got["request"]["messages"][-1]["content"]
    item = items_by_seq(manifest)[2]
    assert (item["kind"], item["representation"], item["zone"]) == ("document", "head_tail", "leaf")
    assert item["tokens_known"] is False and manifest["elided_tokens_exact"] is False
    first, end = item["elided_lines"]
    handle = item["handle"]
    assert last.startswith("## Retrieved document [api] from https://docs.example/api (seq 2, handle ")
    assert "0. see module_0.py" in last and last.endswith("1399. see module_1399.py: function_1399 returns a list")
    marker = (f"[... {end - first + 1:,} lines ({item['elided_bytes']:,} bytes) elided by ctxd; the whole document is "
              f"handle {handle}: GET /v1/handles/{handle}?lines={first}:{end} ...]")
    assert marker in last
    cut = client.get(f"/v1/handles/{handle}", params={"lines": f"{first}:{end}"}).text
    assert cut.split("\n")[0] == big.split("\n")[first - 1] and cut.rstrip("\n").split("\n")[-1] == big.split("\n")[end - 1]
    assert client.get(f"/v1/handles/{handle}").content == big.encode()
    assert manifest["tokens"]["by_role"]["observations"] <= manifest["budget"]["role_limits"]["observations"]
    accounted(manifest)
    # a short document of the same key replaces it, verbatim
    assert post(client, sid, document("d2", "api", "parse(s) -> list")).status_code == 200
    after = get(client, sid)["manifest"]
    assert items_by_seq(after)[5]["representation"] == "verbatim"
    assert items_by_seq(after)[2]["representation"] == "superseded"


def test_replaced_documents_fold_to_one_line_with_their_handle_at_a_pass(client: TestClient) -> None:
    sid = new_session(client)
    events = [user("u", "Use the new API."), document("d1", "api", "OLD API TEXT " * 20),
              document("d2", "api", "parse(s) -> list[str]"), *older_history("qwen3", groups=5),
              parallel_turn("newest", "n", 3), *results("qwen3", "n", [2000] * 3)]
    assert post(client, sid, *events).status_code == 200
    got = get(client, sid)
    manifest, messages = got["manifest"], got["request"]["messages"]
    assert manifest["compaction"]["pass"]
    trunk = messages[1]["content"]
    old = hashlib.sha256(("OLD API TEXT " * 20).encode()).hexdigest()
    assert f"- seq 2 [api] https://docs.example/api, handle {old[:12]}" in trunk
    assert "OLD API TEXT" not in json.dumps(got["request"])
    seen = items_by_seq(manifest)
    assert seen[2]["representation"] == "folded" and seen[2]["handle"] == old
    assert seen[3]["representation"] == "verbatim" and seen[3]["zone"] == "leaf", "a current document is not folded"
    assert messages[-1]["content"].startswith("## Retrieved document [api]"), "still next to the end"
    record = client.get(f"/v1/sessions/{sid}/record").json()["record"]
    assert record["documents"] == [{"seq": 2, "key": "api", "source": "https://docs.example/api", "handle": old}]
    assert 2 in record["folded_seqs"] and 3 not in record["folded_seqs"]
    accounted(manifest)


# --------------------------------------------------------------------------- children


def test_child_session_inherits_constraints_and_returns_one_conclusion(client: TestClient) -> None:
    parent = new_session(client)
    assert post(client, parent, user("u", "Rename deprecated_fn."), assistant("a1", "c1"),
                result("r1", "c1", "deprecated_fn is defined in util.py\n")).status_code == 200
    before = get(client, parent)
    r = client.post(f"/v1/sessions/{parent}/children", json={"goal": "Find every call site of deprecated_fn."})
    assert r.status_code == 201, r.text
    child = r.json()["id"]
    described = client.get(f"/v1/sessions/{child}").json()
    assert described["parent"] == parent and described["contract"] == {
        "goal": "Find every call site of deprecated_fn.", "constraints": SESSION["contract"]["constraints"],
        "contract_version": 1}
    assert described["system"] == SESSION["system"] and described["tools"] == client.get(
        f"/v1/sessions/{parent}").json()["tools"]
    assert client.get(f"/v1/sessions/{parent}").json()["children"] == [child]
    child_body = get(client, child)["request"]
    for constraint in SESSION["contract"]["constraints"]:
        assert constraint["text"] in child_body["messages"][1]["content"], "constraints verbatim in the child"
    # the other direction (mastra-ai/mastra#13881: supervisor messages leaked into the sub-agent's
    # thread): the child starts from its contract alone, none of the parent's events
    assert "Rename deprecated_fn." not in json.dumps(child_body) and "util.py" not in json.dumps(child_body)
    assert len(child_body["messages"]) == 2
    # the child explores: none of it enters the parent (VoltAgent/voltagent#1026: a sub-agent's
    # messages written into the parent's history as phantom turns; anthropics/claude-code#14118:
    # a background sub-agent's tool calls exposed in the parent's context)
    assert post(client, child, assistant("ca", "cc", content="CHILD-REASONING grep"),
                result("cr", "cc", "CHILD-OUTPUT a.py:3 b.py:9\n")).status_code == 200
    assert get(client, parent)["request"] == before["request"]
    r = post(client, child, {"event_id": "done", "kind": "conclusion", "text": "2 call sites: a.py:3, b.py:9."})
    assert r.status_code == 200 and r.json()["results"][0]["seq"] == 3
    after = get(client, parent)
    messages = after["request"]["messages"]
    assert_appended(after["manifest"]["cache"], before["manifest"]["tokens"]["total"])  # the conclusion is appended
    handle = hashlib.sha256(b"2 call sites: a.py:3, b.py:9.").hexdigest()
    assert messages[-1]["content"] == (f"## Conclusion of sub-agent session {child} (its event seq 3; handle "
                                       f"{handle[:12]})\n2 call sites: a.py:3, b.py:9.")
    assert len(messages) == len(before["request"]["messages"]) + 1, "one observation"
    assert "CHILD-" not in json.dumps(after), "the child's own events never enter the parent's requests"
    seen = items_by_seq(after["manifest"])
    assert (seen[4]["kind"], seen[4]["representation"], seen[4]["handle"]) == ("child_conclusion", "verbatim", handle)
    assert client.get(f"/v1/sessions/{parent}/handles/{handle}").content == b"2 call sites: a.py:3, b.py:9."
    assert client.get(f"/v1/sessions/{child}/handles/{handle}").content == b"2 call sites: a.py:3, b.py:9."
    tokens = after["manifest"]["tokens"]
    assert tokens["by_role"]["observations"] == tokens["by_zone"]["leaf"], "a conclusion is an observation"
    # in the child it is not rendered; its item names the parent's seq
    child_item = items_by_seq(get(client, child)["manifest"])[3]
    assert child_item["representation"] == "not_rendered" and "seq 4" in child_item["why"]
    # a duplicate conclusion returns nothing twice
    assert post(client, child, {"event_id": "done", "kind": "conclusion", "text": "2 call sites: a.py:3, b.py:9."}
                ).json()["results"][0]["status"] == "duplicate"
    assert client.get(f"/v1/sessions/{parent}").json()["last_seq"] == 4
    for fmt in ("anthropic", "tokens"):
        get(client, parent, fmt)

    # deleting a parent with children is refused and changes nothing; the child first, then it
    body = assert_problem(client.delete(f"/v1/sessions/{parent}"), 409)
    assert body["children"] == [child]
    assert get(client, parent)["request"] == after["request"]
    assert client.delete(f"/v1/sessions/{child}").status_code == 200
    assert client.get(f"/v1/sessions/{parent}").json()["children"] == []
    assert get(client, parent)["request"] == after["request"], "the returned conclusion stays with the parent"
    assert client.delete(f"/v1/sessions/{parent}").status_code == 200


def test_bad_children_and_conclusions_are_4xx_and_change_nothing(client: TestClient) -> None:
    sid = new_session(client)
    assert_problem(post(client, sid, {"event_id": "c", "kind": "conclusion", "text": "x"}), 422)
    assert_problem(client.post("/v1/sessions/nope/children", json={"goal": "g"}), 404)
    for bad in ({}, {"goal": ""}, {"goal": "  "}, {"goal": "g", "extra": 1}, {"goal": "g", "profile": "nope"},
                {"goal": "g", "metadata": {"invalidation": "maybe"}}, {"goal": "g", "system": "a\x00b"}):
        assert client.post(f"/v1/sessions/{sid}/children", json=bad).status_code == 422, bad
    for bad in (plan("p", ""), plan("p", "   "), {**plan("p", "x"), "version": 3}, document("d", "", "t"),
                document("d", "k", ""), document("d", "k", "t", source=""), document("d", "k", "t", source="a\x00"),
                {"event_id": "d", "kind": "document", "key": "k", "text": "t"}):
        assert_problem(post(client, sid, bad), 422)
    assert client.get(f"/v1/sessions/{sid}").json()["last_seq"] == 0
    assert client.get(f"/v1/sessions/{sid}").json()["children"] == []


def test_a_tenant_cannot_create_a_child_of_another_tenants_session(app_client: TestClient, two) -> None:  # noqa: F811
    a, b = two
    r = app_client.post("/v1/sessions", json=SESSION, headers=a)
    assert r.status_code == 201
    parent = r.json()["id"]
    assert_problem(app_client.post(f"/v1/sessions/{parent}/children", json={"goal": "g"}, headers=b), 404)
    r = app_client.post(f"/v1/sessions/{parent}/children", json={"goal": "g"}, headers=a)
    assert r.status_code == 201
    child = r.json()["id"]
    assert app_client.get(f"/v1/sessions/{child}", headers=b).status_code == 404
    assert app_client.post(f"/v1/sessions/{child}/events", headers=a, json={"events": [
        {"event_id": "c", "kind": "conclusion", "text": "found it"}]}).status_code == 200
    handle = hashlib.sha256(b"found it").hexdigest()
    assert app_client.get(f"/v1/handles/{handle}", headers=a).content == b"found it"
    assert app_client.get(f"/v1/handles/{handle}", headers=b).status_code == 404


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_every_format_serves_plans_documents_and_conclusions(client: TestClient, profile: str) -> None:
    sid = new_session(client, profile=profile)
    child = client.post(f"/v1/sessions/{sid}/children", json={"goal": "look"}).json()["id"]
    assert post(client, sid, user("u", "Go."), plan("p1", "1. look"), assistant("a1", "c1"),
                result("r1", "c1", "ok\n"), document("d1", "k", "doc text")).status_code == 200
    assert post(client, child, {"event_id": "c", "kind": "conclusion", "text": "looked"}).status_code == 200
    assert post(client, sid, plan("p2", "2. done"), {"event_id": "s", "kind": "step", "text": "finish"}
                ).status_code == 200
    totals = {get(client, sid, fmt)["manifest"]["tokens"]["total"] for fmt in ("openai", "anthropic", "tokens")}
    assert len(totals) == 1, "one count for every format"
    body = get(client, sid, "tokens")
    assert len(body["request"]["prompt_token_ids"]) == body["manifest"]["tokens"]["total"]
    anthropic = get(client, sid, "anthropic")["request"]
    roles = [m["role"] for m in anthropic["messages"]]
    assert all(x != y for x, y in itertools.pairwise(roles)), "user and assistant alternate (consecutive users merged)"


def test_secrets_in_plans_documents_and_conclusions_are_redacted_in_requests(client: TestClient) -> None:
    """Issue 12's redaction applies to the new texts as to messages: redacted where they
    enter requests (the parent's too), whole behind their handles."""
    from tests.secret_corpus import GH_CLASSIC

    sid = new_session(client)
    child = client.post(f"/v1/sessions/{sid}/children", json={"goal": "look"}).json()["id"]
    texts = {"p": f"1. rotate token {GH_CLASSIC}", "d": f"config: GITHUB_TOKEN={GH_CLASSIC}",
             "c": f"found {GH_CLASSIC} in .env"}
    assert post(client, sid, user("u", "Go."), plan("p", texts["p"]), document("d", "cfg", texts["d"])
                ).status_code == 200
    assert post(client, child, {"event_id": "c", "kind": "conclusion", "text": texts["c"]}).status_code == 200
    got = get(client, sid)
    assert GH_CLASSIC not in json.dumps(got["request"])
    seen = {i["kind"]: i for i in got["manifest"]["items"]}
    for kind, key in (("plan", "p"), ("document", "d"), ("child_conclusion", "c")):
        handle = seen[kind]["handle"]
        assert client.get(f"/v1/sessions/{sid}/handles/{handle}").content == texts[key].encode()


def test_plans_documents_and_returned_conclusions_are_searchable(client: TestClient) -> None:
    """Issue 14's search covers the new texts: a plan's, a document's, and in the parent the
    conclusion a child returned (the child's own events stay the child's)."""
    sid = new_session(client)
    child = client.post(f"/v1/sessions/{sid}/children", json={"goal": "look"}).json()["id"]
    assert post(client, sid, plan("p", "1. patch normalize_angle_deg"),
                document("d", "api", "def solar_zenith_fn(): ...")).status_code == 200
    assert post(client, child, assistant("ca", "cc"), result("cr", "cc", "child_only_marker here\n"),
                {"event_id": "c", "kind": "conclusion", "text": "callers of frobnicate_all: 2"}).status_code == 200

    def seqs(session: str, q: str) -> list[int]:
        r = client.get(f"/v1/sessions/{session}/search", params={"q": q})
        assert r.status_code == 200, r.text
        return [h["seq"] for h in r.json()["hits"]]

    assert seqs(sid, "normalize_angle_deg") == [1] and seqs(sid, "solar_zenith_fn") == [2]
    assert seqs(sid, "frobnicate_all") == [3], "the returned conclusion is the parent's event"
    assert seqs(sid, "child_only_marker") == [] and seqs(child, "child_only_marker") == [2]
