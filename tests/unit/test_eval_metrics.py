"""Evaluation metric functions on tiny hand-made cases (ctxd_tools/eval/measures.py, report.summarize)."""

from __future__ import annotations

import pytest

from ctxd_tools.eval import measures
from ctxd_tools.eval.measures import Observation, Prices
from ctxd_tools.eval.replay import CallRecord
from ctxd_tools.eval.report import KEYS, summarize


def test_cost_and_reuse() -> None:
    assert measures.cost_usd(1_000_000, 0) == pytest.approx(3.0)
    assert measures.cost_usd(0, 1_000_000) == pytest.approx(0.30)
    assert measures.cost_usd(327_000, 1_083_000) == pytest.approx(1.3059)
    assert measures.cost_usd(1_000_000, 1_000_000, Prices(uncached=1.0, cached=0.5)) == pytest.approx(1.5)
    assert measures.reuse_ratio(768, 1000) == 0.768
    assert measures.reuse_ratio(0, 0) is None


def test_compression_ratio_eq9() -> None:
    assert measures.compression_ratio(3_030_000, 1_410_000) == pytest.approx(2.1489, abs=1e-4)
    assert measures.compression_ratio(100, 100) == 1.0
    assert measures.compression_ratio(100, 0) is None


def test_request_text_and_tool_contents() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "look", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    ]
    text = measures.request_text(messages, [{"type": "function", "function": {"name": "bash"}}])
    for part in ("sys", "look", "cat a.py", "print(1)", '"name": "bash"'):
        assert part in text
    assert measures.tool_contents(messages) == {"c1": "print(1)"}


def test_constraint_hits_eq6() -> None:
    text = "[boundary-1]\nDO NOT MODIFY: tests\n[boundary-2]\nMODIFY: src"
    assert measures.constraint_hits(text, ["DO NOT MODIFY: tests", "MODIFY: src", "Never deploy"]) == 2
    assert measures.constraint_hits(text, ["DO NOT MODIFY:  tests"]) == 0  # verbatim, whitespace included
    assert measures.retention_fraction(5, 6) == pytest.approx(5 / 6)
    assert measures.retention_fraction(0, 0) is None


def test_pair_errors() -> None:
    def call(*ids: str) -> dict:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in ids]}

    def result(i: str) -> dict:
        return {"role": "tool", "tool_call_id": i, "content": "ok"}

    assert measures.pair_errors([call("a", "b"), result("a"), result("b")]) == 0
    assert measures.pair_errors([call("a", "b"), result("b")]) == 1  # a call without result
    assert measures.pair_errors([result("x"), call("a"), result("a")]) == 1  # a result without call
    assert measures.pair_errors([call("a"), call("b")]) == 2


def test_stale_pairs_eq7() -> None:
    old = Observation("c1", "def f():\n    return 1\n", (("src/a.py", 0),))
    fresh = Observation("c2", "def f():\n    return 2\n", (("src/a.py", 1),))
    unbound = Observation("c3", "README", ())
    empty = Observation("c4", "", (("src/a.py", 0),))
    obs = [old, fresh, unbound, empty]
    shown = {"c1": "exit_code: 0\n" + old.payload, "c2": fresh.payload, "c3": "README", "c4": ""}
    # a.py was written once (revision 1) after c1 read revision 0
    assert measures.stale_pairs(obs, {"src/a.py": 1}, shown, "...") == (1, 1)
    # evicted: not shown any more
    assert measures.stale_pairs(obs, {"src/a.py": 1}, {"c2": fresh.payload}, "...") == (1, 0)
    # a tombstone naming the write excuses it
    assert measures.stale_pairs(obs, {"src/a.py": 1}, shown, "[superseded: src/a.py r1]") == (1, 0)
    # a notice naming another revision does not ("r12" is not "r1")
    assert measures.stale_pairs(obs, {"src/a.py": 1}, shown, "src/a.py r12 changed") == (1, 1)
    # no write after the read: nothing superseded
    assert measures.stale_pairs(obs, {"src/a.py": 0}, shown, "...") == (0, 0)
    # two writes later both observations are superseded
    assert measures.stale_pairs(obs, {"src/a.py": 2}, shown, "...") == (2, 2)


def test_names_write_forms() -> None:
    for text in ("src/a.py r3", "src/a.py@r3", "src/a.py (revision 3)", "see src/a.py revision 3."):
        assert measures.names_write(text, "src/a.py", [3])
    assert not measures.names_write("src/a.py r31", "src/a.py", [3])
    assert not measures.names_write("src/a.py", "src/a.py", [3])


def test_identifiers_rule() -> None:
    text = ("Let me open pydicom/config.py at line 42 and check DataElement, os.path.join, get_value, "
            "__init__ and isEmpty. Then sed -n '120,140p' /testbed/src/x.py; see setup.py:88 e.g. a/b "
            "line 3 x_ IOError")
    ids = measures.identifiers(text)
    for want in ("pydicom/config.py", "/testbed/src/x.py", "setup.py", "DataElement", "os.path.join", "get_value",
                 "__init__", "isEmpty", "IOError", "#42", "#120", "#140", "#88", "a/b"):
        assert want in ids, want
    for unwanted in ("config.py", "e.g", "#3", "Let", "line", "x_"):
        assert unwanted not in ids, unwanted


