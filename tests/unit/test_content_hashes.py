"""Content hashes of bindings and writes, and when a read reveals an external change
(issue 11, "Also": a read whose content hash matches no logged write of its artifact
reveals an external change). The pure rule (app.domain.invalidation), the revisions a
replay gives (ArtifactLedger, the server's rules), and the mini-swe-agent adapter's
hashes (whole-file ``cat`` reads, writes of exactly known text)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import pytest

from app.adapters.bash_effects import SessionEffects, command_effects
from app.domain.errors import InvalidEvent
from app.domain.invalidation import (
    ArtifactLedger,
    build_graph,
    content_hash,
    known_hash_after,
    resolve_read,
    reveals_external_change,
)
from app.domain.types import ArtifactWriteEvent, Binding, ToolResultEvent
from ctxd_tools.miniswe import parse_trajectory, trajectory_events
from tests.traces import TRACES_DIR


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- the hash


def test_content_hash_is_sha256_hex_of_the_utf8_bytes() -> None:
    """One format: 64 lowercase hex digits of SHA-256 over the UTF-8 bytes (the form of a
    payload's handle, so a whole-file read's hash equals its payload's handle)."""
    assert content_hash("timeout: 30\n") == hashlib.sha256(b"timeout: 30\n").hexdigest()
    assert content_hash("é\n") == hashlib.sha256("é\n".encode()).hexdigest() != content_hash("e\n")
    assert content_hash("x") != content_hash("x\n")  # a trailing newline is content
    assert content_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_hash("\udcff") is None  # not encodable: no hash rather than a wrong one


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize(("kwargs", "expected"), [
    # current revision, whole read, a known hash that differs: an external change
    ({"read_revision": 1, "current_revision": 1, "whole": True, "read_hash": "h2", "known_hash": "h1"}, True),
    # the same hash: the file is as known
    ({"read_revision": 1, "current_revision": 1, "whole": True, "read_hash": "h1", "known_hash": "h1"}, False),
    # no hash known for the revision (a write of unknown text): nothing to contradict
    ({"read_revision": 1, "current_revision": 1, "whole": True, "read_hash": "h2", "known_hash": None}, False),
    # the read carries no hash
    ({"read_revision": 1, "current_revision": 1, "whole": True, "read_hash": None, "known_hash": "h1"}, False),
    # a range: its hash is not the file's
    ({"read_revision": 1, "current_revision": 1, "whole": False, "read_hash": "h2", "known_hash": "h1"}, False),
    # a read of an older revision (it ran before a write of its call): history, not compared
    ({"read_revision": 0, "current_revision": 1, "whole": True, "read_hash": "h2", "known_hash": "h1"}, False),
])
def test_reveals_external_change(kwargs: dict[str, Any], expected: bool) -> None:
    assert reveals_external_change(**kwargs) is expected


def test_known_hash_after_a_read() -> None:
    assert known_hash_after(2, 2, whole=True, read_hash="h3", known_hash=None) == "h3"  # adopted
    assert known_hash_after(2, 2, whole=True, read_hash="h3", known_hash="h1") == "h1"  # kept
    assert known_hash_after(2, 2, whole=False, read_hash="h3", known_hash=None) is None  # a range adopts nothing
    assert known_hash_after(1, 2, whole=True, read_hash="h3", known_hash=None) is None  # an old read neither


def test_resolve_read_compares_only_whole_reads() -> None:
    assert resolve_read("a.py", 0, "h1", revision=None, content_hash="h9", range="1:10").revision == 0
    changed = resolve_read("a.py", 0, "h1", revision=None, content_hash="h9")
    assert (changed.revision, changed.external, changed.known_hash) == (1, True, "h9")
    with pytest.raises(InvalidEvent):
        resolve_read("a.py", 0, None, revision=1, content_hash="h1")


# ---------------------------------------------------------------- scenarios (ledger + graph)


def replay(steps: list[tuple[Any, ...]]) -> tuple[ArtifactLedger, list[ArtifactWriteEvent | ToolResultEvent]]:
    """Steps ``("read", artifact, text, range)`` (a hashed read of ``text``; range None:
    whole) and ``("write", artifact, text | None)`` (None: unknown text), numbered and
    resolved as the server does. Returns the ledger and the domain events."""
    ledger = ArtifactLedger()
    events: list[ArtifactWriteEvent | ToolResultEvent] = []
    for seq, step in enumerate(steps, start=1):
        if step[0] == "write":
            h = content_hash(step[2]) if step[2] is not None else None
            events.append(ArtifactWriteEvent(seq, f"w{seq}", step[1], ledger.write(step[1], h), h))
        else:
            _, artifact, text, rng = step
            h = content_hash(text)
            revision = ledger.read(artifact, range=rng, content_hash=h).revision
            events.append(ToolResultEvent(seq, f"t{seq}", f"c{seq}", text, handle=f"{seq:064x}",
                                          binding=Binding(artifact, "file", revision, rng, h)))
    return ledger, events


def test_external_edit_between_two_reads_is_a_new_revision() -> None:
    """read A (h1) -> someone edits A outside the agent's tools -> read A (h2): A moves to
    revision 1 by an external change, and the first read becomes historical."""
    ledger, events = replay([("read", "a.py", "x = 1\n", None), ("read", "a.py", "x = 2\n", None)])
    assert [e.binding.revision for e in events if isinstance(e, ToolResultEvent)] == [0, 1]
    assert ledger.revisions == {"a.py": 1} and ledger.hashes == {"a.py": sha("x = 2\n")}
    graph = build_graph(events)
    first = graph.observation_state(1)
    assert first.state == "historical" and first.writes == ("a.py@r1",)
    assert first.superseded[0].change.cause == "external" and first.superseded[0].change.event_id == "t2"
    assert graph.observation_state(2).state == "current"


def test_own_heredoc_write_then_read_is_no_external_change() -> None:
    """read (h1) -> the agent writes the file with a heredoc (its text, h2) -> read (h2):
    the read confirms the write's hash; only the write changed the file."""
    _, events = replay([("read", "a.py", "x = 1\n", None), ("write", "a.py", "x = 2\n"),
                        ("read", "a.py", "x = 2\n", None)])
    graph = build_graph(events)
    assert [c.cause for c in graph.changes["a.py"]] == ["write"]
    assert graph.observation_state(1).writes == ("a.py@r1",) and graph.observation_state(3).state == "current"


def test_unknown_write_then_read_records_the_hash_without_an_external_change() -> None:
    """read (h1) -> sed -i (text unknown, no hash) -> read (h3): no external change (the
    hash cannot be compared), and h3 becomes the known hash of revision 1, so a later
    different read of revision 1 *is* an external change."""
    ledger, events = replay([("read", "a.py", "x = 1\n", None), ("write", "a.py", None),
                             ("read", "a.py", "x = 3\n", None)])
    assert [c.cause for c in build_graph(events).changes["a.py"]] == ["write"]
    assert ledger.revisions == {"a.py": 1} and ledger.hashes == {"a.py": sha("x = 3\n")}
    later = ledger.read("a.py", content_hash=content_hash("x = 4\n"))
    assert (later.revision, later.external) == (2, True)


def test_a_write_of_known_text_contradicted_by_a_read_is_an_external_change() -> None:
    """The agent wrote h2, the next whole read shows h3: someone changed it since."""
    _, events = replay([("write", "a.py", "x = 2\n"), ("read", "a.py", "x = 3\n", None)])
    graph = build_graph(events)
    assert [(c.revision, c.cause) for c in graph.changes["a.py"]] == [(1, "write"), (2, "external")]


def test_range_reads_are_never_compared() -> None:
    _, events = replay([("read", "a.py", "x = 1\ny = 1\n", None), ("read", "a.py", "y = 1\n", "2:2")])
    assert "a.py" not in build_graph(events).changes


def test_external_change_leaves_unrelated_artifacts_alone() -> None:
    """Negative control (seed 000 example 4.1): an external change of A marks nothing bound
    to B, even an observation of B whose text mentions A."""
    _, events = replay([("read", "b.py", "import a  # a.py: x = 1\n", None), ("read", "a.py", "x = 1\n", None),
                        ("read", "a.py", "x = 2\n", None)])
    graph = build_graph(events)
    assert graph.observation_state(1).state == "current"
    assert graph.observation_state(2).state == "historical"
    assert set(graph.changes) == {"a.py"}


# ---------------------------------------------------------------- the adapter


def test_whole_file_read_is_recognised_only_when_the_output_is_the_file() -> None:
    shows = {c: command_effects(c).shows for c in (
        "cat src/a.py", "cd /testbed/src && cat a.py", "cd src; cat a.py", "cat /tmp/x.txt",
        "cat -n src/a.py", "cat a.py b.py", "cat a.py | head -5", "cat a.py 2>&1", "echo --- && cat a.py",
        "sed -n 1,5p a.py", "head a.py", "cat $F", "cat > a.py <<'EOF'\nx\nEOF", "cd $D && cat a.py",
        "cat a.py > b.py", "cat /dev/null")}
    assert shows == {"cat src/a.py": "src/a.py", "cd /testbed/src && cat a.py": "src/a.py",
                     "cd src; cat a.py": "src/a.py", "cat /tmp/x.txt": "/tmp/x.txt"} | {
        c: None for c in shows if c not in ("cat src/a.py", "cd /testbed/src && cat a.py", "cd src; cat a.py",
                                            "cat /tmp/x.txt")}


@pytest.mark.parametrize(("command", "content"), [
    ("cat > a.py <<'EOF'\nx = '$HOME'\nEOF", "x = '$HOME'\n"),
    ("cat <<EOF > a.py\nx = 1\nEOF", "x = 1\n"),
    ("cat > a.py <<EOF\nx = \\$y\nEOF", "x = $y\n"),  # an escaped $ is literal
    ("cat > a.py <<EOF\nx = $y\nEOF", None),  # bash expands $y: the text is not known
    ("cat > a.py <<EOF\nx = `date`\nEOF", None),
    ("echo 'x = 1' > a.py", "x = 1\n"),
    ("echo -n x > a.py", "x"),
    ("printf 'x = %s\\n' 1 > a.py", "x = 1\n"),
    ("printf '%d\\n' 1 > a.py", None),  # other conversions: not reproduced
    ("tee a.py <<'EOF'\nx\nEOF", "x\n"),
    ("sed -i 's/1/2/' a.py", None),
    ("python - <<'EOF'\nopen('a.py', 'w').write('x')\nEOF", None),
])
def test_write_content_is_known_only_when_exact(command: str, content: str | None) -> None:
    call = SessionEffects().run(command)
    assert call.written == ("a.py",) and call.contents == (content,)


def test_unquoted_heredoc_with_expansions_still_feeds_the_script_analysis() -> None:
    """An unquoted here-document is no exact text, but its script is still read for writes."""
    eff = command_effects("python <<EOF\nopen('out.txt', 'w').write('$X')\nEOF")
    assert [w.artifact for w in eff.writes] == ["out.txt"]


def _trajectory(calls: list[tuple[str, str, int]], exception: str = "") -> Any:
    """A trajectory of a real trace's task with ``calls``: (command, output, returncode)."""
    data = copy.deepcopy(json.loads((TRACES_DIR / "sqlfluff__sqlfluff-2419__chat.traj.json").read_text()))
    messages = data["messages"][:2]
    for k, (command, output, rc) in enumerate(calls):
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": output,
                         "extra": {"raw_output": output, "returncode": rc, "exception_info": exception}})
    messages.append(data["messages"][-1])
    data["messages"] = messages
    return parse_trajectory(data)


