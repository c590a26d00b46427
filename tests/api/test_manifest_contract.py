"""The manifest's contract with clients (issue 9 item 3): the fields clients read (tokens,
budget, cache, elided handles, layout_warnings) are frozen here, documented in the OpenAPI
document, and every served manifest validates against the documented schema, although
the GET answers pre-serialized bytes."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from app.api.schemas import AssembledRequest, ManifestList, ManifestOut
from tests.api.test_api import assistant, new_session, post, result

# path in the manifest -> JSON schema type; changing one breaks clients
FROZEN: dict[str, str] = {
    "tokens.total": "integer",
    "tokens.by_zone": "object",
    "tokens.by_role": "object",
    "budget.window": "integer",
    "budget.output_reserve": "integer",
    "budget.headroom": "integer",
    "budget.input_limit": "integer",
    "budget.low_watermark": "integer",
    "budget.role_limits": "object",
    "cache.model": "string",
    "cache.block_size": "integer",
    "cache.predicted_cached_tokens": "integer",
    "cache.uncached_tokens": "integer",
    "cache.previous_tokens": "integer",
    "cache.common_prefix_tokens": "integer",
    "cache.common_prefix_exact": "boolean",
    "cache.extends_previous": "boolean",
    "cache.first_divergence": "object",
    "elided.handle": "string",
    "elided.tokens": "integer",
    "elided.seq": "integer",
    "layout_warnings": "array",
    "elided_tokens": "integer",
    "request_sha256": "string",
    "id": "integer",
}


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref, and take the non-null branch of an optional (anyOf [X, null])."""
    while True:
        if "$ref" in schema:
            schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
        elif schema.get("type") == "array" and "items" in schema and "$ref" in schema["items"]:
            schema = schema["items"]
        else:
            return schema


def test_openapi_documents_the_frozen_manifest_fields(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    answer = doc["paths"]["/v1/sessions/{session_id}/request"]["get"]["responses"]["200"]["content"]["application/json"]
    manifest = _resolve(doc, _resolve(doc, answer["schema"])["properties"]["manifest"])
    assert _resolve(doc, doc["paths"]["/v1/sessions/{session_id}/manifests/{manifest_id}"]["get"]["responses"]["200"]
                    ["content"]["application/json"]["schema"]) == manifest
    for path, kind in FROZEN.items():
        schema = manifest
        for part in path.split("."):
            schema = _resolve(doc, schema)
            assert part in schema["properties"], f"{path}: {part} missing from the documented manifest"
            schema = schema["properties"][part]
        schema = schema if "anyOf" not in schema else next(s for s in schema["anyOf"] if s.get("type") != "null")
        documented = schema.get("type") or _resolve(doc, schema).get("type")
        assert documented == kind, f"{path} is documented as {documented}, clients read {kind}"
    assert {"items", "elided", "layout"} <= set(manifest["required"])


def _read(manifest: dict[str, Any], path: str) -> list[Any]:
    values = [manifest]
    for part in path.split("."):
        values = [v for value in values for v in (value if isinstance(value, list) else [value])]
        values = [value[part] for value in values if part in value]
    return values


def test_served_manifests_match_the_documented_schema_in_every_format(client: TestClient) -> None:
    """A session that evicts (qwen3: over input_limit 28,160 tokens), with a head + tail
    result, a pending call and a superseded step; every GET's manifest (openai, anthropic,
    tokens) validates against the documented models with no undocumented field, carries
    every frozen field, and reads back identical under its id."""
    sid = new_session(client)
    line = "def handler_{i}(request, response):  # processes the request and writes the response\n"
    for t in range(24):
        payload = "".join(line.format(i=i) for i in range(80 if t != 20 else 400))
        assert post(client, sid, assistant(f"a{t}", f"c{t}"), result(f"r{t}", f"c{t}", payload)).status_code == 200
    assert post(client, sid, {"event_id": "s1", "kind": "step", "text": "Read the handlers."},
                {"event_id": "s2", "kind": "step", "text": "Fix the handler."}, assistant("p", "pending", content="")).status_code == 200
    served = []
    for again in (False, True):
        if again:  # a moved step: every format's next request diverges from its previous one
            assert post(client, sid, {"event_id": "s3", "kind": "step", "text": "Test the handler."}).status_code == 200
        for fmt in ("openai", "anthropic", "tokens"):
            answer = client.get(f"/v1/sessions/{sid}/request?format={fmt}")
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            AssembledRequest.model_validate_json(answer.content)
            manifest = answer.json()["manifest"]
            ManifestOut.model_validate(manifest)
            served.append(manifest)
            assert manifest["elided"] and manifest["layout"]["cut_seq"] > 0
            representations = {i["representation"] for i in manifest["items"] + manifest["elided"]}
            assert {"verbatim", "head_tail", "elided", "superseded", "pending"} <= representations
            for path in FROZEN:
                if again or path != "cache.first_divergence":
                    assert _read(manifest, path), f"{path} missing from a served {fmt} manifest"
            stored = client.get(f"/v1/sessions/{sid}/manifests/{manifest['id']}")
            assert stored.json() == manifest and stored.headers["content-type"] == "application/json"
    listing = client.get(f"/v1/sessions/{sid}/manifests")
    ManifestList.model_validate_json(listing.content)
    assert [m["id"] for m in listing.json()["manifests"]] == [m["id"] for m in reversed(served)]
