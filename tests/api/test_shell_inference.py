"""Bindings inferred at ingest from the commands of a declared shell tool (issue 11 items
1, 2; app/services/shell_inference.py): a generic agent posts its ``bash`` calls and their
results, without bindings or writes, through /events or /messages; the server infers what
the offline adapter infers, resolves it to its own revisions, and stale reads become
historical. SQLite and PostgreSQL, real HTTP (TestClient), real tokenizers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.shell_inference import ShellStates
from app.settings import Settings
from ctxd_tools.miniswe import trajectory_events
from tests.api.test_api import BASH, new_session, post, result
from tests.api.test_content_hash_api import _trajectory
from tests.api.test_invalidation_api import bash, item, request, tool_contents, write

HEREDOC = "cat > config.yaml <<'EOF'\ntimeout: 60\nEOF"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def events(client: TestClient, sid: str) -> list[dict]:
    r = client.get(f"/v1/sessions/{sid}/events")
    assert r.status_code == 200, r.text
    return r.json()["events"]


def config_by_events(client: TestClient, **session) -> str:
    """The issue's user example as a generic agent posts it: bash calls and results only."""
    sid = new_session(client, **session)
    for n, (command, output) in enumerate([("cat config.yaml", "timeout: 30\n"), (HEREDOC, ""),
                                           ("cat config.yaml", "timeout: 60\n")], start=1):
        r = post(client, sid, bash(f"a{n}", f"c{n}", command), result(f"t{n}", f"c{n}", output))
        assert r.status_code == 200, r.text
    return sid


def test_config_example_through_events_infers_the_write_and_the_reads(client: TestClient) -> None:
    """Before: no binding, no write: the r0 read served verbatim as "current", artifacts {}.
    After: the heredoc is an inferred write (config.yaml@r1, with the text's hash) right
    before its result, the first read is a historical tombstone naming config.yaml@r0 and
    the write, the last read is current at r1 (its cat hash equals the write's)."""
    sid = config_by_events(client)
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"config.yaml": 1}
    log = events(client, sid)
    assert [e["kind"] for e in log] == ["message", "tool_result", "message", "artifact_write", "tool_result",
                                        "message", "tool_result"]
    w = log[3]
    assert (w["event_id"], w["artifact"], w["revision"], w["content_hash"]) == \
        ("infer:5:0", "config.yaml", 1, sha("timeout: 60\n"))
    out = request(client, sid)
    contents = tool_contents(out["request"])
    assert "timeout: 30" not in contents["c1"]
    t1 = item(out["manifest"], "t1")
    assert contents["c1"] == ("[ctxd tombstone: config.yaml@r0 superseded by config.yaml@r1 (write, seq 4). "
                              f"Re-read before use; output: handle {t1['handle'][:12]}]")
    assert (t1["state"], t1["superseded_by"], t1["bindings"]) == ("historical", ["config.yaml@r1"], ["config.yaml@r0"])
    assert t1["write"] == {"artifact": "config.yaml", "revision": 1, "seq": 4, "event_id": "infer:5:0",
                           "cause": "write"}
    t3 = item(out["manifest"], "t3")
    assert (t3["state"], t3["bindings"]) == ("current", ["config.yaml@r1"])
    assert "timeout: 60" in contents["c3"]
    assert out["manifest"]["invalidation"]["presented"] == ["config.yaml@r1"]
    # the precondition sees the inferred revision and hash
    r = client.post(f"/v1/sessions/{sid}/preconditions", json={"artifact": "config.yaml", "revision": 0})
    assert r.status_code == 409
    assert (r.json()["revision"], r.json()["content_hash"]) == (1, sha("timeout: 60\n"))
    r = client.post(f"/v1/sessions/{sid}/preconditions",
                    json={"artifact": "config.yaml", "content_hash": sha("timeout: 60\n")})
    assert r.status_code == 200, r.text


