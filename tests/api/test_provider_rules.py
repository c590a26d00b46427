"""README "Provider rules": every wire format and profile gets a body its provider or
serving engine accepts, and the count is what that engine renders for the body served.

Oracles are independent of ctxd's code: the official Qwen3 tokenizer's
``apply_chat_template`` on the openai body as vLLM prepares it (tests/served.py), and
mistral-common's own ``ChatCompletionRequest.from_openai`` + ``encode_chat_completion`` on
the served body as vLLM's Mistral path prepares it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import create_app
from app.settings import Settings
from app.tokenizers.mistral import TOOL_BRIDGE
from tests.api.test_api import SESSION, assert_problem, new_session, post
from tests.served import vllm_ids, vllm_messages, vllm_mistral_ids

PROFILES = ["qwen3", "mistral-tekken"]
LONG_ID = "portkey-6aa6db90-1b84-4155-9f32-f658c97d6b1b"  # 44 characters


@pytest.fixture(scope="module")
def sqlite_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(data_dir=tmp_path_factory.mktemp("rules"))),
                    raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def mistral_tokenizer() -> Any:
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from app.tokenizers.mistral import default_tekken_path

    return MistralTokenizer.from_file(default_tekken_path())


@pytest.fixture(scope="module")
def served_ids(qwen3_tokenizer: Any, mistral_tokenizer: Any) -> Any:
    """profile, openai body -> the ids its serving engine renders for that body."""

    def ids(profile: str, body: dict[str, Any]) -> list[int]:
        if profile == "mistral-tekken":
            return vllm_mistral_ids(mistral_tokenizer, body)
        return vllm_ids(qwen3_tokenizer, body)

    return ids


def user(event_id: str, text: str) -> dict[str, Any]:
    return {"event_id": event_id, "kind": "message", "role": "user", "content": text}


def call(event_id: str, call_id: str, arguments: str, *, name: str = "bash", content: str = "") -> dict[str, Any]:
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": content,
            "tool_calls": [{"call_id": call_id, "name": name, "arguments": arguments}]}


def said(event_id: str, text: str) -> dict[str, Any]:
    return {"event_id": event_id, "kind": "message", "role": "assistant", "content": text}


def output(event_id: str, call_id: str, payload: str) -> dict[str, Any]:
    return {"event_id": event_id, "kind": "tool_result", "call_id": call_id, "payload": payload, "exit_code": 0}


def session_with(client: TestClient, profile: str, *events: dict[str, Any]) -> str:
    sid = new_session(client, profile=profile)
    r = post(client, sid, *events)
    assert r.status_code == 200, r.text
    return sid


def served(client: TestClient, sid: str) -> dict[str, dict[str, Any]]:
    out = {}
    for fmt in ("openai", "anthropic", "tokens"):
        r = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
        assert r.status_code == 200, r.text
        out[fmt] = r.json()
    return out


def assert_exact(got: dict[str, dict[str, Any]], profile: str, served_ids: Any) -> int:
    """Every format's manifest total and the tokens body equal the engine's render of the
    openai body; returns that count."""
    expected = served_ids(profile, got["openai"]["request"])
    assert got["tokens"]["request"]["prompt_token_ids"] == expected
    assert {got[f]["manifest"]["tokens"]["total"] for f in got} == {len(expected)}
    return len(expected)


# --- anthropic: a final assistant text never ends in whitespace (issue 8, item 1) ------

ENDS_ON_ASSISTANT = (user("u1", "Please look at the repo."), call("a1", "c1", '{"command": "ls"}'),
                     output("r1", "c1", "a.py\n"), said("a2", "I listed the files. \n"))


@pytest.mark.parametrize("profile", PROFILES)
def test_final_assistant_text_is_trimmed_in_every_format(client: TestClient, served_ids: Any, profile: str) -> None:
    """Before: the anthropic body ended with "I listed the files. \\n" (Anthropic: 400) and the
    mistral-tekken GET was a 500 (mistral-common refuses a final assistant message)."""
    got = served(client, session_with(client, profile, *ENDS_ON_ASSISTANT))
    last = got["anthropic"]["request"]["messages"][-1]
    assert last["role"] == "assistant" and last["content"][-1]["text"] == "I listed the files."
    assert got["openai"]["request"]["messages"][-1]["content"] == "I listed the files."
    assert_exact(got, profile, served_ids)
    item = next(i for i in got["openai"]["manifest"]["items"] if i["event_id"] == "a2")
    assert item["transforms"] == [{"name": "trim_trailing_whitespace", "note": "trailing whitespace of the text trimmed"}]
    assert any("prefill" in w for w in got["anthropic"]["manifest"]["layout_warnings"])
    if profile == "mistral-tekken":  # a continuation: no </s> after the text, "prefix" as the Mistral API wants
        assert got["openai"]["request"]["messages"][-1]["prefix"] is True
        assert got["tokens"]["request"]["prompt_token_ids"][-1] != 2


def test_trimmed_text_stays_the_same_when_the_turn_is_no_longer_last(client: TestClient) -> None:
    """The text is trimmed wherever the message stands, so it does not change under the
    cache when a later event follows it."""
    sid = session_with(client, "qwen3", *ENDS_ON_ASSISTANT)
    first = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]["messages"]
    post(client, sid, user("u2", "Now read a.py."))
    second = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]["messages"]
    assert second[: len(first)] == first and second[len(first) - 1]["content"] == "I listed the files."


# --- openai: tool-call ids at most 40 characters (issue 8, item 1) ---------------------

@pytest.mark.parametrize("profile", PROFILES)
def test_long_tool_call_id_is_mapped_on_the_call_and_its_result(client: TestClient, served_ids: Any,
                                                               profile: str) -> None:
    """Before: the 44-character id went into the openai body as is (OpenAI: 400, string too long)."""
    sid = session_with(client, profile, user("u1", "List files."), call("a1", LONG_ID, '{"command": "ls"}'),
                       output("r1", LONG_ID, "a.py\n"))
    got = served(client, sid)
    messages = got["openai"]["request"]["messages"]
    call_id = messages[-2]["tool_calls"][0]["id"]
    assert messages[-1]["tool_call_id"] == call_id and call_id != LONG_ID
    if profile == "qwen3":
        assert call_id == "call_" + hashlib.sha256(LONG_ID.encode()).hexdigest()[:32]  # 37 characters
    else:  # mistral-common v3 ids: 9 alphanumerics
        assert len(call_id) == 9 and call_id.isalnum()
    again = client.get(f"/v1/sessions/{sid}/request?format=openai").json()["request"]["messages"]
    assert again[-1]["tool_call_id"] == call_id, "deterministic"
    uses = [b for m in got["anthropic"]["request"]["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses[0]["id"] == LONG_ID  # Anthropic's rule is the character set, which it meets
    assert_exact(got, profile, served_ids)


FRAME = 29  # qwen3 tokens of the untrusted-data frame around the tool output (app/domain/framing.py)


def test_long_id_does_not_change_the_qwen3_count(client: TestClient) -> None:
    """Qwen3's template renders no tool-call id: the mapping is count-neutral."""
    totals = set()
    for call_id in (LONG_ID, "c1"):
        sid = session_with(client, "qwen3", call("a1", call_id, '{"command": "ls"}'), output("r1", call_id, "a.py\n"))
        totals.add(client.get(f"/v1/sessions/{sid}/request").json()["manifest"]["tokens"]["total"])
    assert len(totals) == 1


