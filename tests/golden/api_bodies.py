"""A pytest plugin that holds the API tests' responses to a recording: every response a
FastAPI TestClient returns during a test (status, and the body with ids, times and durations
normalized), digested per test, compared with ``tests/golden/api_bodies.json``.

Off unless ``CTXD_GOLDEN_API`` is set (tests/conftest.py loads it):

* ``CTXD_GOLDEN_API=record`` writes the digests of this run to ``api_bodies.json.new``;
  ``python -m tests.golden.api_bodies merge A B`` keeps the tests whose digests agree in two
  recordings (a test whose answers vary from run to run, timing-dependent ones, is left out);
* ``CTXD_GOLDEN_API=check`` fails a recorded test whose responses differ, naming the first.

It is how a refactor that must change no response body (422 details included) is checked:
``CTXD_GOLDEN_API=check pytest tests/api``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN_FILE = Path(__file__).with_name("api_bodies.json")
MODE = os.environ.get("CTXD_GOLDEN_API", "")

_HEX_ID = re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_TIMED_KEY = re.compile(r"(?:^|_)(?:ms|seconds|elapsed|duration|took|latency|uptime|age|at|time)(?:_|$)")
_SKIPPED_PATHS = ("/metrics",)


class _Recorder:
    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.digests: list[str] = []

    def _ids(self, text: str) -> str:
        def sub(m: re.Match[str]) -> str:
            return self.ids.setdefault(m.group(0), f"<id{len(self.ids) + 1}>")
        return _TIME.sub("<time>", _HEX_ID.sub(sub, text))

    def _norm(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {self._ids(k): self._norm(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._norm(v, key) for v in value]
        if isinstance(value, str):
            return self._ids(value)
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                        and _TIMED_KEY.search(key)):
            return "<number>" if _TIMED_KEY.search(key) else value
        return value

    def add(self, method: str, url: str, response: Any) -> None:
        path = str(getattr(response.request, "url", url))
        if any(p in path for p in _SKIPPED_PATHS):
            return
        try:
            body: Any = self._norm(response.json())
        except ValueError:  # not JSON (json.JSONDecodeError and UnicodeDecodeError are ValueErrors)
            body = self._ids(response.content.decode("utf-8", "replace"))
        line = json.dumps([method.upper(), self._ids(path), response.status_code, body], sort_keys=True,
                          default=str).encode("utf-8", "surrogatepass")
        self.digests.append(hashlib.sha256(line).hexdigest()[:16])


_RECORDED: dict[str, list[str]] = {}


@pytest.fixture(autouse=True)
def _golden_api_bodies(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    if MODE not in {"record", "check"}:
        yield
        return
    from starlette.testclient import TestClient

    recorder = _Recorder()
    original = TestClient.request

    def request_and_record(self: Any, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        response = original(self, method, url, *args, **kwargs)
        recorder.add(method, str(url), response)
        return response

    monkeypatch.setattr(TestClient, "request", request_and_record)
    yield
    monkeypatch.undo()
    nodeid = request.node.nodeid
    if MODE == "record":
        _RECORDED[nodeid] = recorder.digests
        return
    want = _golden().get(nodeid)
    if want is None or recorder.digests == want:
        return
    first = next((i for i, (a, b) in enumerate(zip(recorder.digests, want)) if a != b), min(len(want), len(recorder.digests)))
    pytest.fail(f"golden API bodies: {len(recorder.digests)} responses (recorded {len(want)}); "
                f"response {first} differs from {GOLDEN_FILE.name}", pytrace=False)


_GOLDEN: dict[str, list[str]] | None = None


def _golden() -> dict[str, list[str]]:
    global _GOLDEN
    if _GOLDEN is None:
        _GOLDEN = json.loads(GOLDEN_FILE.read_text()) if GOLDEN_FILE.exists() else {}
    return _GOLDEN


def pytest_sessionfinish(session: pytest.Session) -> None:
    if MODE == "record" and _RECORDED:
        out = GOLDEN_FILE.with_suffix(".json.new")
        merged = json.loads(out.read_text()) if out.exists() else {}
        merged.update(_RECORDED)
        out.write_text(json.dumps(merged, indent=0, sort_keys=True) + "\n")


def merge(a: Path, b: Path) -> int:
    """Write GOLDEN_FILE from two recordings: the tests whose digests agree in both."""
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    kept = {k: v for k, v in first.items() if v and second.get(k) == v}
    GOLDEN_FILE.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    print(f"kept {len(kept)} tests, {sum(map(len, kept.values()))} responses; left out "
          f"{len([k for k in first if first[k] and second.get(k) != first[k]])} that varied", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "merge":
        raise SystemExit("usage: python -m tests.golden.api_bodies merge RECORDING_A RECORDING_B")
    raise SystemExit(merge(Path(sys.argv[2]), Path(sys.argv[3])))