def test_config_example_through_openai_messages(client: TestClient) -> None:
    """The same example posted as OpenAI chat messages (POST /messages): same inference."""
    sid = new_session(client)
    messages: list[dict] = [{"role": "user", "content": "Raise the timeout to 60."}]
    for n, (command, output) in enumerate([("cat config.yaml", "timeout: 30\n"), (HEREDOC, ""),
                                           ("cat config.yaml", "timeout: 60\n")], start=1):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": output})
    r = client.post(f"/v1/sessions/{sid}/messages", params={"format": "openai"}, json={"messages": messages})
    assert r.status_code == 200, r.text
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"config.yaml": 1}
    out = request(client, sid)
    first = next(i for i in out["manifest"]["items"] + out["manifest"]["elided"]
                 if i.get("bindings") == ["config.yaml@r0"])
    assert (first["state"], first["superseded_by"]) == ("historical", ["config.yaml@r1"])
    assert first["write"]["artifact"] == "config.yaml" and first["write"]["revision"] == 1
    assert "timeout: 30" not in tool_contents(out["request"])["call_1"]
    assert "timeout: 60" in tool_contents(out["request"])["call_3"]


def test_negative_control_read_of_b_mentioning_a(client: TestClient) -> None:
    """A write of a.py (inferred) leaves the read of b.py, whose text mentions a.py, current."""
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat b.py"), result("t1", "c1", "from a import f  # a.py defines f\n"))
    post(client, sid, bash("a2", "c2", "sed -i s/f/g/ a.py"), result("t2", "c2", ""))
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"a.py": 1}
    out = request(client, sid)
    t1 = item(out["manifest"], "t1")
    assert (t1["state"], t1["bindings"]) == ("current", ["b.py@r0"])
    assert "from a import f  # a.py defines f" in tool_contents(out["request"])["c1"]
    assert out["manifest"]["invalidation"]["historical"] == 0


def test_no_shell_tool_infers_nothing(client: TestClient) -> None:
    """No declared shell tool (no tools, a tool of another name, or shell_tools: []): the
    results stay unbound and nothing is written."""
    other = {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}
    for session in ({"tools": []}, {"tools": [other]}, {"metadata": {"shell_tools": []}}):
        sid = config_by_events(client, **session) if session.get("tools") != [other] else None
        if sid is None:
            sid = new_session(client, tools=[other])
            for n, command in enumerate(["cat config.yaml", HEREDOC], start=1):
                call = {"event_id": f"a{n}", "kind": "message", "role": "assistant", "content": "", "tool_calls": [
                    {"call_id": f"c{n}", "name": "run", "arguments": json.dumps({"command": command})}]}
                assert post(client, sid, call, result(f"t{n}", f"c{n}", "x")).status_code == 200
        assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {}, session
        assert all(e["kind"] != "artifact_write" and e.get("binding") is None for e in events(client, sid)), session


def test_explicit_shell_tool_with_its_own_argument(client: TestClient) -> None:
    """metadata.shell_tools names a tool and its argument: ``run(script)`` is inferred."""
    run = {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"script": {"type": "string"}}}}}
    sid = new_session(client, tools=[run], metadata={"shell_tools": [{"name": "run", "argument": "script"}]})
    call = {"event_id": "a1", "kind": "message", "role": "assistant", "content": "", "tool_calls": [
        {"call_id": "c1", "name": "run", "arguments": json.dumps({"script": "sed -i s/a/b/ x.py"})}]}
    assert post(client, sid, call, result("t1", "c1", "")).status_code == 200
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"x.py": 1}


