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


@settings(max_examples=300, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=12), st.lists(st.integers(0, 30), max_size=16),
       st.lists(json_values, max_size=4), st.lists(st.booleans(), max_size=16))
def test_apply_inverts_diff_when_values_are_shared(base, picks, extra, copies) -> None:
    """Consecutive manifests share their unchanged items (the same objects): the delta finds
    them by identity; copies equal in value and new values go in as they are."""
    import copy

    new = [base[p % len(base)] for p in picks]
    new = [copy.deepcopy(v) if i < len(copies) and copies[i] else v for i, v in enumerate(new)] + extra
    for wrap in (lambda v: v, lambda v: {"items": v, "n": len(v)}):
        assert same(apply(wrap(base), diff(wrap(base), wrap(new))), wrap(new))


def test_shared_items_are_copied_by_identity_without_serializing_the_base(monkeypatch) -> None:
    from app.store import delta

    items = [{"seq": i, "why": "recent turn"} for i in range(300)]
    new = items[5:] + [{"seq": 300}]
    calls = []
    real = delta._key
    monkeypatch.setattr(delta, "_key", lambda v: calls.append(v) or real(v))
    assert diff(items, new) == {"[": [[5, 300], {"+": [{"seq": 300}]}]}
    assert len(calls) <= 2 * 64, "the base was not serialized value by value"


def test_a_shared_leading_run_is_one_copy_and_a_continuing_copy_is_merged() -> None:
    """An extending manifest: the same item objects up to the newest (found in one C-level
    scan), then a changed last item and a new one: one copy op and the literals. A value
    equal to the base's at the end of that run (a copy, not the same object) continues the
    copy instead of starting a second one."""
    items = [{"seq": i, "why": "recent turn"} for i in range(400)]
    new = items[:399] + [{"seq": 399, "why": "now folded"}, {"seq": 400}]
    assert diff(items, new) == {"[": [[0, 399], {"+": [{"seq": 399, "why": "now folded"}, {"seq": 400}]}]}
    equal_copy = items[:10] + [dict(items[10])] + items[11:] + [{"seq": 400}]
    assert diff(items, equal_copy) == {"[": [[0, 400], {"+": [{"seq": 400}]}]}
    assert same(apply(items, diff(items, equal_copy)), equal_copy)
