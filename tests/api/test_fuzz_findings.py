"""5xx found by the schemathesis run (tests/api/test_schema_fuzz.py), each now a 4xx, as
regression tests of their kind.

1. Ids in paths and queries past the database's 64-bit integer. Before: GET
   /v1/sessions/{id}/manifests/6581463708810312253702144 was a 500 (OverflowError: Python int
   too large to convert to SQLite INTEGER). After: 422 naming the parameter; the largest id
   is an ordinary 404 / empty page.
2. Tool ``parameters`` that are not a JSON Schema. Before: session create 201, then every GET
   request of a mistral-tekken session a 500 (mistral-common: "[] is not of type 'object',
   'boolean'"). After: 422 at session create naming the tool and the place in the schema, on
   every profile (OpenAI refuses such a function declaration too).
3. A contract version past 64 bits. Before: session create 201 with ``contract_version``
   18446744073709551616, then GET request a 500 (the layout state holding the record's
   version could not be serialised). After: 422 naming the field; versions, revisions and
   ``depends_on`` seqs are bounded by JSON's exact integers (2**53 - 1), and the largest one
   serves."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import SESSION, assert_problem, new_session

BIG = 2**63
PROFILES = ("qwen3", "mistral-tekken", "qwen3-128k")


def test_manifest_id_past_64_bits_is_422(client: TestClient) -> None:
    sid = new_session(client)
    for manifest_id in (BIG, 6581463708810312253702144):
        body = assert_problem(client.get(f"/v1/sessions/{sid}/manifests/{manifest_id}"), 422)
        assert "manifest_id" in body["detail"]
    assert_problem(client.get(f"/v1/sessions/{sid}/manifests/{BIG - 1}"), 404)


def test_before_id_past_64_bits_is_422(client: TestClient) -> None:
    sid = new_session(client)
    body = assert_problem(client.get(f"/v1/sessions/{sid}/manifests", params={"before_id": BIG}), 422)
    assert "before_id" in body["detail"]
    r = client.get(f"/v1/sessions/{sid}/manifests", params={"before_id": BIG - 1})
    assert r.status_code == 200 and r.json()["manifests"] == []


def _tool(parameters: object) -> dict:
    return {"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": parameters}}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("parameters, where", [
    ({"type": "object", "properties": []}, "properties"),
    ({"type": "objekt"}, "type"),
    ({"type": "object", "properties": {"command": {"type": "string", "minLength": -1}}}, "properties/command/minLength"),
    ({"type": "object", "required": "command"}, "required"),
])
def test_tool_parameters_that_are_no_json_schema_are_422(client: TestClient, profile: str, parameters: dict,
                                                         where: str) -> None:
    body = assert_problem(client.post("/v1/sessions", json=SESSION | {"profile": profile, "tools": [_tool(parameters)]}),
                          422)
    assert "tools.0.function.parameters" in body["detail"] and f"at {where}:" in body["detail"], body["detail"]


@pytest.mark.parametrize("profile", PROFILES)
def test_unusual_but_valid_tool_schemas_are_served(client: TestClient, profile: str) -> None:
    """Draft 2020-12 keywords, $defs and $ref, an empty schema, no parameters: accepted and
    served in every format."""
    tools = [_tool({"type": "object", "$defs": {"path": {"type": "string"}},
                    "properties": {"paths": {"type": "array", "prefixItems": [{"$ref": "#/$defs/path"}]}}}),
             {"type": "function", "function": {"name": "noop", "parameters": {}}},
             {"type": "function", "function": {"name": "bare"}}]
    sid = new_session(client, profile=profile, tools=tools)
    for fmt in ("openai", "anthropic", "tokens"):
        r = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
        assert r.status_code == 200, (fmt, r.text)
        assert r.json()["manifest"]["tokens"]["by_role"]["tools"] > 0, fmt


@pytest.mark.parametrize("profile", PROFILES)
def test_contract_version_past_json_integers_is_422_and_the_largest_serves(client: TestClient, profile: str) -> None:
    for version in (2**64, 2**53):
        body = {**SESSION, "profile": profile, "contract": {**SESSION["contract"], "contract_version": version}}
        problem = assert_problem(client.post("/v1/sessions", json=body), 422)
        assert problem["errors"][0]["loc"][-1] == "contract_version", problem
    body = {**SESSION, "profile": profile, "contract": {**SESSION["contract"], "contract_version": 2**53 - 1}}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    for fmt in ("openai", "anthropic", "tokens"):
        served = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
        assert served.status_code == 200, served.text
    assert f"version {2**53 - 1}" in client.get(f"/v1/sessions/{sid}/request", params={"format": "openai"}).text