def test_a_child_inherits_the_metadata_that_governs_ingest(client: TestClient) -> None:
    """Before: a child of a session declaring ``run(script)`` as its shell tool (and notice
    invalidation) got metadata {}: its ``run`` results were not inferred (artifacts {}) and
    its stale reads were tombstoned. After: the child takes the parent's ``shell_tools`` and
    ``invalidation`` (not the parent's other keys) unless its create body gives them."""
    run = {"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"script": {"type": "string"}}}}}
    shell_tools = [{"name": "run", "argument": "script"}]
    parent = new_session(client, tools=[run], metadata={"shell_tools": shell_tools, "invalidation": "notice",
                                                        "team": "parser"})

    def child(**body: object) -> str:
        r = client.post(f"/v1/sessions/{parent}/children", json={"goal": "Raise the timeout.", **body})
        assert r.status_code == 201, r.text
        sid: str = r.json()["id"]
        for n, (command, output) in enumerate([("cat config.yaml", "timeout: 30\n"), (HEREDOC, "")], start=1):
            call = {"event_id": f"a{n}", "kind": "message", "role": "assistant", "content": "", "tool_calls": [
                {"call_id": f"c{n}", "name": "run", "arguments": json.dumps({"script": command})}]}
            assert post(client, sid, call, result(f"t{n}", f"c{n}", output)).status_code == 200
        return sid

    inherited = child()
    described = client.get(f"/v1/sessions/{inherited}").json()
    assert described["metadata"] == {"shell_tools": shell_tools, "invalidation": "notice"}
    assert described["artifacts"] == {"config.yaml": 1}
    assert item(request(client, inherited)["manifest"], "t1")["state"] == "historical"
    assert "timeout: 30" in tool_contents(request(client, inherited)["request"])["c1"], "notice: kept verbatim"
    off = child(metadata={"shell_tools": [], "team": "child"})
    assert client.get(f"/v1/sessions/{off}").json()["metadata"] == {"shell_tools": [], "invalidation": "notice",
                                                                     "team": "child"}
    assert client.get(f"/v1/sessions/{off}").json()["artifacts"] == {}
    tombstone = child(metadata={"invalidation": "tombstone"})
    assert client.get(f"/v1/sessions/{tombstone}").json()["metadata"] == {"shell_tools": shell_tools,
                                                                          "invalidation": "tombstone"}
    contents = tool_contents(request(client, tombstone)["request"])
    assert "timeout: 30" not in contents["c1"]
    assert contents["c1"].startswith("[ctxd tombstone: config.yaml@r0 superseded by config.yaml@r1 (write, seq 4). ")


def test_bad_shell_tools_metadata_is_422(client: TestClient) -> None:
    for bad in ("bash", [{"name": "bash"}], [{"name": "bash", "argument": 3}], [{"name": "", "argument": "c"}]):
        r = client.post("/v1/sessions", json={"contract": {"goal": "g"}, "tools": [BASH],
                                              "metadata": {"shell_tools": bad}})
        assert r.status_code == 422, (bad, r.text)


def test_client_supplied_bindings_and_writes_are_kept(client: TestClient) -> None:
    """A result with a binding keeps it as given (no inferred read of config.yaml); a result
    right after the client's own artifact_write gets no second write."""
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat config.yaml"),
         result("t1", "c1", "timeout: 30\n", binding={"artifact": "settings/main", "kind": "file"}))
    post(client, sid, bash("a2", "c2", "sed -i s/30/60/ config.yaml"), write("w1", "config.yaml"),
         result("t2", "c2", ""))
    log = events(client, sid)
    assert log[1]["binding"]["artifact"] == "settings/main"
    assert [e["event_id"] for e in log if e["kind"] == "artifact_write"] == ["w1"]
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"config.yaml": 1}


