"""A search hit on a huge single line shows the match (README "Recall"): the snippet is a
window of at most 400 characters around the first match, each cut side marked, and the
match's UTF-8 byte offset and length read it back through the handle route
(``?offset=&length=``). Before: the snippet was the line's first 2,000 characters, and
``lines: "1:1"`` pointed at all 600,000 (the peer fault anthropics/claude-code#78827: a
grep hit in a minified bundle that never shows the hit)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_api import assistant, new_session, post, result


def test_a_hit_on_a_minified_line_shows_the_match_and_reads_back(client: TestClient) -> None:
    line = "".join(f"var a{i}=function(){{return {i}}};" for i in range(20_000))  # one line, ~600 kB
    at = len(line) // 2
    minified = line[:at] + "/*é*/" + "needleHandler()" + line[at:]  # a 2-byte character before the match
    sid = new_session(client)
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", minified)).status_code == 200
    hits = client.get(f"/v1/sessions/{sid}/search", params={"q": "needleHandler"}).json()["hits"]
    (match,) = [m for h in hits for m in h["matches"] if m["field"] == "payload"]
    assert match["lines"] == "1:1"
    text = match["text"]
    assert "needleHandler" in text and len(text) <= 400 + 2 * len("[... 000,000 chars] ")
    assert text.startswith("[... ") and text.endswith(" chars]") and match["cut_before"] > 290_000
    assert match["cut_before"] + match["cut_after"] + 400 == len(minified)
    raw = client.get(f"/v1/sessions/{sid}/handles/{match['handle']}",
                     params={"offset": match["offset"], "length": match["length"]})
    assert raw.status_code in (200, 206) and raw.content == b"needleHandler"
    assert match["offset"] == len(minified[:minified.index("needleHandler")].encode("utf-8"))


def test_a_short_line_keeps_its_whole_text(client: TestClient) -> None:
    sid = new_session(client)
    body = "alpha\nbeta needleHandler gamma\ndelta\n"
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", body)).status_code == 200
    hits = client.get(f"/v1/sessions/{sid}/search", params={"q": "needleHandler", "context": 1}).json()["hits"]
    (match,) = [m for h in hits for m in h["matches"] if m["field"] == "payload"]
    assert match["text"] == body and match["lines"] == "1:3" and match.get("cut_before") is None
    assert match["offset"] == body.index("needleHandler") and match["length"] == len("needleHandler")
