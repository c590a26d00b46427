"""A bounded schemathesis run against the app's OpenAPI document finds no 5xx (issue 8, Also).

Every operation of ``/openapi.json`` gets generated requests (schemathesis: its examples,
boundary and invalid values, then Hypothesis fuzzing with valid and invalid data), sent over
real HTTP to the app served by uvicorn on loopback (SQLite in a temp dir, real tokenizers).
Each response must not be a server error, must have a status code and content type the
operation documents and, for a documented status, a body that conforms to its schema.

Generated ids name nothing, so each request is sent again where it reaches further: on a
live qwen3 session (and its payload's handle) that accumulates every batch it accepts (tool
results get a preceding assistant call with their ``call_id``), and a session create with a
real profile (cycling through the shipped ones). After each accepted batch or created
session, the session's request is assembled in every format: generated text and tool
declarations reach the layout, the chat templates and the serializers.

Bounded and reproducible: ``derandomize`` (the same examples every run), no example
database, ``deadline=None`` (tokenizer loading, 2-core CI machines), at most
``MAX_EXAMPLES`` fuzzed examples per operation: about 55 s on this 2-core machine. A bug
planted in session create (a 500 when ``system`` has 7 characters) is found at 200
examples, not at 100: lower MAX_EXAMPLES only knowingly.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ensure_resource_availability,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

from app.main import create_app
from app.settings import Settings
from tests.in_thread import served

MAX_EXAMPLES = 200
FORMATS = ("openai", "anthropic", "tokens")
PROFILES = ("qwen3", "mistral-tekken", "qwen3-128k", "qwen3-nothink")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
LIVE_SESSION = {
    "profile": "qwen3",
    "contract": {"goal": "Fix the parser.", "constraints": [{"id": "c1", "text": "Do not modify tests."}]},
    "system": "You are a careful engineer.",
    "tools": [{"type": "function", "function": {"name": "bash", "description": "Run a bash command",
                                                "parameters": {"type": "object",
                                                               "properties": {"command": {"type": "string"}}}}}],
}


#: The OpenAPI document (building the app runs no lifespan: nothing is opened at collection).
schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
schema.config.generation.update(modes=list(schemathesis.GenerationMode), max_examples=MAX_EXAMPLES, database="none")
schema.config.generation.codec = "utf-8"  # schemathesis's strings; lone surrogates: LONE_SURROGATES

#: Each request is also sent with a lone surrogate (the JSON escape "\ud83d", an emoji cut in
#: half) in each of its strings, one at a time: 422 problem+json naming that field, nothing
#: stored (issue 8 item 3, app/api/routing.py). Before that change this was off: a surrogate in
#: an unconstrained string was a 500 on POST /v1/sessions (profile, system, tool descriptions,
#: metadata values) and POST /v1/sessions/{id}/events (content, reasoning, arguments, payload,
#: binding range and content_hash, conditions, artifact content_hash).
LONE_SURROGATES = True
SURROGATE = "\ud83d"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port (real HTTP, one lifespan for the
    module), ready: the default profile's tokenizer is loaded. No rate limit: the run sends
    tens of thousands of requests, over the default 20000/minute on a fast machine (CI saw
    429s; the limit has its own tests in tests/api/test_quotas.py)."""
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("ctxd-fuzz"), rate_limit=""))
    with served(app) as url:  # 503 while the tokenizer loads: documented; served waits for 200
        yield url


