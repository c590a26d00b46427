"""What a GET takes from the previous GET of its session (issue 9, speed): the openai
body's leaf JSON (app/wire/openai.py ``serialize_bytes(memo=...)``), the layout digest's
leaf entries (app/domain/prefix_layout.py ``layout_digest(memo=...)``) and the window
items' cut figures (app/domain/planner.py ``_cut_items``). Whatever the sequence of
requests (extending, diverging, shorter, equal values in new objects, a message orjson
refuses), each equals what is computed without the memo, and the bytes equal
``orjson.dumps(body)``."""

from __future__ import annotations

from typing import Any

import orjson

from app.domain.layout import Conversation, LeafMessage, LeafToolCall
from app.domain.session_memo import SessionMemo
from app.wire.openai import serialize_bytes

KW: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "max_tokens": 1000, "prompt_cache_key": "ctxd-k"}
TOOLS = ({"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},)


def _messages() -> dict[str, LeafMessage]:
    return {
        "u": LeafMessage("user", "Fix the parser \u00e9\U0001f600.", seq=1),
        "a": LeafMessage("assistant", "Let me look.", tool_calls=(LeafToolCall("c1", "bash", '{"command": "ls"}'),),
                         seq=2),
        "t": LeafMessage("tool", "a.py\nb.py\n", call_id="c1", name="bash", seq=3),
        "b": LeafMessage("assistant", "Done.", seq=4),
        "t2": LeafMessage("tool", "tombstone", call_id="c1", name="bash", seq=3),
        "bad": LeafMessage("user", "lone \ud800 surrogate", seq=5),  # orjson refuses it
    }


def _conversation(leaf: tuple[LeafMessage, ...], trunk: str = "contract") -> Conversation:
    return Conversation(system="You are careful.", tools=TOOLS, trunk=trunk, leaf=leaf)


def test_bodies_with_the_memo_equal_bodies_without_it_whatever_the_sequence() -> None:
    m = _messages()
    fresh = _messages()  # equal values, other objects
    leaves = [
        (m["u"],), (m["u"], m["a"]), (m["u"], m["a"], m["t"]), (m["u"], m["a"], m["t"], m["b"]),  # extending
        (m["u"], m["a"], m["t2"], m["b"]),  # rewritten in place (a tombstone)
        (m["u"],), (),  # shorter, empty
        (fresh["u"], fresh["a"], fresh["t2"]),  # equal messages in new objects
        (m["u"], m["a"], m["t2"], m["b"], m["bad"]),  # refused: no bytes
        (m["u"], m["a"], m["t2"], m["b"], m["t"]),
    ]
    memo = SessionMemo()
    for i, leaf in enumerate(leaves):
        trunk = f"contract {i % 3}"  # the trunk changes too: only the leaf's JSON is reused
        body, encoded = serialize_bytes(_conversation(leaf, trunk), **KW, memo=memo)
        plain, plain_encoded = serialize_bytes(_conversation(leaf, trunk), **KW)
        assert body == plain and encoded == plain_encoded, i
        if m["bad"] in leaf:
            assert encoded is None
        else:
            assert encoded == orjson.dumps(body), i
            assert [x["role"] for x in body["messages"][2:]] == [x.role for x in leaf]


def test_an_extending_body_takes_the_previous_leaf_whole() -> None:
    """The previous leaf's messages are not converted again: their dicts are the ones the
    previous body held even when the messages' own memos were dropped."""
    m = _messages()
    memo = SessionMemo()
    first, _ = serialize_bytes(_conversation((m["u"], m["a"])), **KW, memo=memo)
    m["u"].memo.clear()
    m["a"].memo.clear()
    second, encoded = serialize_bytes(_conversation((m["u"], m["a"], m["t"])), **KW, memo=memo)
    assert second["messages"][2] is first["messages"][2] and second["messages"][3] is first["messages"][3]
    assert encoded == orjson.dumps(second)
    assert "openai" not in m["u"].memo, "the prefix was not converted again"
    assert "openai" in m["t"].memo


def test_layout_digests_with_the_memo_equal_digests_without_it() -> None:
    """app/domain/prefix_layout.py ``layout_digest(memo=...)``: the last digest's leaf
    entries and trunk hash are reused for a leaf that begins with the last one's; the
    digest equals the one computed without the memo whatever the sequence."""
    from app.domain.prefix_layout import layout_digest

    m = _messages()
    fresh = _messages()
    leaves = [(m["u"], m["a"]), (m["u"], m["a"], m["t"]), (m["u"], m["a"], m["t2"], m["b"]), (m["u"],), (),
              (fresh["u"], fresh["a"], fresh["t2"], fresh["b"], fresh["bad"])]
    memo = SessionMemo()
    for i, leaf in enumerate(leaves):
        conversation = _conversation(leaf, trunk=f"contract {i // 2}")
        by_zone = {"root": 10 + i, "trunk": 20}
        got = layout_digest(conversation, by_zone=by_zone, cut_seq=i, memo=memo)
        for x in leaf:  # the messages' own memos dropped: computed again without the session memo
            x.memo.clear()
        assert got == layout_digest(conversation, by_zone=by_zone, cut_seq=i), i
        assert [e[0] for e in got["leaf"]] == [x.seq for x in leaf]


def test_cut_item_figures_with_the_memo_equal_figures_without_it() -> None:
    """planner ``_cut_items``: the sum of the items' elided tokens and whether every cut or
    elided item's count is known, for windows that extend, change in place (a count
    learned later), shrink, or hold equal items in new objects."""
    from app.domain.manifest import Item, Representation
    from app.domain.planner import _cut_items

    def item(seq: int, cut: int = 0, known: bool | None = True, rep: Representation = Representation.VERBATIM) -> Item:
        return Item(seq=seq, event_id=f"e{seq}", kind="tool_result", representation=rep, why="w",
                    elided_tokens=cut, tokens_known=known)

    a, b = item(1), item(2, cut=40, rep=Representation.HEAD_TAIL)
    c_unknown = item(3, cut=0, known=False, rep=Representation.HEAD_TAIL)
    c_known = item(3, cut=25, rep=Representation.HEAD_TAIL)
    d = item(4, known=False)  # not cut: an unknown count does not matter
    windows = [(a,), (a, b), (a, b, c_unknown), (a, b, c_unknown, d), (a, b, c_known, d), (a, b), (),
               (item(1), item(2, cut=40, rep=Representation.HEAD_TAIL), item(3, cut=25, rep=Representation.HEAD_TAIL))]
    expected = [(0, True), (40, True), (40, False), (40, False), (65, True), (40, True), (0, True), (65, True)]
    memo = SessionMemo()
    for window, want in zip(windows, expected):
        assert _cut_items(window, memo) == _cut_items(window, None) == want, window
