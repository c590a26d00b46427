"""The model-written progress record (issue 10 item 6) against a real HTTP server on
loopback (http.server in a thread) that returns scripted chat completions: each candidate
is audited as listing 2; any finding rejects it; findings are fed back at most N times;
errors end in the deterministic record.

Fault kinds from peers' threads, as tests here:
* myshell-ai/AIlice#43 (agent says "All the tests passed" after build errors) and the
  seed's own case (full suite claimed, one test ran): ``test_full_suite_claim_*``.
* amd/gaia#3730 (a check's verdict taken from the invocation, not the output):
  ``test_claim_must_match_the_output_not_the_exit_code``.
* letta#1322 (summarization request over the summarizer's context window), letta#3279
  (the summarizer's window tied to the agent's): ``test_every_request_fits_the_summarizer_cap``.
* minpeter/pss-runtime#382 (the summarize call inherited the agent's instructions):
  ``test_request_body_is_valid_for_the_provider``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from app.domain.audit import CANDIDATE_SCHEMA, audit_candidate, estimate_tokens, evidence_items, host_record
from app.services.summarizer import SummarizerConfig, request_body, summarize_record
from tests.domain_events import trace_session
from tests.traces import TRACE_FILES
from tests.unit.test_evidence import CONTRACT, seed_events

EVENTS = seed_events()
R17, R18 = 19, 22  # seqs of the r17 failure and the r18 pass


class Script:
    """Scripted answers: each entry is a candidate (dict, sent as the message content, or a
    function of the request body returning one), ``("raw", text)``, ``("status", code)``
    or ``("sleep", seconds)``; the last repeats."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []


@pytest.fixture()
def server() -> Iterator[tuple[str, list[Script]]]:
    holder: list[Script] = [Script()]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            script = holder[0]
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            answer = script.answers[min(len(script.requests) - 1, len(script.answers) - 1)]
            if callable(answer):  # a candidate computed from the request (the record so far it sends)
                answer = answer(body)
            if isinstance(answer, tuple) and answer[0] == "sleep":
                time.sleep(answer[1])
                answer = host_record(EVENTS, CONTRACT)
            if isinstance(answer, tuple) and answer[0] == "status":
                self.send_response(answer[1])
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "scripted"}}')
                return
            content = answer[1] if isinstance(answer, tuple) else json.dumps(answer)
            out = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": content}}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            try:
                self.wfile.write(out)
            except BrokenPipeError:  # the client timed out first
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1/chat/completions", holder
    finally:
        httpd.shutdown()
        httpd.server_close()


def run(server: tuple[str, list[Script]], *answers: Any, retries: int = 2, timeout: float = 5.0, **config: Any):
    url, holder = server
    holder[0] = Script(*answers)
    cfg = SummarizerConfig(url=url, model="scripted", retries=retries, timeout_seconds=timeout, **config)
    deterministic = host_record(EVENTS, CONTRACT)
    with httpx.Client() as client:
        outcome = summarize_record(client, cfg, deterministic=deterministic, events=EVENTS, contract=CONTRACT)
    return outcome, holder[0], deterministic


def good() -> dict[str, Any]:
    """A correct candidate: the host record with the model's prose, the r18 pass current."""
    c = host_record(EVENTS, CONTRACT, next_step="Inspect the patch; choose the next permitted regression check.")
    r17, r18 = c["claims"]
    r17["text"] = ("At r17 the controlled test failed: the waiter was registered and a connection became available, "
                   "but assert waiter_resumed_at_notification_check failed.")
    r18["text"] = "test_waiter_notified_on_return passed on r18 under the controlled schedule."
    r18["current"] = True
    return c


def full_suite() -> dict[str, Any]:
    """Seed 000 section 4.6.2: claims the full regression suite passed on r18 when the
    log shows only test_waiter_notified_on_return."""
    c = good()
    r18 = c["claims"][1]
    r18["text"] = "The full regression suite passed on r18."
    r18["tests"] = {"outcome": "passed", "ran": 412, "passed": 412, "failed": 0, "errors": 0, "failed_ids": []}
    r18["scope"]["selection"] = ["tests/"]
    return c