# --- tool-call arguments are a JSON object in every body (issue 8, item 2) -------------

def arguments_session(client: TestClient, profile: str, arguments: str) -> dict[str, dict[str, Any]]:
    return served(client, session_with(client, profile, user("u1", "List files."), call("a1", "c1", arguments),
                                       output("r1", "c1", "a.py\n"), user("u2", "Continue.")))


def sent_arguments(got: dict[str, dict[str, Any]]) -> str:
    return next(c["function"]["arguments"] for m in got["openai"]["request"]["messages"] for c in m.get("tool_calls") or [])


def test_empty_arguments_count_what_vllm_renders(client: TestClient, qwen3_tokenizer: Any, served_ids: Any) -> None:
    """X = "": vLLM renders "{}". Before: ctxd counted 242 (the template printed nothing) where
    vLLM renders 243 for this session (the issue's session: 233 against 234); 272 since the
    tool output is framed (29 tokens, issue 11 item 7), still what vLLM renders."""
    got = arguments_session(client, "qwen3", "")
    assert sent_arguments(got) == "{}"
    assert assert_exact(got, "qwen3", served_ids) == 243 + FRAME
    assert got["openai"]["manifest"]["tokens"]["total"] == len(vllm_ids(qwen3_tokenizer, got["openai"]["request"]))
    assert not any("arguments" in w for w in got["openai"]["manifest"]["layout_warnings"])


