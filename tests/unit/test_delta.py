"""JSON deltas of stored manifests (app/store/delta.py): apply(base, diff(base, new)) == new."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.delta import apply, diff

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=3),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=2), children, max_size=5),
    max_leaves=30,
)


def same(a, b) -> bool:
    return orjson.dumps(a) == orjson.dumps(b)  # equal with types and key order


@settings(max_examples=400, deadline=None)
@given(json_values, json_values)
def test_apply_inverts_diff(base, new) -> None:
    assert same(apply(base, diff(base, new)), new)
    assert diff(new, new) is None


def test_an_appended_list_is_a_copy_and_a_literal() -> None:
    items = [{"seq": i, "why": "recent turn"} for i in range(100)]
    base = {"last_seq": 100, "items": items, "tokens": {"total": 9000}}
    new = {"last_seq": 102, "items": items[3:] + [{"seq": 101}, {"seq": 102}], "tokens": {"total": 9100}}
    d = diff(base, new)
    assert d == {"{": {"last_seq": {"=": 102}, "items": {"[": [[3, 100], {"+": [{"seq": 101}, {"seq": 102}]}]},
                       "tokens": {"{": {"total": {"=": 9100}}}}}
    assert len(orjson.dumps(d)) < 150 < len(orjson.dumps(new))
    assert diff({"a": 1}, {"a": True}) == {"{": {"a": {"=": True}}}
