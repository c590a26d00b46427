"""GET /request's manifest says where a compaction pass left the request (issue 10 item 3):
``compaction.after_pass = {tokens, t_lo, over}``, ``over`` None at or below T_lo, else the
reason (the issue's exception: the newest group alone exceeds what T_lo leaves), on the
shipped qwen3 and mistral-tekken profiles, counted exactly."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.test_api import new_session, post
from tests.api.test_budget_api import older_history, parallel_turn, results


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_a_pass_ends_at_or_below_t_lo_with_a_small_newest_group(client: TestClient, profile: str) -> None:
    """Five older turns of 2,000-token results pass T_hi; the newest turn reads one 300-token
    file: the pass folds every older group and ends at or below T_lo (over None)."""
    sid = new_session(client, profile=profile)
    events = [*older_history(profile, groups=5), parallel_turn("newest", "n", 1), *results(profile, "n", [300])]
    assert post(client, sid, *events).status_code == 200
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    compaction = manifest["compaction"]
    assert compaction["pass"] and compaction["watermarks"]["t_lo"] == compaction["after_pass"]["t_lo"]
    after = compaction["after_pass"]
    assert after["tokens"] == manifest["tokens"]["total"] <= after["t_lo"] and after["over"] is None
    again = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]["compaction"]
    assert not again["pass"] and "after_pass" not in again, "a request without a pass reports none"


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_a_newest_group_larger_than_t_lo_is_the_named_exception(client: TestClient, profile: str) -> None:
    """The newest turn reads three 2,000-token files (each under the per-item cap of 2,048):
    with every older group folded the request is still above T_lo, and the manifest names
    why: ``newest_group``."""
    sid = new_session(client, profile=profile)
    events = [*older_history(profile, groups=5), parallel_turn("newest", "n", 3), *results(profile, "n", [2000] * 3)]
    assert post(client, sid, *events).status_code == 200
    manifest = client.get(f"/v1/sessions/{sid}/request").json()["manifest"]
    after = manifest["compaction"]["after_pass"]
    assert after["tokens"] == manifest["tokens"]["total"] > after["t_lo"]
    assert after["over"] == "newest_group"
    assert manifest["layout"]["cut_seq"] == 11, "every group but the newest (seq 11) folded"
