"""The save step's fast paths for a manifest's JSON (issue 9, speed) give what the slow
paths give: the served and stored bytes built by parts (app/store/json_parts.py) are
``orjson.dumps`` of the whole; a delta that skips the top-level values whose bytes did not
change is the delta of the full walk; ``Manifest.to_json(previous=...)``, which takes the
leading items' JSON from the previous manifest, is ``to_json()``."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.manifest import Item, Representation, shared_prefix
from app.store import json_parts
from app.store.delta import apply, diff
from tests.unit.test_delta import json_values
from tests.unit.test_planner import plan
from tests.unit.test_window_policy import session_events

keys = st.text(max_size=3)
json_dicts = st.dictionaries(keys, json_values | st.lists(json_values, max_size=5), max_size=6)


@settings(max_examples=300, deadline=None)
@given(json_dicts, st.integers(0, 2**40))
def test_joined_parts_are_orjsons_bytes(data: dict[str, Any], manifest_id: int) -> None:
    parts = json_parts.encode(data)
    assert json_parts.join(parts) == orjson.dumps(data)
    data.pop("id", None)
    assert json_parts.join(json_parts.encode(data), {"id": manifest_id}) == orjson.dumps(data | {"id": manifest_id})


def _next_of(base: dict[str, Any], picks: list[int], copies: list[bool], extra: list[Any],
             changed: dict[str, Any]) -> dict[str, Any]:
    """A dict like a session's next manifest: its lists made of base's elements (the same
    objects, reordered, dropped, some deep copies) and new ones; some values changed."""
    new: dict[str, Any] = {}
    for key, value in base.items():
        if isinstance(value, list) and value:
            taken = [value[p % len(value)] for p in picks]
            new[key] = [copy.deepcopy(v) if i < len(copies) and copies[i] else v for i, v in enumerate(taken)] + extra
        else:
            new[key] = value
    return new | changed


@settings(max_examples=300, deadline=None)
@given(json_dicts, st.lists(st.integers(0, 30), max_size=12), st.lists(st.booleans(), max_size=12),
       st.lists(json_values, max_size=3), st.dictionaries(keys, json_values, max_size=2))
def test_parts_reused_by_identity_are_the_parts_built_from_nothing(base: dict[str, Any], picks: list[int],
                                                                   copies: list[bool], extra: list[Any],
                                                                   changed: dict[str, Any]) -> None:
    new = _next_of(base, picks, copies, extra, changed)
    base_parts = json_parts.encode(base)
    fast = json_parts.encode(new, base, base_parts)
    assert fast == json_parts.encode(new)
    assert json_parts.join(fast) == orjson.dumps(new)
    # the delta that skips what serializes alike is the full walk's, and rebuilds ``new``
    unchanged = json_parts.unchanged(base_parts, fast)
    assert diff(base, new, unchanged=unchanged) == diff(base, new)
    assert orjson.dumps(apply(base, diff(base, new, unchanged=unchanged))) == orjson.dumps(new)


def test_a_shared_element_reuses_its_bytes_and_equal_values_are_unchanged() -> None:
    items = [{"seq": i, "why": "recent turn"} for i in range(50)]
    base = {"last_seq": 50, "budget": {"window": 100}, "items": items}
    base_parts = json_parts.encode(base)
    new = {"last_seq": 51, "budget": {"window": 100}, "items": items[2:] + [{"seq": 50}]}
    parts = json_parts.encode(new, base, base_parts)
    items_parts = base_parts["items"]
    assert isinstance(items_parts, list)
    assert all(a is b for a, b in zip(parts["items"], items_parts[2:])), "the shared items' bytes, not new ones"
    assert json_parts.unchanged(base_parts, parts) == {"budget"}
    assert diff(base, new, unchanged={"budget"}) == {"{": {"last_seq": {"=": 51},
                                                          "items": {"[": [[2, 50], {"+": [{"seq": 50}]}]}}}
    # equal bytes mean equal JSON with types: 1 and true differ, so they are not unchanged
    assert json_parts.unchanged(json_parts.encode({"a": 1}), json_parts.encode({"a": True})) == frozenset()


def test_a_literal_after_a_copy_is_looked_for_where_the_copy_ended_not_from_the_start() -> None:
    """An extending manifest: after the shared run, new items are literals (none is looked
    up again among the first items); a changed item in the middle of shared ones costs one
    comparison, and the shared items after it are copies."""
    items = [{"seq": i, "why": "recent turn"} for i in range(300)]
    new = items + [{"seq": 300}, {"seq": 301}, {"seq": 302}]
    assert diff(items, new) == {"[": [[0, 300], {"+": [{"seq": 300}, {"seq": 301}, {"seq": 302}]}]}
    tombstoned = items[:20] + [{"seq": 20, "why": "historical"}] + items[21:] + [{"seq": 300}]
    assert diff(items, tombstoned) == {"[": [[0, 20], {"+": [{"seq": 20, "why": "historical"}]}, [21, 300],
                                            {"+": [{"seq": 300}]}]}


def _items(n: int) -> tuple[Item, ...]:
    return tuple(Item(seq=i, event_id=f"e{i}", kind="message", representation=Representation.VERBATIM,
                      why="recent turn", zone="leaf") for i in range(1, n + 1))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 39), max_size=30), st.integers(0, 5), st.booleans())
def test_manifest_json_from_the_previous_one_is_its_json(picks: list[int], new: int, elided: bool) -> None:
    """``to_json(previous=(m, m.to_json()))`` is ``to_json()`` for any next manifest whose
    items are some of ``m``'s (the same objects: reused from GET to GET), equal copies and new ones."""
    m = plan(session_events([[30], [80, 5], [10]])).manifest
    pool = _items(40)
    first = replace(m, items=pool[:30], elided=pool[30:] if elided else ())
    fresh = tuple(replace(i, seq=i.seq + 100) for i in _items(new))
    second = replace(first, items=tuple(pool[p] for p in picks) + fresh, elided=pool[35:] if elided else ())
    first_json = first.to_json()
    got = second.to_json(previous=(first, first_json))
    assert orjson.dumps(got) == orjson.dumps(second.to_json())
    n = shared_prefix(first.items, second.items)
    assert all(a is b for a, b in zip(got["items"][:n], first_json["items"])), "the leading items' JSON reused"