@pytest.fixture(scope="module")
def live(base_url: str) -> Iterator[dict[str, Any]]:
    """A live qwen3 session with one answered call, and a client to the server."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        sid = client.post("/v1/sessions", json=LIVE_SESSION).json()["id"]
        r = client.post(f"/v1/sessions/{sid}/events", json={"events": [
            {"event_id": "u1", "kind": "message", "role": "user", "content": "Look at the repo."},
            {"event_id": "a1", "kind": "message", "role": "assistant", "content": "",
             "tool_calls": [{"call_id": "seed-call", "name": "bash", "arguments": "{\"command\": \"ls\"}"}]},
            {"event_id": "r1", "kind": "tool_result", "call_id": "seed-call", "payload": "a.py\nb.py\n",
             "exit_code": 0},
        ]})
        assert r.status_code == 200, r.text
        yield {"session_id": sid, "handle": hashlib.sha256(b"a.py\nb.py\n").hexdigest(), "client": client,
               "counter": itertools.count()}


def _live_copy(case: Any, live: dict[str, Any]) -> Any | None:
    """The same request where it reaches further, or None: on the live session (and the live
    payload's handle), its batch's event ids made unique so accepted batches are not 409s
    for a reused id; a session create with a real profile (a generated name is a 422 before
    anything else is looked at)."""
    if case.method != case.operation.method.upper():
        return None  # a probe with another method (405)
    path, body = dict(case.path_parameters or {}), case.body
    if case.method == "POST" and case.path == "/v1/sessions":
        if not isinstance(body, dict):
            return None
        body = {**body, "profile": PROFILES[next(live["counter"]) % len(PROFILES)]}
    elif not {"session_id", "handle"} & set(path):
        return None
    for name in ("session_id", "handle"):
        if name in path:
            path[name] = live[name]
    if case.method == "DELETE" and "session_id" in path:  # delete a throwaway session, never the live one
        path["session_id"] = live["client"].post("/v1/sessions", json=LIVE_SESSION).json()["id"]
    if case.path.endswith("/events") and isinstance(body, dict) and isinstance(body.get("events"), list):
        n = next(live["counter"])
        body = {**body, "events": [{**e, "event_id": f"{n}.{i}-{e['event_id']}"[:200]}
                                   if isinstance(e, dict) and isinstance(e.get("event_id"), str) else e
                                   for i, e in enumerate(body["events"])]}
    return case.operation.Case(method=case.method, path_parameters=path, query=case.query, headers=case.headers,
                               cookies=case.cookies, body=body, media_type=case.media_type)


def _assert_requests_served(client: httpx.Client, sid: str, after: str) -> None:
    """The session's next request in every format is not a server error."""
    for fmt in FORMATS:
        r = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
        assert r.status_code < 500, f"GET request?format={fmt} after {after}: {r.status_code} {r.text[:2000]}"


def _prelude_calls(live: dict[str, Any], body: Any) -> None:
    """An assistant message calling every ``call_id`` the batch's tool results name, so they
    can be accepted (a call id used before in the session makes it 422: fine)."""
    events = body.get("events") if isinstance(body, dict) else None
    ids = sorted({e["call_id"] for e in events or [] if isinstance(e, dict) and e.get("kind") == "tool_result"
                  and isinstance(e.get("call_id"), str) and 1 <= len(e["call_id"]) <= 200})
    if ids:
        live["client"].post(f"/v1/sessions/{live['session_id']}/events", json={"events": [
            {"event_id": f"prelude-{next(live['counter'])}", "kind": "message", "role": "assistant", "content": "",
             "tool_calls": [{"call_id": i, "name": "bash", "arguments": "{}"} for i in ids]}]})


#: Fields whose value the schema fixes (discriminator and enums): a surrogate there is only a
#: wrong kind/role, so they are left alone.
ENUM_FIELDS = frozenset({"kind", "role", "type"})
#: Strings of one request that get a surrogate, one variant each (the first ones).
SURROGATE_VARIANTS = 8


def _text_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to the strings of a JSON value, but those of ENUM_FIELDS."""
    if isinstance(value, str):
        return [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _text_paths(v, path + (i,))]
    if isinstance(value, dict):
        return [p for k, v in value.items() if k not in ENUM_FIELDS for p in _text_paths(v, path + (k,))]
    return []


def _with_surrogate(value: Any, path: tuple[Any, ...]) -> Any:
    """``value`` with a lone surrogate appended to the string at ``path``."""
    if not path:
        return value + SURROGATE
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        return [_with_surrogate(v, rest) if i == head else v for i, v in enumerate(value)]
    return {k: _with_surrogate(v, rest) if k == head else v for k, v in value.items()}


def _surrogate_variants(case: Any, client: httpx.Client) -> Iterator[tuple[tuple[str, tuple[Any, ...]], httpx.Response]]:
    """The request again, each time with a lone surrogate in one string: of its JSON body (the
    JSON escape \\ud83d; a constrained field refuses it before an unconstrained one is
    reached, hence one at a time) or of its query (the bytes a WTF-8 client sends: %ED%A0%BD)."""
    query = {k: v for k, v in (case.query or {}).items() if isinstance(v, (str, int, float))}
    body = case.body if isinstance(case.body, (dict, list)) else None
    where = [("body", p) for p in _text_paths(body)] + [("query", (k,)) for k, v in query.items() if isinstance(v, str)]
    for part, path in where[:SURROGATE_VARIANTS]:
        q = "&".join(f"{quote(k)}={quote(str(v))}" + ("%ED%A0%BD" if part == "query" and (k,) == path else "")
                     for k, v in query.items())
        sent = _with_surrogate(body, path) if part == "body" else body
        content = json.dumps(sent).encode("ascii") if body is not None else None
        yield (part, path), client.request(case.method, case.formatted_path + (f"?{q}" if q else ""), content=content,
                                               headers={"content-type": "application/json"} if content else None)


@pytest.mark.slow  # ~55 s: CI (.ci/run) runs it; locally `-m slow tests/api/test_schema_fuzz.py`
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_no_server_error(case: Any, base_url: str, live: dict[str, Any]) -> None:
    """Every generated request, and its copy on the live session, answers without a server
    error, with a documented status, content type and body; a live batch that is accepted
    is followed by the session's request in every format, none of them a 5xx."""
    case.call_and_validate(checks=CHECKS, base_url=base_url)
    copy = _live_copy(case, live)
    if copy is not None:
        if case.path.endswith("/events"):
            _prelude_calls(live, case.body)
        response = copy.call_and_validate(checks=CHECKS, base_url=base_url)
        if case.path.endswith("/events") and response.status_code == 200:
            _assert_requests_served(live["client"], live["session_id"], f"the batch {copy.body!r}")
        elif case.path == "/v1/sessions" and response.status_code == 201:
            _assert_requests_served(live["client"], response.json()["id"], f"the session create {copy.body!r}")
    target = copy or case
    if LONE_SURROGATES and case.method == case.operation.method.upper():
        client, sid = live["client"], live["session_id"]
        before = client.get(f"/v1/sessions/{sid}").json()["events"]
        for (part, path), r in _surrogate_variants(target, client):
            what = f"{case.method} {target.formatted_path} with a lone surrogate in {part} {path}"
            assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", (
                f"{what}: {r.status_code} {r.text[:2000]}")
            assert r.json()["errors"][0]["loc"] == [part, *path], f"{what}: {r.text[:2000]}"
        assert client.get(f"/v1/sessions/{sid}").json()["events"] == before, "a refused batch stored events"


