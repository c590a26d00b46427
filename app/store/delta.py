"""JSON deltas: a manifest is stored as what changed since its session's previous manifest
in the same format (issue 9, bounded storage).

A delta of ``base`` to ``new`` (both JSON values) is:

* absent (``None`` from :func:`diff`) when they are equal;
* ``{"=": value}``: replace by ``value``;
* ``{"{": {key: delta}, "-": [keys]}``: a dict patch (keys not named are unchanged,
  ``-`` lists removed keys; new keys carry ``{"=": value}``);
* ``{"[": [op, ...]]}``: a list rebuilt from copies of ``base`` slices (``[start, stop]``)
  and literal runs (``{"+": [values]}``). A manifest's lists change at their ends (new
  events appended, evicted ones dropped from the front), so an extending GET's delta is a
  copy and a few literals.

:func:`apply` inverts :func:`diff`: ``apply(base, diff(base, new)) == new`` for any JSON
values (dict key order included).
"""

from __future__ import annotations

import operator
from collections.abc import Container
from typing import Any

import orjson

from app.domain.manifest import shared_prefix


def _key(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _diff_list(base: list[Any], new: list[Any]) -> list[Any]:
    # the leading run of the same objects (an extending manifest's items up to the newest:
    # consecutive manifests share their unchanged items, see ``Item.to_json``); the walk
    # below starts after it
    prefix = shared_prefix(base, new)
    ops: list[Any] = [[0, prefix]] if prefix else []
    positions: dict[bytes, list[int]] | None = None
    # values shared with base (the same objects: consecutive manifests share their unchanged
    # items) are found by identity; once one is, a value found no other way is taken as new
    # (a literal: always correct) instead of serializing every base value to look it up
    by_id = {id(value): j for j, value in reversed(list(enumerate(base[prefix:], prefix)))}
    shared = prefix > 0
    copied = prefix  # where in base the last copy ended
    i = prefix
    while i < len(new):
        at = by_id.get(id(new[i]))
        if at is not None and base[at] is new[i]:
            shared = True
        else:
            # a run of new values equal to a run of base values (C-level ==) from where the last
            # copy ended: at that very place once values are found shared (the others are then
            # new: a changed item, an appended one), in the 64 after it while none is
            span = 1 if shared else 64
            at = next((j for j in range(copied, min(len(base), copied + span)) if _same(base[j], new[i])), None)
        if at is None and not shared:
            if positions is None:
                positions = {}
                for j, value in enumerate(base):
                    positions.setdefault(_key(value), []).append(j)
            found = positions.get(_key(new[i]))
            at = found[0] if found else None
        if at is None:
            if ops and isinstance(ops[-1], dict):
                ops[-1]["+"].append(new[i])
            else:
                ops.append({"+": [new[i]]})
            i += 1
            continue
        end = at + 1
        i += 1
        while i < len(new) and end < len(base):
            a, b = base[end], new[i]
            if a is not b and not _same(a, b):  # the same object: consecutive manifests share unchanged items
                break
            end, i = end + 1, i + 1
        if ops and isinstance(ops[-1], list) and ops[-1][1] == at:
            ops[-1][1] = end  # continues the previous copy
        else:
            ops.append([at, end])
        copied = end
    return ops


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON, types included (``1`` is not ``true``): the same object (consecutive
    manifests share their unchanged items, see ``Item.to_json``), else Python's == first
    (fast, in C), then, only when it says equal, the serialized forms."""
    if a is b:
        return True
    if type(a) is list and type(b) is list and len(a) == len(b) and all(map(operator.is_, a, b)):
        return True
    return bool(a == b) and (type(a) is type(b) and isinstance(a, str) or _key(a) == _key(b))


def diff(base: Any, new: Any, *, unchanged: Container[str] = frozenset()) -> Any:
    """The delta turning ``base`` into ``new`` (None when equal, types included: ``1`` and
    ``true`` differ). ``unchanged``: keys of two dicts whose values the caller knows are
    equal JSON (their serialized bytes are equal, :func:`app.store.json_parts.unchanged`):
    not compared again; the delta is the same as without it."""
    if isinstance(base, dict) and isinstance(new, dict):
        return _diff_dict(base, new, unchanged)
    if isinstance(base, list) and isinstance(new, list):
        return None if _same(base, new) else {"[": _diff_list(base, new)}
    if type(base) is type(new) and base == new:
        return None
    return {"=": new}


def _diff_dict(base: dict[str, Any], new: dict[str, Any], unchanged: Container[str]) -> Any:
    changed = {}
    for key, value in new.items():
        if key in base:
            if key in unchanged:
                continue
            d = diff(base[key], value)
            if d is not None:
                changed[key] = d
        else:
            changed[key] = {"=": value}
    removed = [k for k in base if k not in new]
    reordered = list(new) != [k for k in base if k in new] + [k for k in new if k not in base]
    if not changed and not removed and not reordered:
        return None
    out: dict[str, Any] = {"{": changed}
    if removed:
        out["-"] = removed
    if reordered:
        out["order"] = list(new)  # keep the served key order exactly
    return out


def apply(base: Any, delta: Any) -> Any:
    """``base`` with ``delta`` applied (``delta`` None: ``base`` itself)."""
    if delta is None:
        return base
    if "=" in delta:
        return delta["="]
    if "{" in delta:
        removed = set(delta.get("-", ()))
        changed = delta["{"]
        out = {k: apply(v, changed.get(k)) for k, v in base.items() if k not in removed}
        for key, d in changed.items():
            if key not in base:
                out[key] = d["="]
        if "order" in delta:
            out = {k: out[k] for k in delta["order"]}
        return out
    values: list[Any] = []
    for op in delta["["]:
        if isinstance(op, dict):
            values.extend(op["+"])
        else:
            values.extend(base[op[0]:op[1]])
    return values