def test_correct_candidate_is_admitted(server) -> None:
    outcome, _script, _ = run(server, good())
    assert outcome.source == "model" and outcome.record == good() and outcome.requests == 1
    assert outcome.rejections == () and outcome.error is None


def test_full_suite_claim_is_rejected_every_time_then_deterministic(server) -> None:
    outcome, script, deterministic = run(server, full_suite())
    assert outcome.source == "deterministic" and outcome.record == deterministic
    assert outcome.requests == 3, "one request plus N=2 feedback rounds"
    fields = {(f.kind, f.field) for f in outcome.rejections[0]}
    assert {("contradicts_event", "claims[1].tests.ran"), ("contradicts_event", "claims[1].tests.passed"),
            ("contradicts_event", "claims[1].scope.selection"), ("contradicts_event", "claims[1].text")} <= fields
    # the findings were fed back, in plain words
    assert "claims[1].tests.ran" in script.requests[1]["body"]["messages"][1]["content"]
    assert "event 22: logged tests.ran 1, the claim says 412" in script.requests[1]["body"]["messages"][1]["content"]


def test_full_suite_claim_in_prose_alone_is_rejected(server) -> None:
    """The tuple copied exactly, the blanket success only in the text (AIlice#43's kind)."""
    c = good()
    c["claims"][1]["text"] = "All tests pass now on r18."
    findings = audit_candidate(c, events=EVENTS, contract=CONTRACT)
    assert [(f.kind, f.field) for f in findings] == [("contradicts_event", "claims[1].text")]
    c["claims"][0]["text"] = "The reproducer passed at r17."  # the r17 run failed
    assert ("contradicts_event", "claims[0].text") in {(f.kind, f.field)
                                                      for f in audit_candidate(c, events=EVENTS, contract=CONTRACT)}


def test_missing_constraint_is_rejected(server) -> None:
    c = good()
    c["constraints"] = [x for x in c["constraints"] if x["id"] != "deploy"]
    outcome, _, _ = run(server, c, retries=0)
    assert outcome.source == "deterministic" and outcome.requests == 1
    assert [(f.kind, f.field) for f in outcome.rejections[0]] == [("missing_or_altered", "constraint:deploy")]
    # loosened wording and an invented constraint are findings too
    c = good()
    c["constraints"][2]["text"] = "Avoid production deployment where possible."
    c["constraints"].append({"id": "extra", "text": "Deploys are allowed on Fridays."})
    assert {(f.kind, f.field) for f in audit_candidate(c, events=EVENTS, contract=CONTRACT)} == {
        ("missing_or_altered", "constraint:deploy"), ("no_evidence", "constraint:extra")}


def test_malformed_json_is_rejected(server) -> None:
    outcome, _script, _deterministic = run(server, ("raw", '{"contract_version": 3, "task": '), retries=1)
    assert outcome.source == "deterministic" and outcome.requests == 2
    assert outcome.rejections[0][0].kind == "schema" and "not JSON" in outcome.rejections[0][0].detail
    # valid JSON of the wrong shape is a schema finding
    outcome, _, _ = run(server, {"summary": "fixed the notification bug"}, retries=0)
    assert outcome.source == "deterministic" and outcome.rejections[0][0].kind == "schema"


def test_feedback_then_admitted(server) -> None:
    outcome, _script, _ = run(server, full_suite(), good())
    assert outcome.source == "model" and outcome.record == good() and outcome.requests == 2
    assert len(outcome.rejections) == 1


@pytest.mark.parametrize("answer", [("status", 500), ("status", 503), ("status", 401)])
def test_server_error_falls_back_to_deterministic(server, answer) -> None:
    outcome, script, deterministic = run(server, answer)
    assert outcome.source == "deterministic" and outcome.record == deterministic
    assert outcome.error == f"summarizer answered HTTP {answer[1]}"
    assert len(script.requests) == (2 if answer[1] >= 500 else 1), "one transport retry for 5xx, none for 401"


