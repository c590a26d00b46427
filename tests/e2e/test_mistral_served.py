"""mistral-tekken: the served count equals mistral-common's encode_chat_completion on the
served body, called directly; the v3 layout problems are reported, not hidden."""

from __future__ import annotations

import pytest

from ctxd_tools import miniswe
from tests.traces import TRACE_FILES

SAMPLE = [p for p in TRACE_FILES if p.name in {"pvlib__pvlib-python-1072__reasoner.traj.json",
                                                 "pydicom__pydicom-1256__chat.traj.json"}]


@pytest.fixture(scope="module")
def mistral_encode():
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from app.tokenizers.mistral import default_tekken_path, load_tekken

    direct = MistralTokenizer.from_file(default_tekken_path())
    converter = load_tekken()

    def encode(body: dict) -> list[int]:
        request, _ = converter.to_mistral(body["messages"], body.get("tools", []))
        return list(direct.encode_chat_completion(request).tokens)

    return encode


@pytest.mark.parametrize("path", SAMPLE, ids=lambda p: p.name)
def test_served_count_equals_encode_chat_completion(sqlite_client, mistral_encode, path) -> None:
    traj = miniswe.load_trajectory(path)
    sid = sqlite_client.post("/v1/sessions", json=miniswe.session_create_body(traj, profile="mistral-tekken")).json()["id"]
    calls = 0
    warned = False
    for step in miniswe.replay_plan(traj):
        if isinstance(step, miniswe.PostEvents):
            assert sqlite_client.post(f"/v1/sessions/{sid}/events", json={"events": list(step.events)}).status_code == 200
            continue
        calls += 1
        if calls % 4 and calls > 3:
            continue  # a sample of the calls: every fourth, plus the first three
        got = sqlite_client.get(f"/v1/sessions/{sid}/request?format=openai").json()
        manifest = got["manifest"]
        assert manifest["tokens"]["total"] == len(mistral_encode(got["request"]))
        assert sum(manifest["tokens"]["by_role"].values()) == manifest["tokens"]["total"]
        warned |= any("text dropped" in w for w in manifest["layout_warnings"])
        ids = sqlite_client.get(f"/v1/sessions/{sid}/request?format=tokens").json()["request"]["prompt_token_ids"]
        assert ids == mistral_encode(got["request"])
    if "chat" in path.name:
        assert warned, "chat traces have assistant text beside tool calls: v3 drops it and must say so"