def test_unparsed_command_gets_the_unknown_binding(client: TestClient) -> None:
    """A command tree-sitter-bash does not parse: binding {artifact "*", kind unknown},
    nothing written (the adapter's rule)."""
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", "cat config.yaml && (echo oops"), result("t1", "c1", "", exit_code=2))
    log = events(client, sid)
    assert log[1]["binding"] == {"artifact": "*", "kind": "unknown", "range": None, "revision": 0}
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {}
    t1 = item(request(client, sid)["manifest"], "t1")
    assert (t1["bindings"], t1["state"]) == (["unknown effect"], "unknown")


def test_no_hash_without_a_successful_exit(client: TestClient) -> None:
    """No exit code (or a failing one): the write and the read carry no content hash."""
    sid = new_session(client)
    post(client, sid, bash("a1", "c1", HEREDOC), {"event_id": "t1", "kind": "tool_result", "call_id": "c1",
                                                  "payload": ""})
    post(client, sid, bash("a2", "c2", "cat config.yaml"), result("t2", "c2", "timeout: 60\n", exit_code=1))
    log = events(client, sid)
    assert log[1]["kind"] == "artifact_write" and "content_hash" not in log[1]
    assert "content_hash" not in log[4]["binding"]


def test_server_inference_equals_the_adapter(client: TestClient) -> None:
    """The adapter's content-hash example (tests/api/test_content_hash_api.py) posted as
    recorded, without its inferred events: the server infers the same revisions and states,
    including the external change revealed by a cat read's hash."""
    traj = _trajectory([("cat a.py", "x = 1\n", 0), ("cat > a.py <<'EOF'\nx = 2\nEOF", "", 0),
                        ("cat a.py", "x = 2\n", 0), ("sed -i 's/2/3/' a.py", "", 0), ("cat a.py", "x = 3\n", 0),
                        ("cat b.py", "import a  # a.py says x = 3\n", 0), ("cat a.py", "x = 4\n", 0)])
    states = {}
    for infer in (True, False):
        sid = new_session(client)
        r = post(client, sid, *trajectory_events(traj, infer_bindings=infer))
        assert r.status_code == 200, r.text
        assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"a.py": 3}
        manifest = request(client, sid)["manifest"]
        states[infer] = {e: (item(manifest, e)["state"], item(manifest, e).get("superseded_by"))
                         for e in ("m0003-tool", "m0007-tool", "m0011-tool", "m0013-tool", "m0015-tool")}
    assert states[False] == states[True] == {
        "m0003-tool": ("historical", ["a.py@r1"]), "m0007-tool": ("historical", ["a.py@r2"]),
        "m0011-tool": ("historical", ["a.py@r3"]), "m0013-tool": ("current", None),
        "m0015-tool": ("current", None)}


def test_state_survives_batches_and_a_new_process(client: TestClient) -> None:
    """A script written by a heredoc in one batch is known when ``python fix.py`` runs in a
    later one, also after the process-local state is dropped (rebuilt from the log)."""
    sid = new_session(client)
    script = "cat > fix.py <<'EOF'\nopen('src/a.py', 'w').write('y = 1\\n')\nEOF"
    post(client, sid, bash("a1", "c1", script), result("t1", "c1", ""))
    client.app.state.ctxd.shell_states.clear()  # type: ignore[attr-defined]
    post(client, sid, bash("a2", "c2", "python fix.py"), result("t2", "c2", ""))
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"fix.py": 1, "src/a.py": 1}


def test_shell_states_are_an_app_state_cache_bounded_in_bytes(tmp_path: Path) -> None:
    """Before: a module-global OrderedDict of 512 sessions, whatever the texts they hold.
    After: ``app.state.ctxd.shell_states``, a ByteLRU of ``CTXD_SHELL_STATE_BYTES`` sized by the
    texts held: a session's state over the bound is not kept (its next batch rebuilds it
    from the stored calls and still infers the copy's hash), a second session over the
    bound drops the least recently used; 0 keeps none."""
    def heredoc(name: str, text: str) -> str:
        return f"cat > {name} <<'EOF'\n{text}EOF"

    with TestClient(create_app(Settings(data_dir=tmp_path, shell_state_bytes=6000))) as c:
        states = c.app.state.ctxd.shell_states  # type: ignore[attr-defined]
        assert isinstance(states, ShellStates) and states.max_bytes == 6000
        small = new_session(c)
        post(c, small, bash("a1", "c1", heredoc("a.txt", "x\n")), result("t1", "c1", ""))
        assert [k for k, _ in states.items()] == [small] and 0 < states.current_bytes < 1000
        big, text = new_session(c), "b" * 7000 + "\n"
        post(c, big, bash("a1", "c1", heredoc("big.txt", text)), result("t1", "c1", ""))
        assert [k for k, _ in states.items()] == [small], "a state over the bound is not kept"
        post(c, big, bash("a2", "c2", "cp big.txt copy.txt"), result("t2", "c2", ""))
        copy = [e for e in events(c, big) if e["kind"] == "artifact_write" and e["artifact"] == "copy.txt"]
        assert [e["content_hash"] for e in copy] == [sha(text)], "rebuilt from the stored calls"
        second, third = new_session(c), new_session(c)
        for sid in (second, third):
            post(c, sid, bash("a1", "c1", heredoc("m.txt", "m" * 3500 + "\n")), result("t1", "c1", ""))
        assert [k for k, _ in states.items()] == [third] and states.evictions == 2, "least recently used dropped"
        assert states.current_bytes <= 6000
    with TestClient(create_app(Settings(data_dir=tmp_path / "none", shell_state_bytes=0))) as c:
        assert c.app.state.ctxd.shell_states is None  # type: ignore[attr-defined]
        sid = config_by_events(c)
        assert c.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"config.yaml": 1}


