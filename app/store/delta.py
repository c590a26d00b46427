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

from typing import Any

import orjson


def _key(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _diff_list(base: list[Any], new: list[Any]) -> list[Any]:
    positions: dict[bytes, list[int]] = {}
    for i, value in enumerate(base):
        positions.setdefault(_key(value), []).append(i)
    ops: list[Any] = []
    for value in new:
        at = positions.get(_key(value), ())
        last = ops[-1] if ops else None
        if isinstance(last, list) and last[1] in at:  # continue a copy run
            last[1] += 1
        elif at:
            ops.append([at[0], at[0] + 1])
        elif isinstance(last, dict):
            last["+"].append(value)
        else:
            ops.append({"+": [value]})
    return ops


def diff(base: Any, new: Any) -> Any:
    """The delta turning ``base`` into ``new`` (None when equal, types included: ``1`` and
    ``true`` differ)."""
    if isinstance(base, dict) and isinstance(new, dict):
        changed = {}
        for key, value in new.items():
            if key in base:
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
    if isinstance(base, list) and isinstance(new, list):
        return None if _key(base) == _key(new) else {"[": _diff_list(base, new)}
    if type(base) is type(new) and base == new:
        return None
    return {"=": new}


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
