"""OpenAPI links (issue 12 item 6): which response value feeds which operation's
parameter, so a stateful client (schemathesis' state machine) chains real calls: create a
session, then post its events, assemble its request, read its manifests and handles,
delete it. Added to the generated document by :func:`add_links`."""

from __future__ import annotations

from typing import Any

SESSION_ID_FROM_BODY = {"session_id": "$response.body#/id"}
SESSION_ID_FROM_PATH = {"session_id": "$request.path.session_id"}

#: (path, method, status) -> {link name: (target path, target method, parameters)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("/v1/sessions", "post", "201"): {
        "GetSession": ("/v1/sessions/{session_id}", "get", SESSION_ID_FROM_BODY),
        "PostEvents": ("/v1/sessions/{session_id}/events", "post", SESSION_ID_FROM_BODY),
        "CheckPrecondition": ("/v1/sessions/{session_id}/preconditions", "post", SESSION_ID_FROM_BODY),
        "GetRequest": ("/v1/sessions/{session_id}/request", "get", SESSION_ID_FROM_BODY),
        "ListManifests": ("/v1/sessions/{session_id}/manifests", "get", SESSION_ID_FROM_BODY),
        "DeleteSession": ("/v1/sessions/{session_id}", "delete", SESSION_ID_FROM_BODY),
        "CreateChild": ("/v1/sessions/{session_id}/children", "post", SESSION_ID_FROM_BODY),
    },
    # issue 16: a child session is a session (its conclusion returns to the parent)
    ("/v1/sessions/{session_id}/children", "post", "201"): {
        "GetChild": ("/v1/sessions/{session_id}", "get", SESSION_ID_FROM_BODY),
        "PostChildEvents": ("/v1/sessions/{session_id}/events", "post", SESSION_ID_FROM_BODY),
        "GetChildRequest": ("/v1/sessions/{session_id}/request", "get", SESSION_ID_FROM_BODY),
        "DeleteChild": ("/v1/sessions/{session_id}", "delete", SESSION_ID_FROM_BODY),
        "GetParent": ("/v1/sessions/{session_id}", "get", SESSION_ID_FROM_PATH),
    },
    ("/v1/sessions/{session_id}/events", "post", "200"): {
        "GetRequest": ("/v1/sessions/{session_id}/request", "get", SESSION_ID_FROM_PATH),
        "GetSession": ("/v1/sessions/{session_id}", "get", SESSION_ID_FROM_PATH),
        "PostMoreEvents": ("/v1/sessions/{session_id}/events", "post", SESSION_ID_FROM_PATH),
        "DeleteSession": ("/v1/sessions/{session_id}", "delete", SESSION_ID_FROM_PATH),
    },
    ("/v1/sessions/{session_id}/request", "get", "200"): {
        "GetManifest": ("/v1/sessions/{session_id}/manifests/{manifest_id}", "get",
                        SESSION_ID_FROM_PATH | {"manifest_id": "$response.body#/manifest/id"}),
        "GetItemHandle": ("/v1/sessions/{session_id}/handles/{handle}", "get",
                          SESSION_ID_FROM_PATH | {"handle": "$response.body#/manifest/items/0/handle"}),
        "GetHandle": ("/v1/handles/{handle}", "get", {"handle": "$response.body#/manifest/items/0/handle"}),
        "DeleteSession": ("/v1/sessions/{session_id}", "delete", SESSION_ID_FROM_PATH),
    },
}


def add_links(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an OpenAPI document) with :data:`LINKS` added to its responses, each
    naming its target by ``operationId``. Returns the same dict."""
    paths = schema.get("paths", {})
    for (path, method, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {"operationId": paths[target][target_method]["operationId"], "parameters": parameters}
            for name, (target, target_method, parameters) in links.items()}
    return schema
