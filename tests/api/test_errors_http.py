"""Issue 8 item 5 over real HTTP (uvicorn on loopback, one keep-alive connection): an
unexpected error is a 500 problem+json whose request id is logged, and the connection
stays usable; every response carries a request id (X-Request-ID, problem bodies, logs)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.observability.logs import FORMAT
from app.services import sessions as session_service
from app.settings import Settings
from tests.api.test_api import SESSION
from tests.in_thread import served

HEX32 = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app under uvicorn (httptools, as ``ctxd serve`` runs it) in a thread on loopback."""
    data_dir: Path = tmp_path_factory.mktemp("ctxd-http")
    with served(create_app(Settings(data_dir=data_dir)), log_config=None, access_log=False) as url:
        yield url


def one_connection(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=30,
                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))


def local_port(response: httpx.Response) -> int:
    """The client-side port of the connection that carried ``response``."""
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def test_unexpected_error_is_a_logged_500_and_the_connection_stays_usable(
        base_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Before: the 500 was sent, then Starlette's ServerErrorMiddleware re-raised, uvicorn
    closed the connection, and the next request on it failed (ReadError, connection reset)."""

    def boom(*args: object) -> None:  # an error no handler expects
        raise RuntimeError("disk on fire")

    with one_connection(base_url) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        monkeypatch.setattr(session_service, "describe_session", boom)
        with caplog.at_level(logging.ERROR, logger="ctxd"):
            r = client.get(f"/v1/sessions/{sid}", headers={"X-Request-ID": "req-boom-1"})
        assert r.status_code == 500
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["x-request-id"] == "req-boom-1"
        body = r.json()
        assert (body["status"], body["title"], body["request_id"]) == (500, "Internal error", "req-boom-1")
        assert "disk on fire" not in r.text, "internals stay in the log"
        second = client.get(f"/v1/sessions/{sid}")  # consecutive errors on one connection (ogx-ai/ogx#4886)
        assert second.status_code == 500 and second.json()["request_id"] == second.headers["x-request-id"]
        assert local_port(second) == local_port(r)
        monkeypatch.undo()
        again = client.get(f"/v1/sessions/{sid}")
        assert again.status_code == 200 and again.json()["id"] == sid
        assert local_port(again) == local_port(r), "the same keep-alive connection carried both"
    records = [rec for rec in caplog.records if getattr(rec, "request_id", None) == "req-boom-1"]
    assert records and "unexpected error on GET /v1/sessions/" in records[0].getMessage()
    assert records[0].exc_info and "disk on fire" in str(records[0].exc_info[1])
    assert "[request_id=req-boom-1]" in logging.Formatter(FORMAT).format(records[0])


def test_lone_surrogate_post_leaves_the_connection_usable(base_url: str) -> None:
    """The issue's report: a lone surrogate (\\ud83d, half an emoji) in POST events answered
    500 and the next request on the connection was reset. Whatever its status (item 3 makes
    it a 422), it is a problem+json with a request id and the connection survives."""
    with one_connection(base_url) as client:
        sid = client.post("/v1/sessions", json=SESSION).json()["id"]
        raw = '{"events": [{"event_id": "m1", "kind": "message", "role": "user", "content": "half \\ud83d emoji"}]}'
        r = client.post(f"/v1/sessions/{sid}/events", content=raw, headers={"content-type": "application/json"})
        assert r.status_code in (422, 500) and r.headers["content-type"].startswith("application/problem+json")
        assert HEX32.match(r.headers["x-request-id"]) and r.json()["request_id"] == r.headers["x-request-id"]
        after = client.get(f"/v1/sessions/{sid}")
        assert after.status_code == 200 and after.json()["events"] == 0
        assert local_port(after) == local_port(r)


@pytest.mark.parametrize(("sent", "kept"), [
    ("trace-abc.123:7", True),
    ("0f" * 64, True),  # 128 characters: the longest kept
    ("0f" * 64 + "x", False),
    ("two words", False),
    ("", False),
    ("é", False),
])
def test_incoming_request_id_is_honoured_only_when_sane(base_url: str, sent: str, kept: bool) -> None:
    headers = {"X-Request-ID": sent.encode("utf-8")} if sent else {}
    r = httpx.get(f"{base_url}/healthz", headers=headers)
    assert r.status_code == 200
    if kept:
        assert r.headers["x-request-id"] == sent
    else:
        assert HEX32.match(r.headers["x-request-id"])


def test_every_response_carries_a_request_id(base_url: str) -> None:
    """2xx, 404, 405, 422 and the domain errors all carry one; problem bodies repeat it."""
    with one_connection(base_url) as client:
        created = client.post("/v1/sessions", json=SESSION)
        missing = client.get("/v1/sessions/nope")
        bad = client.post("/v1/sessions", json=SESSION | {"surprise": 1})
        method = client.delete("/v1/sessions")
        unknown = client.get("/no/such/path")
        ids = [r.headers["x-request-id"] for r in (created, missing, bad, method, unknown)]
    assert [r.status_code for r in (created, missing, bad, method, unknown)] == [201, 404, 422, 405, 404]
    assert all(HEX32.match(i) for i in ids) and len(set(ids)) == 5
    for r in (missing, bad, method, unknown):
        assert r.json()["request_id"] == r.headers["x-request-id"]


TOOLS_IN_USER_TEMPLATE = (  # tools rendered into the first user message (as Llama 3.1 may do)
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if loop.index0 == 1 and tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_template_ctxd_cannot_count_by_zone_is_a_named_500(tmp_path: Path) -> None:
    """HFChatMeter._head raised a bare ValueError (a 500 "Internal error" that names
    nothing). It is ctxd's (the profile's), not the caller's: a 500 problem that says which
    rule the template breaks, with the request id, and the session stays readable."""
    import json
    import shutil

    from fastapi.testclient import TestClient

    from app.tokenizers.loading import qwen3_tokenizer_dir

    tok_dir = tmp_path / "tok"
    shutil.copytree(qwen3_tokenizer_dir(), tok_dir)
    config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(config | {"chat_template": TOOLS_IN_USER_TEMPLATE}))
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(f'''[tools-in-user]
model = "test/tools-in-user"
tokenizer = {{ kind = "hf_dir", path = "{tok_dir}", render_cache = "none" }}
window = 8192
output_reserve = 1024
headroom = 0
item_cap_tokens = 1024
''')
    with TestClient(create_app(Settings(data_dir=tmp_path / "data", profiles_path=profiles)),
                    raise_server_exceptions=False) as client:
        sid = client.post("/v1/sessions", json=SESSION | {"profile": "tools-in-user"}).json()["id"]
        r = client.get(f"/v1/sessions/{sid}/request", headers={"X-Request-ID": "tmpl-1"})
        assert r.status_code == 500 and r.headers["content-type"].startswith("application/problem+json")
        body = r.json()
        assert body["title"] == "Chat template not supported" and body["reason"] == "trunk_depends_on_tools"
        assert body["request_id"] == "tmpl-1" and "with and without tools" in body["detail"]
        assert client.get(f"/v1/sessions/{sid}").status_code == 200
        no_tools = client.post("/v1/sessions", json=SESSION | {"profile": "tools-in-user", "tools": []}).json()["id"]
        assert client.get(f"/v1/sessions/{no_tools}/request").status_code == 200, "without tools it counts"
