"""The body's ``model``: the profile's, or the session's own (``model`` on session create,
issue 8 item 7), in every wire format, shown by GET /v1/sessions/{id}; counts unchanged."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import SESSION, assert_problem, assistant, new_session, post, result

FORMATS = ("openai", "anthropic", "tokens")
PROFILE_MODELS = {"qwen3": "Qwen/Qwen3-8B", "qwen3-128k": "Qwen/Qwen3-8B", "qwen3-nothink": "Qwen/Qwen3-8B",
                  "mistral-tekken": "mistral-small-2407"}


def _fill(client: TestClient, sid: str) -> None:
    r = post(client, sid, {"event_id": "u1", "kind": "message", "role": "user", "content": "Please look at the repo."},
             assistant("a1", "c1"), result("r1", "c1", "a.py\n"))
    assert r.status_code == 200, r.text


def _bodies(client: TestClient, sid: str) -> dict[str, dict]:
    out = {}
    for fmt in FORMATS:
        r = client.get(f"/v1/sessions/{sid}/request", params={"format": fmt})
        assert r.status_code == 200, r.text
        out[fmt] = r.json()
    return out


@pytest.mark.parametrize("profile", sorted(PROFILE_MODELS))
def test_model_defaults_to_the_profiles(client: TestClient, profile: str) -> None:
    sid = new_session(client, profile=profile)
    _fill(client, sid)
    assert client.get(f"/v1/sessions/{sid}").json()["model"] == PROFILE_MODELS[profile]
    for fmt, out in _bodies(client, sid).items():
        assert out["request"]["model"] == PROFILE_MODELS[profile], fmt


@pytest.mark.parametrize("profile", ["qwen3", "qwen3-nothink", "mistral-tekken"])
@pytest.mark.parametrize("model", ["qwen3-8b-awq", "accounts/fireworks/models/qwen3-8b",
                                   "anthropic.claude-3-5-sonnet-20240620-v1:0", "modèle-β"])
def test_session_model_is_the_model_of_every_format(client: TestClient, profile: str, model: str) -> None:
    """Before: ``model`` on session create was 422 (extra field) and every body named the
    profile's model. After: every format names the session's model; the counts and the
    tokens format's ids are those of the same session without it."""
    own = new_session(client, profile=profile, model=model)
    plain = new_session(client, profile=profile)
    _fill(client, own)
    _fill(client, plain)
    shown = client.get(f"/v1/sessions/{own}").json()
    assert shown["model"] == model and shown["profile"] == profile
    with_model, without = _bodies(client, own), _bodies(client, plain)
    for fmt in FORMATS:
        assert with_model[fmt]["request"]["model"] == model, fmt
        assert without[fmt]["request"]["model"] == PROFILE_MODELS[profile], fmt
        assert with_model[fmt]["manifest"]["tokens"] == without[fmt]["manifest"]["tokens"], fmt
        rest = {k: v for k, v in with_model[fmt]["request"].items() if k not in ("model", "prompt_cache_key")}
        assert rest == {k: v for k, v in without[fmt]["request"].items() if k not in ("model", "prompt_cache_key")}, fmt
    if profile == "qwen3-nothink":  # the serving engine still gets the kwargs that were counted
        assert with_model["openai"]["request"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("bad", ["", " Qwen/Qwen3-8B", "Qwen/Qwen3-8B\n", "qwen 3", "a\x00b", "x" * 257, 17, ["m"]])
def test_bad_model_is_422_naming_the_field(client: TestClient, bad: object) -> None:
    body = assert_problem(client.post("/v1/sessions", json=SESSION | {"model": bad}), 422)
    assert "model" in body["detail"], body


def test_null_model_is_the_profiles(client: TestClient) -> None:
    sid = new_session(client, model=None)
    assert client.get(f"/v1/sessions/{sid}").json()["model"] == "Qwen/Qwen3-8B"