@pytest.mark.parametrize("event", [
    {"event_id": "infer:5:0", "kind": "artifact_write", "artifact": "config.yaml"},
    {"event_id": "infer:x", "kind": "message", "role": "user", "content": "hi"},
    {"event_id": "infer:", "kind": "tool_result", "call_id": "c1", "payload": "timeout: 30\n"},
], ids=["artifact_write", "message", "tool_result"])
def test_a_client_event_id_in_the_inferred_namespace_is_422(client: TestClient, event: dict) -> None:
    """Before: a client could post ``infer:5:0`` itself (200), posing as an inferred write and
    taking the id the server would give the write it infers at seq 5. After: 422
    problem+json naming the field and the reserved prefix; nothing stored. Ids that only
    look alike are still the client's."""
    sid = new_session(client)
    assert post(client, sid, bash("a1", "c1", "cat config.yaml")).status_code == 200
    before = client.get(f"/v1/sessions/{sid}").json()
    r = post(client, sid, event)
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json"), r.text
    problem = r.json()
    assert problem["errors"][0]["loc"] == ["body", "events", 0, event["kind"], "event_id"], problem
    assert "'infer:'" in problem["detail"] and "reserved" in problem["detail"], problem
    assert client.get(f"/v1/sessions/{sid}").json() == before
    alike = {**event, "event_id": "Infer:" + event["event_id"][6:] + "-client", "kind": event["kind"]}
    assert post(client, sid, alike).status_code == 200


def test_own_consecutive_writes_are_no_external_change(client: TestClient) -> None:
    """The fault of NousResearch/hermes-agent#4390 (read -> write -> write flagged the
    agent's own second edit as an external change): read, two inferred heredoc writes and a
    read of the second text: config.yaml r2, no external change, the last read current."""
    sid = new_session(client)
    steps = [("cat config.yaml", "timeout: 30\n"), (HEREDOC, ""),
             ("cat > config.yaml <<'EOF'\ntimeout: 90\nEOF", ""), ("cat config.yaml", "timeout: 90\n")]
    for n, (command, output) in enumerate(steps, start=1):
        assert post(client, sid, bash(f"a{n}", f"c{n}", command), result(f"t{n}", f"c{n}", output)).status_code == 200
    assert client.get(f"/v1/sessions/{sid}").json()["artifacts"] == {"config.yaml": 2}
    log = events(client, sid)
    assert [(e.get("binding") or {}).get("external_change") for e in log if e["kind"] == "tool_result"] == [None] * 4
    manifest = request(client, sid)["manifest"]
    assert (item(manifest, "t4")["state"], item(manifest, "t4")["bindings"]) == ("current", ["config.yaml@r2"])
    assert item(manifest, "t1")["superseded_by"] == ["config.yaml@r1"]  # the write that superseded it