def test_contains_identifier_whole_tokens() -> None:
    assert measures.contains_identifier("call get_value()", "get_value")
    assert not measures.contains_identifier("call get_values()", "get_value")
    assert measures.contains_identifier("/testbed/pydicom/config.py", "pydicom/config.py")
    assert measures.contains_identifier("   42 | x", "#42")
    assert not measures.contains_identifier("1420", "#42")


def test_grounding_candidates_and_hits() -> None:
    history = "task: fix parse_header in src/reader.py\n... DataSet loaded; line 57 fails"
    root = "You may use bash. Never edit setup.py. parse_header is mentioned in the root too? no"
    nxt = "I'll edit src/reader.py line 57 in parse_header, using DataSet and new_helper"
    cands = measures.grounding_candidates(nxt, history, root="You may use bash.")
    assert cands == ["#57", "DataSet", "parse_header", "src/reader.py"]  # new_helper never appeared
    assert "parse_header" not in measures.grounding_candidates(nxt, history, root)  # the root holds it
    request = "src/reader.py ... parse_header"
    assert measures.grounding_hits(cands, request) == (2, 2)
    assert measures.grounding_hits(cands, request, ["line 57: DataSet(...)"]) == (2, 4)


def _record(call: int, tokens: int, cached: int, **kw) -> CallRecord:
    base = {"call": call, "failed_call": False, "input_tokens": tokens, "cached_tokens": cached, "uncached_tokens": tokens - cached,
                "over_limit": tokens > 100, "by_role": {"system": 1, "tools": 1, "task_state": 1, "observations": tokens - 3},
                "by_zone": {"root": 2, "trunk": 1, "leaf": tokens - 3}, "constraints_retained": 2, "constraints_total": 2,
                "pair_errors": 0, "superseded": 0, "stale": 0, "grounding_candidates": 0, "grounding_hits": 0,
                "grounding_via_handle_hits": 0}
    base.update(kw)
    return CallRecord(**base)


def test_summarize_ratios_of_sums() -> None:
    records = [
        _record(0, 50, 0, grounding_candidates=2, grounding_hits=1, grounding_via_handle_hits=2),
        _record(1, 150, 48, constraints_retained=1, superseded=2, stale=1, pair_errors=1,
                grounding_candidates=4, grounding_hits=4, grounding_via_handle_hits=4),
        _record(2, 100, 96),
    ]
    s = summarize(records, Prices(), reference_input=600)
    assert set(KEYS) <= set(s)
    assert (s["calls"], s["input_tokens"], s["cached_tokens"], s["uncached_tokens"]) == (3, 300, 144, 156)
    assert s["reuse_ratio"] == pytest.approx(0.48)
    assert s["cost_usd"] == pytest.approx((156 * 3.0 + 144 * 0.3) / 1e6)
    assert s["compression_ratio"] == 2.0
    assert s["over_limit"] == 1
    assert s["constraint_retention"] == pytest.approx(5 / 6)
    assert s["pair_errors"] == 1
    assert s["stale_support"] == 1 and s["superseded_pairs"] == 2 and s["stale_support_rate"] == 0.5
    assert s["grounding"] == pytest.approx((0.5 + 1.0) / 2)  # mean over calls with candidates
    assert s["grounding_via_handle"] == 1.0
    assert s["by_role"]["observations"] == 291
    assert summarize(records, Prices(), reference_input=None)["compression_ratio"] is None


def test_stale_items_checks_the_manifest_item_not_the_text() -> None:
    """Eq. 7 per item (issue 11): a superseded observation in the request counts unless its
    manifest item says historical naming a write past the revision read."""
    from app.domain.manifest import Item, Representation
    from ctxd_tools.eval.measures import Observation, stale_items

    def item(call_id: str, zone: str | None, state: str, superseded_by: tuple[str, ...] = (), why: str = "") -> Item:
        return Item(seq=1, event_id=call_id, kind="tool_result", representation=Representation.VERBATIM, why=why,
                    zone=zone, call_id=call_id, state=state, superseded_by=superseded_by)

    obs = [Observation("c1", "timeout: 30\n", (("config.yaml", 0),)), Observation("c2", "x\n", (("b.py", 0),))]
    revisions = {"config.yaml": 1}
    marked = {"c1": item("c1", "leaf", "historical", ("config.yaml@r1",)), "c2": item("c2", "leaf", "current")}
    assert stale_items(obs, revisions, marked) == 0
    unmarked = {"c1": item("c1", "leaf", "current", why="mentions config.yaml@r1")}
    assert stale_items(obs, revisions, unmarked) == 1
    wrong_write = {"c1": item("c1", "leaf", "historical", ("other.yaml@r1",))}
    assert stale_items(obs, revisions, wrong_write) == 1
    elided = {"c1": item("c1", None, "current")}
    assert stale_items(obs, revisions, elided) == 0