# --- stateful: OpenAPI links (issue 12 item 6) ------------------------------------------

#: Scenarios (Hypothesis examples) of the state machine and calls per scenario: bounded, so
#: the run stays near a minute on this 2-core machine.
STATEFUL_EXAMPLES = 60
STATEFUL_STEPS = 8


def test_openapi_links_chain_real_operations() -> None:
    """The document links session create -> its session operations -> request -> manifest
    and handles, and to a child session (issue 16) and its operations; the links name existing
    operations and parameters (20 transitions: 14, + CreateChild, + 5 from a child's create)."""
    document = create_app(Settings()).openapi()
    links = document["paths"]["/v1/sessions"]["post"]["responses"]["201"]["links"]
    ids = {op["operationId"] for ops in document["paths"].values() for op in ops.values()}
    assert {"GetSession", "PostEvents", "GetRequest", "DeleteSession"} <= set(links)
    assert all(link["operationId"] in ids for link in links.values())
    assert schemathesis.openapi.from_dict(document).statistic.transitions.total == 20


@pytest.mark.slow  # ~1 min: CI runs it with the rest of the slow tests
def test_stateful_links_find_no_server_error(base_url: str) -> None:
    """schemathesis' state machine follows the links on real sessions over real HTTP: no 5xx,
    every response documented and conforming, a deleted session's links answer 404
    (use-after-free), a created session's links are available (resource availability)."""
    machine = schema.as_state_machine()
    seen: Counter[tuple[str, str, int]] = Counter()

    class Workflow(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": base_url, "timeout": 60}

        def after_call(self, response: Any, case: Any) -> None:
            seen[(case.method, case.operation.path, response.status_code)] += 1
            super().after_call(response, case)

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            # the checks plus the stateful ones; not "positive data acceptance": a
            # schema-valid precondition on a revision that does not exist is rightly a 422
            case.validate_response(response, checks=[*CHECKS, use_after_free, ensure_resource_availability],
                                   transport_kwargs=kwargs or None, recorder=getattr(self, "recorder", None))

    Workflow.run(settings=settings(max_examples=STATEFUL_EXAMPLES, stateful_step_count=STATEFUL_STEPS,
                                   deadline=None, derandomize=True, database=None,
                                   suppress_health_check=list(HealthCheck)))
    ok = {(m, p) for (m, p, status), n in seen.items() if 200 <= status < 300}
    print(f"\nstateful run: {sum(seen.values())} calls, {len(ok)} operations answered 2xx: {sorted(ok)}")
    # the links reached real sessions: linked operations succeeded on sessions the run created
    # (POST events is not required: whether the generator produces a valid batch varies with the
    # collected suite; in one full CI run all 56 generated batches were answered 400, never a 5xx)
    assert {("GET", "/v1/sessions/{session_id}/request"), ("DELETE", "/v1/sessions/{session_id}"),
            ("GET", "/v1/sessions/{session_id}")} <= ok, seen
