"""Tool declarations round-trip into the Anthropic body (README "Wire formats"): an OpenAI
``function.strict`` becomes the Anthropic tool's ``strict`` (before: dropped with no word),
and a field outside Anthropic's tool schema is dropped with a layout warning naming it; the
openai body keeps the declaration as posted."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_api import new_session

TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run a command.", "strict": True,
                                      "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                                                     "required": ["command"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "search", "strict": False, "x-owner": "infra",
                                      "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "plain", "parameters": {"type": "object", "properties": {}}}},
]


def test_strict_round_trips_and_unknown_fields_are_named(client: TestClient) -> None:
    sid = new_session(client, tools=TOOLS)
    out = client.get(f"/v1/sessions/{sid}/request?format=anthropic").json()
    tools = {t["name"]: t for t in out["request"]["tools"]}
    assert tools["bash"]["strict"] is True and tools["search"]["strict"] is False and "strict" not in tools["plain"]
    assert tools["bash"]["input_schema"]["additionalProperties"] is False
    assert all(set(t) <= {"name", "description", "input_schema", "strict", "cache_control"} for t in tools.values())
    warnings = [w for w in out["manifest"]["layout_warnings"] if "tool 'search'" in w]
    assert len(warnings) == 1 and "function.x-owner" in warnings[0]
    assert not any("tool 'bash'" in w for w in out["manifest"]["layout_warnings"])
    openai = client.get(f"/v1/sessions/{sid}/request").json()["request"]["tools"]
    assert {t["function"]["name"]: t["function"].get("strict") for t in openai} == \
        {"bash": True, "search": False, "plain": None}