def test_timeout_falls_back_to_deterministic(server) -> None:
    started = time.monotonic()
    outcome, script, deterministic = run(server, ("sleep", 1.0), timeout=0.2)
    assert outcome.source == "deterministic" and outcome.record == deterministic
    assert outcome.error is not None and "ReadTimeout" in outcome.error
    assert len(script.requests) == 2 and time.monotonic() - started < 3


def test_unreachable_falls_back() -> None:
    cfg = SummarizerConfig(url="http://127.0.0.1:9/v1/chat/completions", timeout_seconds=0.5)
    with httpx.Client() as client:
        outcome = summarize_record(client, cfg, deterministic=host_record(EVENTS, CONTRACT), events=EVENTS,
                                   contract=CONTRACT)
    assert outcome.source == "deterministic" and "ConnectError" in (outcome.error or "")


def test_current_state_claim_needs_current_evidence() -> None:
    c = good()
    c["claims"][0]["current"] = True  # the r17 failure presented as the state of r18
    findings = audit_candidate(c, events=EVENTS, contract=CONTRACT)
    assert [(f.kind, f.field) for f in findings] == [("needs_current_evidence", "claims[0]")]
    assert "src/pool.py@r17" in findings[0].detail and "src/pool.py@r18" in findings[0].detail
    # the same r18 claim stops being current once the workspace moves on
    later = seed_events() + [type(EVENTS[0])(seq=99, event_id="w99", artifact="src/pool.py", revision=19)]
    c = good()
    c["artifacts"] = [{"artifact": "src/pool.py", "revision": 19}]
    assert [(f.kind, f.field) for f in audit_candidate(c, events=later, contract=CONTRACT)] == [
        ("needs_current_evidence", "claims[1]")]


def test_claims_without_evidence_or_contradicting_their_event() -> None:
    c = good()
    c["claims"].append({**copy.deepcopy(c["claims"][1]), "event_seq": 5})  # seq 5 is a write, not a result
    c["claims"][0]["exit_status"] = 0
    c["claims"][0]["revision"] = 18
    c["claims"][0]["scope"]["conditions"] = []  # the controlled schedule dropped
    got = {(f.kind, f.field) for f in audit_candidate(c, events=EVENTS, contract=CONTRACT)}
    assert got == {("no_evidence", "claims[2]"), ("contradicts_event", "claims[0].exit_status"),
                   ("contradicts_event", "claims[0].revision"), ("contradicts_event", "claims[0].scope.conditions"),
                   ("altered", "exit_status:19")}


def test_claim_must_match_the_output_not_the_exit_code() -> None:
    """gaia#3730's kind on a real trace: pytest piped into tail exits 0; the run failed."""
    path = next(p for p in TRACE_FILES if p.name.startswith("pvlib__pvlib-python-1072__chat"))
    contract, events = trace_session(path)
    c = host_record(events, contract)
    i = next(i for i, x in enumerate(c["claims"]) if x["tests"] and x["tests"]["outcome"] == "failed")
    assert audit_candidate(c, events=events, contract=contract) == []
    c["claims"][i]["tests"] = {**c["claims"][i]["tests"], "outcome": "passed", "passed": 1, "failed": 0,
                               "failed_ids": []}
    c["claims"][i]["text"] = "test_fuentes passed (exit 0)."
    c["claims"][i]["evidence"] = []
    kinds = {(f.kind, f.field) for f in audit_candidate(c, events=events, contract=contract)}
    assert {("contradicts_event", f"claims[{i}].tests.outcome"), ("contradicts_event", f"claims[{i}].text")} <= kinds
    assert any(k == "missing_or_altered" and f.startswith("test_name:") for k, f in kinds), "the failed id was dropped"