@pytest.mark.parametrize("arguments, wrapped_total", [('"ls"', 248), ('{"command": "ls', 250), ("[1, 2]", 251)])
def test_arguments_that_are_not_an_object_are_wrapped(client: TestClient, served_ids: Any, arguments: str,
                                                      wrapped_total: int) -> None:
    """X = "\\"ls\\"": before, the body carried "\\"ls\\"" verbatim and ctxd counted 244 where
    vLLM renders 243 (it coerces a non-object to {}); a cut-off object went into the body
    verbatim and made vLLM versions that parse history arguments refuse every later request.
    Now the body carries {"arguments": <the text>} with a layout warning, and the count is
    what vLLM renders for that body."""
    got = arguments_session(client, "qwen3", arguments)
    assert json.loads(sent_arguments(got)) == {"arguments": arguments}
    assert assert_exact(got, "qwen3", served_ids) == wrapped_total + FRAME
    assert any("not a JSON object" in w for w in got["openai"]["manifest"]["layout_warnings"])
    uses = [b for m in got["anthropic"]["request"]["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses[0]["input"] == {"arguments": arguments}, "every format sees the same value"
    item = next(i for i in got["openai"]["manifest"]["items"] if i["event_id"] == "a1")
    assert item["transforms"] == [{"name": "arguments_object", "note": 'call c1: arguments sent as {"arguments": <the text>}'}]


def test_raw_arguments_stay_in_the_log(client: TestClient) -> None:
    sid = session_with(client, "qwen3", call("a1", "c1", '{"command": "ls'), output("r1", "c1", "x"))
    note = client.get(f"/v1/sessions/{sid}").json()
    assert note["events"] == 2  # the event itself is unchanged; only the request carries the wrapped form


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=st.one_of(st.text(max_size=40), st.sampled_from(
    ["", " ", "{}", "{\"a\": NaN}", "[]", "null", "1e999", "{\"a\": \"\\ud83d\"}", "{\"a\":1,\"a\":2}", "\"{}\""]),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2).map(json.dumps)))
def test_every_served_arguments_string_is_an_object_and_counts_exactly(sqlite_only: TestClient, served_ids: Any,
                                                                       profile: str, arguments: str) -> None:
    """The invariant on arbitrary argument strings: every ``arguments`` string of the
    openai body parses to a JSON object, and the count is the engine's render of the body."""
    got = arguments_session(sqlite_only, profile, arguments)
    for m in got["openai"]["request"]["messages"]:
        for c in m.get("tool_calls") or []:
            assert isinstance(json.loads(c["function"]["arguments"]), dict)
    vllm_messages(got["openai"]["request"]["messages"], strict=True)
    assert_exact(got, profile, served_ids)


# --- chat_template_kwargs (issue 8, item 2) ------------------------------------------