def _hashes(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    out = []
    for e in events:
        if e["kind"] == "artifact_write":
            out.append((e["event_id"], e.get("content_hash")))
        elif e["kind"] == "tool_result" and e.get("binding"):
            out.append((e["event_id"], e["binding"].get("content_hash")))
    return out


def test_adapter_hashes_whole_reads_and_exact_writes() -> None:
    """read -> heredoc write -> read -> sed -i -> read, as the adapter posts it: the cat
    reads carry their output's hash, the heredoc write its text's, sed -i none; replayed
    with the server's rules, none of it is an external change."""
    traj = _trajectory([("cat a.py", "x = 1\n", 0), ("cat > a.py <<'EOF'\nx = 2\nEOF", "", 0),
                        ("cat a.py", "x = 2\n", 0), ("sed -i 's/2/3/' a.py", "", 0), ("cd /testbed && cat a.py", "x = 3\n", 0),
                        ("sed -n 1,1p a.py", "x = 3\n", 0), ("cat -n a.py", "     1\tx = 3\n", 0)])
    events = trajectory_events(traj, infer_bindings=True)
    assert _hashes(events) == [("m0003-tool", sha("x = 1\n")), ("m0004-w0", sha("x = 2\n")),
                               ("m0007-tool", sha("x = 2\n")), ("m0008-w0", None),
                               ("m0011-tool", sha("x = 3\n")), ("m0013-tool", None), ("m0015-tool", None)]
    ledger = ArtifactLedger()
    for e in events:
        if e["kind"] == "artifact_write":
            ledger.write(e["artifact"], e.get("content_hash"))
        elif e.get("binding"):
            b = e["binding"]
            assert not ledger.read(b["artifact"], range=b["range"], content_hash=b.get("content_hash")).external
    assert ledger.revisions == {"a.py": 2} and ledger.hashes == {"a.py": sha("x = 3\n")}


def test_adapter_hashes_nothing_of_a_failed_or_cut_command() -> None:
    """A non-zero exit status or an exception (a timeout): the output or the write may be
    partial, so neither is hashed. Output that held bytes not UTF-8 (U+FFFD) neither."""
    failed = trajectory_events(_trajectory([("cat a.py", "cat: a.py: No such file or directory\n", 1),
                                            ("echo x > a.py && false", "", 1)]), infer_bindings=True)
    assert [h for _, h in _hashes(failed)] == [None, None]
    cut = trajectory_events(_trajectory([("cat a.py", "x = 1\n", 0)], exception="timeout"), infer_bindings=True)
    assert [h for _, h in _hashes(cut)] == [None]
    binary = trajectory_events(_trajectory([("cat a.bin", "\x00\ufffd\n", 0)]), infer_bindings=True)
    assert [h for _, h in _hashes(binary)] == [None]
    crlf = trajectory_events(_trajectory([("cat > a.txt <<'EOF'\na\r\nEOF", "", 0)]), infer_bindings=True)
    assert _hashes(crlf) == [("m0002-w0", None)]  # a CR: the tool's text mode would show it as LF


def test_adapter_numbers_an_external_change_as_the_server_does() -> None:
    """The file changed between two cats with no write in between: the adapter's later
    explicit revision (a read before a write of its call) counts the external change."""
    traj = _trajectory([("cat a.py", "x = 1\n", 0), ("cat a.py", "x = 2\n", 0),
                        ("cat a.py && sed -i 's/2/3/' a.py", "x = 2\n", 0)])
    events = trajectory_events(traj, infer_bindings=True)
    last = [e for e in events if e["kind"] == "tool_result"][-1]
    assert last["binding"]["revision"] == 1  # r0, then r1 by the external change, then the sed -i makes r2


def test_consecutive_own_writes_never_look_external() -> None:
    """Peers' fault (hermes-agent#4390, ggcode#168: a baseline refreshed only on reads made
    the agent's own second edit look like an external change): every write moves the
    known hash, so read -> write -> unknown write -> write -> read sees no external change."""
    _, events = replay([("read", "a.py", "x = 1\n", None), ("write", "a.py", "x = 2\n"), ("write", "a.py", None),
                        ("write", "a.py", "x = 4\n"), ("read", "a.py", "x = 4\n", None)])
    graph = build_graph(events)
    assert [c.cause for c in graph.changes["a.py"]] == ["write", "write", "write"]
    assert graph.observation_state(5).state == "current"


def test_ledger_revision_of_never_stops_a_replay() -> None:
    """A revision from the future (parallel calls answered out of order) is refused by the
    server (422); a replay's ledger returns it as given and changes nothing."""
    ledger = ArtifactLedger()
    assert ledger.revision_of("a.py", revision=3) == 3 and ledger.revisions == {}
    with pytest.raises(InvalidEvent):
        ledger.read("a.py", revision=3)
    assert ledger.revision_of("a.py", content_hash="h1") == 0 and ledger.hashes == {"a.py": "h1"}


def test_hashes_on_the_32_shared_traces() -> None:
    """The figures of the README (issue 11 report): 83 of 943 read bindings and 347 of 783
    writes carry a hash; replayed with the server's rules, 5 reads confirm an earlier
    read's hash, 78 are adopted (39 after a write of unknown text), and no read reveals an
    external change (none happened in these runs: any would be a false positive)."""
    from ctxd_tools.miniswe import load_trajectory
    reads = hashed_reads = writes = hashed_writes = confirmed = adopted_after_write = external = 0
    for path in sorted(TRACES_DIR.glob("*.traj.json")):
        ledger = ArtifactLedger()
        written: set[str] = set()
        for e in trajectory_events(load_trajectory(path), infer_bindings=True):
            if e["kind"] == "artifact_write":
                writes += 1
                hashed_writes += "content_hash" in e
                assert "content_hash" not in e or re.fullmatch(r"[0-9a-f]{64}", e["content_hash"])
                ledger.write(e["artifact"], e.get("content_hash"))
                written.add(e["artifact"])
                continue
            for r in ([e["binding"]] if e.get("binding") else []) + list(e.get("conditions", {}).get("reads", [])):
                if r.get("kind") == "unknown":
                    continue
                reads += 1
                hashed_reads += "content_hash" in r
                known = ledger.hashes.get(r["artifact"])
                resolved = ledger.read(r["artifact"], revision=r.get("revision"), range=r.get("range"),
                                       content_hash=r.get("content_hash"))
                external += resolved.external
                if "content_hash" in r and not resolved.external:
                    confirmed += known is not None
                    adopted_after_write += known is None and r["artifact"] in written
    assert (reads, hashed_reads, writes, hashed_writes) == (943, 83, 783, 347)
    assert (confirmed, adopted_after_write, external) == (5, 39, 0)