def test_notes_must_be_copied_not_upgraded() -> None:
    """Section 4.6.1: a record cannot turn a working hypothesis into a supported one."""
    from tests.domain_events import to_domain
    extra = to_domain([{"event_id": f"x{i}", "kind": "step", "text": "-"} for i in range(len(EVENTS))] + [
        {"event_id": "h1", "kind": "hypothesis", "key": "notify", "text": "Missed notification.", "depends_on": [19]},
        {"event_id": "o1", "kind": "obligation", "key": "api", "text": "Check API compatibility."}])[len(EVENTS):]
    events = list(EVENTS) + extra
    c = host_record(events, CONTRACT)
    assert audit_candidate(c, events=events, contract=CONTRACT) == []
    c["hypotheses"][0]["status"] = "supported"
    c["obligations"] = []
    assert {(f.kind, f.field) for f in audit_candidate(c, events=events, contract=CONTRACT)} == {
        ("missing_or_altered", "hypotheses:notify"), ("missing_or_altered", "obligations:api")}


def _strict(schema: Any) -> None:
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            assert schema["additionalProperties"] is False and sorted(schema["required"]) == sorted(schema["properties"])
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)


def test_request_body_is_valid_for_the_provider(server) -> None:
    _outcome, script, _ = run(server, good(), api_key="k-test")
    body = script.requests[0]["body"]
    assert script.requests[0]["path"] == "/v1/chat/completions" and script.requests[0]["auth"] == "Bearer k-test"
    assert set(body) == {"model", "messages", "response_format", "max_tokens", "temperature"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"] for m in body["messages"])
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "progress_record"
    assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["schema"] == CANDIDATE_SCHEMA
    _strict(CANDIDATE_SCHEMA)  # OpenAI strict mode: every property required, no others
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(CANDIDATE_SCHEMA)
    jsonschema.validate(good(), CANDIDATE_SCHEMA)
    # the official SDK sends the same body to the same endpoint and parses the answer
    import openai

    url = script.requests[0]["path"]
    sdk = openai.OpenAI(base_url=server[0].removesuffix("/chat/completions"), api_key="k-test", max_retries=0)
    completion = sdk.chat.completions.create(**body)
    assert json.loads(completion.choices[0].message.content or "") == good() and url == script.requests[1]["path"]
    assert script.requests[1]["body"] == body
    # its own instructions, never the agent's (pss-runtime#382)
    assert "progress record" in body["messages"][0]["content"]


def test_every_request_fits_the_summarizer_cap(server) -> None:
    """The largest shared trace, with a small cap: bounded chunks, each within the cap."""
    path = next(p for p in TRACE_FILES if p.name.startswith("pylint-dev__astroid-1333"))
    contract, events = trace_session(path)
    folded = [e.seq for e in events][:-20]
    deterministic = host_record(events, contract, folded_seqs=folded)
    url, holder = server
    holder[0] = Script(deterministic)
    cfg = SummarizerConfig(url=url, input_tokens=24000, max_chunks=3, retries=0)
    with httpx.Client() as client:
        outcome = summarize_record(client, cfg, deterministic=deterministic, events=events, contract=contract,
                                   folded_seqs=folded)
    assert outcome.source == "model" and outcome.requests == len(holder[0].requests) == 3
    sizes = [sum(estimate_tokens(m["content"]) for m in r["body"]["messages"]) for r in holder[0].requests]
    assert max(sizes) <= 24000, sizes
    sent = "".join(m["content"] for r in holder[0].requests for m in r["body"]["messages"])
    items = evidence_items(events, folded)
    assert "older folded event(s) are left out" in sent and len(items) > 100
    assert json.dumps(items[-1], ensure_ascii=False, separators=(",", ":")) in sent, "the newest evidence is sent"
    # a cap too small for the record itself: no request, deterministic
    cfg = SummarizerConfig(url=url, input_tokens=1024)
    with httpx.Client() as client:
        outcome = summarize_record(client, cfg, deterministic=deterministic, events=events, contract=contract,
                                   folded_seqs=folded)
    assert outcome.source == "deterministic" and outcome.requests == 0 and "does not hold" in (outcome.error or "")


def test_request_body_helper_matches_what_is_sent() -> None:
    cfg = SummarizerConfig(url="http://x", model="m", output_tokens=777)
    body = request_body(cfg, [{"role": "user", "content": "hi"}])
    assert body["max_tokens"] == 777 and body["model"] == "m" and body["temperature"] == 0
