"""app/domain/recall.py (issue 14 item 3): substring line ranges as ``?lines=a:b`` slices
them, word / exact / case-insensitive tiers, query and cursor checks, the recall tool."""

from __future__ import annotations

import pytest

from app.domain import recall
from app.domain.errors import InvalidParameter
from app.domain.text import split_lines
from app.domain.types import Contract, Session


def _lines(text: str, item: recall.LineRange) -> str:
    return "".join(split_lines(text)[item.start - 1:item.end])


def test_ranges_are_the_lines_split_lines_counts() -> None:
    text = "a\rb get_x\n\x0cget_x\u2028tail\nlast get_x"   # \r, form feed, U+2028 are not line ends
    ranges = recall.find_ranges(text, "get_x")
    assert [r.lines for r in ranges] == ["1:1", "2:2", "3:3"]
    assert all("get_x" in _lines(text, r) for r in ranges)
    assert recall.line_count(text) == len(split_lines(text)) == 3
    assert recall.line_count("") == 0 and recall.line_count("x\n") == 1


def test_word_exact_and_folded_tiers() -> None:
    assert recall.rank(recall.find_ranges("call get_x(1)", "get_x")) == recall.WORD
    assert recall.rank(recall.find_ranges("forget_xy", "get_x")) == recall.EXACT
    assert recall.rank(recall.find_ranges("GET_X", "get_x")) == recall.FOLDED
    assert recall.rank(recall.find_ranges("nothing here", "get_x")) is None
    # a query starting or ending with punctuation stands alone next to a letter
    assert recall.rank(recall.find_ranges("a.b(c", ".b(")) == recall.WORD
    assert recall.sort_key(recall.WORD, 5) < recall.sort_key(recall.WORD, 3) < recall.sort_key(recall.EXACT, 9)


def test_case_folding_that_changes_length_keeps_the_lines_right() -> None:
    text = "İİİ\nİstanbul_code here\n"   # 'İ'.lower() is two characters: offsets must be the text's
    (only,) = recall.find_ranges(text, "istanbul_code")
    assert only.lines == "2:2" and not only.exact


def test_context_is_clamped_and_overlaps_merge() -> None:
    text = "".join(f"{n} {'hit_me' if n in (1, 4, 10) else ''}\n" for n in range(1, 11))
    assert [r.lines for r in recall.find_ranges(text, "hit_me", context=2)] == ["1:6", "8:10"]
    assert [r.matches for r in recall.find_ranges(text, "hit_me", context=2)] == [2, 1]
    assert len(recall.find_ranges(text, "hit_me", max_matches=2)) == 2


def test_queries_and_cursors_are_checked() -> None:
    assert recall.check_query("abc") == "abc"
    for bad in ("ab", "  ab ", "a\x00bc", "x" * 501):
        with pytest.raises(InvalidParameter):
            recall.check_query(bad)
    assert recall.parse_cursor(recall.cursor_of(recall.EXACT, 12)) == (1, -12)
    for bad in ("", "1", "3.1", "-1.2", "1.-2", "a.b", "1.2.3"):
        with pytest.raises(InvalidParameter):
            recall.parse_cursor(bad)


def test_searchable_texts_of_each_kind() -> None:
    calls = [{"call_id": "c", "name": "bash", "arguments": '{"command": "ls"}'}]
    assert recall.searchable_texts("message", {"content": "hi", "reasoning": None, "tool_calls": calls}) == [
        ("content", "hi"), ("tool_calls", 'bash {"command": "ls"}')]
    assert recall.searchable_texts("tool_result", {"handle": "h"}, "a\x00b") == [("payload", "a\ufffdb")]
    assert recall.searchable_texts("tool_result", {"handle": "h"}, "") == []
    assert recall.searchable_texts("artifact_write", {"artifact": "src/a.py"}) == [("artifact", "src/a.py")]
    assert recall.searchable_texts("hypothesis", {"text": "t", "key": "k"}) == [("text", "t")]


def test_the_recall_tool_is_added_once_after_the_sessions_tools() -> None:
    bash = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    session = Session(id="s", profile="p", contract=Contract(goal="g", constraints=()), system="", tools=(bash,))
    served = recall.with_recall_tool(session)
    assert served.tools == (bash, recall.RECALL_TOOL)
    assert recall.with_recall_tool(served) == served
    schema = recall.RECALL_TOOL["function"]["parameters"]
    assert schema["type"] == "object" and schema["properties"]["query"]["minLength"] == recall.MIN_QUERY_CHARS