def test_qwen3_nothink_counts_and_sends_its_template_kwargs(client: TestClient, qwen3_tokenizer: Any,
                                                           served_ids: Any) -> None:
    events = (user("u1", "List files."), call("a1", "c1", '{"command": "ls"}'), output("r1", "c1", "a.py\n"))
    plain = served(client, session_with(client, "qwen3", *events))
    nothink = served(client, session_with(client, "qwen3-nothink", *events))
    assert "chat_template_kwargs" not in plain["openai"]["request"]
    assert nothink["openai"]["request"]["chat_template_kwargs"] == {"enable_thinking": False}
    total = assert_exact(nothink, "qwen3", served_ids)  # vllm_ids passes the body's kwargs to the template
    assert total == plain["openai"]["manifest"]["tokens"]["total"] + 4  # "<think>\n\n</think>\n\n"
    assert nothink["tokens"]["request"]["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "chat_template_kwargs" not in nothink["anthropic"]["request"]
    manifest = nothink["openai"]["manifest"]
    assert manifest["tokens"]["by_role"]["observations"] == plain["openai"]["manifest"]["tokens"]["by_role"][
        "observations"] + 4


# --- mistral-tekken: the body served is the one counted ---------------------------------

def test_mistral_served_body_is_what_v3_renders(client: TestClient, served_ids: Any) -> None:
    """Text beside tool calls is dropped in the body too (vLLM's mistral-common would refuse
    it), ids are the 9-character ones counted, an empty assistant turn is not sent, and a
    user message never follows a tool message straight (the bridge assistant text goes
    between: rule M4; before, the strictest Mistral servers answered 400 "Unexpected role
    'user' after role 'tool'")."""
    sid = session_with(client, "mistral-tekken", user("u1", "List files."),
                       call("a1", "call-1", '{"command": "ls"}', content="Let me look."),
                       output("r1", "call-1", "a.py\n"), said("a2", " \n"), user("u2", "Continue."))
    got = served(client, sid)
    messages = got["openai"]["request"]["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == 2 and assistant[0]["content"] == ""
    assert assistant[1] == {"role": "assistant", "content": TOOL_BRIDGE}
    assert len(assistant[0]["tool_calls"][0]["id"]) == 9
    roles = [m["role"] for m in messages]
    assert all(not (a == "tool" and b == "user") for a, b in itertools.pairwise(roles)), roles
    assert any("text dropped" in w for w in got["openai"]["manifest"]["layout_warnings"])
    assert_exact(got, "mistral-tekken", served_ids)


def test_mistral_leaf_user_merged_into_the_trunk_has_non_negative_roles(client: TestClient, served_ids: Any) -> None:
    """Before: 500 (a negative observations count): v3 merges a leaf user message that
    follows the trunk into the trunk's [INST] block, which carries the system prompt."""
    got = served(client, session_with(client, "mistral-tekken", user("u1", "Please fix the bug."),
                                      {"event_id": "s1", "kind": "step", "text": "Read the failing test."}))
    tokens = got["openai"]["manifest"]["tokens"]
    assert min(tokens["by_role"].values()) >= 0 and sum(tokens["by_role"].values()) == tokens["total"]
    assert_exact(got, "mistral-tekken", served_ids)


# --- no layout breaks a profile's rules, and no rule breach is a 500 --------------------

SHAPES: dict[str, tuple[dict[str, Any], ...]] = {
    "ends on assistant text": (said("a1", "Done."),),
    "whitespace-only assistant": (said("a1", "  \n"),),
    "assistant after assistant": (said("a1", "one"), said("a2", "two ")),
    "user after user": (user("u1", "hi"), user("u2", "there")),
    "invalid call name": (call("a1", "c1", "{}", name="rm -rf"), output("r1", "c1", "x")),
    "dotted call id": (call("a1", "functions.bash:0", "{}"), output("r1", "functions.bash:0", "x")),
    "empty result": (call("a1", "c1", "{}"), output("r1", "c1", "")),
    "text and calls, then text": (call("a1", "c1", "{}", content="look"), output("r1", "c1", "x"), said("a2", "ok")),
    "think tags": (said("a1", "<think>x</think>"),),
    "leading newlines": (said("a1", "\n\nhello"),),
    "user after a tool result": (call("a1", "c1", "{}"), output("r1", "c1", "x"), user("u1", "now run the tests")),
    "step after a tool result": (call("a1", "c1", "{}"), output("r1", "c1", "x"),
                                 {"event_id": "s1", "kind": "step", "text": "Run the tests."}),
    "parallel calls": ({"event_id": "a1", "kind": "message", "role": "assistant", "content": "",
                        "tool_calls": [{"call_id": "p1", "name": "bash", "arguments": "{}"},
                                       {"call_id": "p2", "name": "bash", "arguments": "x"}]},
                       output("r2", "p2", "two"), output("r1", "p1", "one"), user("u1", "go on")),
}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_structural_shapes_lay_out_validly(sqlite_only: TestClient, served_ids: Any, profile: str, shape: str) -> None:
    """Each shape was a 500 on mistral-tekken before (mistral-common's validator: final
    assistant, invalid function name, negative role counts) or an invalid body elsewhere."""
    got = served(sqlite_only, session_with(sqlite_only, profile, *SHAPES[shape]))
    assert_exact(got, profile, served_ids)
    body = got["openai"]["request"]
    for m in body["messages"]:
        for c in m.get("tool_calls") or []:
            assert len(c["id"]) <= 40 and c["function"]["name"].replace("_", "").replace("-", "").isalnum()
        assert m["role"] != "assistant" or m["content"] or m.get("tool_calls"), "no empty assistant message"
    if profile == "mistral-tekken":  # the strictest Mistral servers' order (README "Provider rules", M1 and M4)
        roles = [m["role"] for m in body["messages"]]
        assert all(b in ("tool", "assistant") for a, b in itertools.pairwise(roles) if a == "tool"), roles
        assert roles[-1] in ("user", "tool") or body["messages"][-1].get("prefix") is True, roles
    for m in got["anthropic"]["request"]["messages"]:
        for block in m["content"]:
            if block["type"] == "text":
                assert block["text"].strip()
            if block["type"] == "tool_use":
                assert isinstance(block["input"], dict) and block["name"].replace("_", "").replace("-", "").isalnum()
    final = got["anthropic"]["request"]["messages"][-1]
    if final["role"] == "assistant":
        assert final["content"][-1]["type"] != "text" or final["content"][-1]["text"] == final["content"][-1][
            "text"].rstrip()


def test_template_refusal_is_a_422_naming_the_rule(tmp_path: Path) -> None:
    """A profile whose chat template refuses the layout (a Jinja raise_exception, as the
    Mistral and Gemma Hugging Face templates do for non-alternating roles) answers 422
    problem+json with the template's message, never 500."""
    from app.tokenizers.loading import qwen3_tokenizer_dir

    tokdir = tmp_path / "strict-tok"
    shutil.copytree(qwen3_tokenizer_dir(), tokdir)
    config = json.loads((tokdir / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{%- for m in messages[1:] %}{%- if m.role == 'user' and loop.previtem is defined and "
                               "loop.previtem.role == 'user' %}{{ raise_exception('Conversation roles must alternate "
                               "user/assistant/user/assistant/...') }}{%- endif %}{%- endfor %}"
                               + config["chat_template"])
    (tokdir / "tokenizer_config.json").write_text(json.dumps(config))
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(f'[strict]\nmodel = "m"\ntokenizer = {{ kind = "hf_dir", path = "{tokdir}" }}\n'
                        "window = 32768\noutput_reserve = 4096\n")
    settings = Settings(data_dir=tmp_path / "data", profiles_path=profiles)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        sid = session_with(c, "strict", call("a1", "c1", "{}"), output("r1", "c1", "x"))
        assert c.get(f"/v1/sessions/{sid}/request").status_code == 200
        post(c, sid, user("u1", "one"), user("u2", "two"))
        body = assert_problem(c.get(f"/v1/sessions/{sid}/request"), 422)
        assert body["rule"] == "chat-template" and "must alternate" in body["reason"]


# --- rules enforced when the input arrives ----------------------------------------------

@pytest.mark.parametrize("parameters", [{"type": "nonsense"}, {"type": "string"}, {"properties": {"a": 1}}])
def test_tool_declarations_must_be_object_schemas(client: TestClient, parameters: dict[str, Any]) -> None:
    """mistral-common validates the tool schema as JSON Schema draft 7 (a 500 at GET before);
    OpenAI and Anthropic want ``"type": "object"`` at the top."""
    tool = {"type": "function", "function": {"name": "bash", "parameters": parameters}}
    assert_problem(client.post("/v1/sessions", json=SESSION | {"tools": [tool], "profile": "mistral-tekken"}), 422)


@pytest.mark.parametrize("text", ["", "  \n"])
def test_blank_user_message_is_422(client: TestClient, text: str) -> None:
    sid = new_session(client)
    body = assert_problem(post(client, sid, user("u1", text)), 422)
    assert "whitespace" in body["detail"]
    assert client.get(f"/v1/sessions/{sid}").json()["events"] == 0


# --- a user message over the observations share is cut, not pinned whole (issue 16 hardening) ----

HUGE = "\n".join(f"{i}. see module_{i}.py: function_{i} returns a list" for i in range(2400))


@pytest.mark.parametrize("profile", PROFILES)
def test_a_user_message_over_the_observations_share_is_cut_to_head_and_tail(client: TestClient, served_ids: Any,
                                                                            profile: str) -> None:
    """Before: the newest user message is pinned, so one of ~30,300 tokens (over qwen3's
    input_limit of 28,160) made every GET of the session a 422 until another user message
    came (peer fault gi-dellav/zerostack#132: an oversized message left in the history was
    refused on every later turn). Now it is cut at the observations role's share, head +
    tail around a marker naming its handle and elided lines, in every format, exactly counted."""
    sid = session_with(client, profile, user("u1", "Fix it."), call("a1", "c1", '{"command": "ls"}'),
                       output("r1", "c1", "a.py\n"), user("u2", HUGE))
    got = served(client, sid)
    assert_exact(got, profile, served_ids)
    manifest = got["openai"]["manifest"]
    item = next(i for i in manifest["items"] if i["event_id"] == "u2")
    assert (item["representation"], item["zone"]) == ("head_tail", "leaf")
    # before: elided_tokens 0 and elided_tokens_exact true for a 94 kB cut; its elided count is not computed
    assert item["tokens_known"] is False and manifest["elided_tokens_exact"] is False
    first, last = item["elided_lines"]
    handle = item["handle"]
    text = got["openai"]["request"]["messages"][-1]["content"]
    assert text.startswith("0. see module_0.py") and text.endswith("2399. see module_2399.py: function_2399 returns a list")
    assert (f"[... {last - first + 1:,} lines ({item['elided_bytes']:,} bytes) of this message elided by ctxd; the "
            f"whole message is handle {handle}: GET /v1/handles/{handle} returns it as JSON (its text is the content "
            "field); search a phrase of it to find the elided lines ...]") in text
    # the elided lines are found by search (the handle holds the JSON event, one line: ?lines= cannot reach them)
    hit = next(h for h in client.get(f"/v1/sessions/{sid}/search", params={"q": "module_1200.py"}).json()["hits"]
               if h["event_id"] == "u2")
    assert any(m["field"] == "content" and m["lines"].startswith("1201:") for m in hit["matches"]), hit
    assert 1 < first <= last < 2400 and len(text.encode()) < len(HUGE.encode()) - item["elided_bytes"] + 400
    assert manifest["tokens"]["by_role"]["observations"] <= manifest["budget"]["role_limits"]["observations"] + 512
    assert client.get(f"/v1/handles/{handle}").json()["content"] == HUGE
    # a short user message is never cut
    assert [i["event_id"] for i in manifest["items"] + manifest["elided"] if i["representation"] == "head_tail"] \
        == ["u2"]
