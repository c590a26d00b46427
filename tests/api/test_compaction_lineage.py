"""The lineage of a compaction technique lets a reader find the raw bytes behind the handle
(issue 10 item 1; seed 000 section 4.5.2): real tool outputs are posted as tool results,
compacted (terminal, dedup, diff, outline, slice, digest), and every kept or omitted range
named by a :class:`Transform`, and every ``lines a-b of H`` in a marker, is read back with
``GET /v1/handles/{H}?lines=a:b`` over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient

from app.domain.compaction import (
    as_source,
    dedup_repeats,
    digest_tool_result,
    fold_diff,
    outline_python,
    slice_failures,
    strip_terminal,
)
from app.domain.compaction.lineage import body_of
from tests.api.test_api import new_session
from tests.tool_outputs import find

EXAMPLES = [
    {"trace": "pvlib__pvlib-python-1072__chat", "command": r"test_fuentes -xvs 2>&1 \| tail -50"},
    {"trace": "pylint-dev__astroid-1333__chat", "command": r"git diff d0775d5f\.\.e36b4388 -- astroid/moduti"},
    {"trace": "pvlib__pvlib-python-1707__reasoner", "command": r"^cat \./pvlib/iam\.py$"},
    {"trace": "sqlfluff__sqlfluff-2419__reasoner", "command": r"yaml_test_cases_test\.py -x 2>&1 \| tail -10"},
]


def test_every_named_range_reads_back_its_raw_lines(client: TestClient) -> None:
    sid = new_session(client)
    outputs = [find(**example) for example in EXAMPLES]
    outputs.append(find(command=r"pip install -e \.", output="Successfully installed"))
    events = []
    for k, o in enumerate(outputs):
        events.append({"event_id": f"a{k}", "kind": "message", "role": "assistant", "content": "",
                       "tool_calls": [{"call_id": f"c{k}", "name": "bash", "arguments": json.dumps({"command": o.command})}]})
        events.append({"event_id": f"r{k}", "kind": "tool_result", "call_id": f"c{k}", "payload": o.output,
                       "exit_code": o.exit_code})
    r = client.post(f"/v1/sessions/{sid}/events", json={"events": events})
    assert r.status_code in (200, 201), r.text
    checked = 0
    for o in outputs:
        raw_lines = o.output.encode().splitlines(keepends=True)
        results = [
            slice_failures(dedup_repeats(strip_terminal(o.output)), budget_lines=25),
            fold_diff(o.output, budget_lines=20),
            outline_python(o.output),
            digest_tool_result(o.output, command=o.command, exit_code=o.exit_code),
        ]
        for result in results:
            assert result.source == o.handle
            for transform in result.lineage:
                for a, b in (*transform.kept, *transform.omitted):
                    got = client.get(f"/v1/handles/{transform.source}?lines={a}:{b}")
                    assert got.status_code == 200 and got.content == b"".join(raw_lines[a - 1:b])
                    checked += 1
            for line, origin in zip(result.lines, result.origins, strict=True):
                for m in re.finditer(r"lines? (\d+)(?:-(\d+))? of ([0-9a-f]{12})", line):
                    a, b = int(m.group(1)), int(m.group(2) or m.group(1))
                    got = client.get(f"/v1/handles/{m.group(3)}?lines={a}:{b}")
                    assert got.status_code == 200 and got.content == b"".join(raw_lines[a - 1:b])
                    checked += 1
                if origin is not None and result.lineage and result.lineage[-1].kind in ("slice", "diff_fold"):
                    raw = client.get(f"/v1/handles/{o.handle[:12]}?lines={origin[0]}:{origin[1]}").content.decode()
                    assert body_of(line) == body_of(raw) or "[ctxd: line cut" in line
    assert checked > 100
    assert as_source(outputs[0].output).source == outputs[0].handle
