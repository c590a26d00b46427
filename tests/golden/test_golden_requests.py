"""The golden test: every request body and manifest served over the shared traces is the one
recorded in tests/golden/requests.json (tests/golden/requests_golden.py says how, and how to
regenerate it when a response is meant to change). A refactor must leave it holding."""

from __future__ import annotations

import json

import pytest

from tests.golden.requests_golden import GOLDEN_FILE, cases, golden_client, key, replay_digests
from tests.traces import TRACE_FILES

pytestmark = pytest.mark.slow

GOLDEN = json.loads(GOLDEN_FILE.read_text())


def test_golden_covers_every_trace() -> None:
    if not TRACE_FILES:
        pytest.skip("the shared traces are not here")
    assert sorted(GOLDEN) == sorted(key(p, t) for p, t in cases(TRACE_FILES))


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    with golden_client() as c:
        yield c


@pytest.mark.parametrize(("profile", "trace"), cases(TRACE_FILES), ids=lambda v: getattr(v, "name", v))
def test_requests_are_golden(client, profile, trace) -> None:  # type: ignore[no-untyped-def]
    got = replay_digests(client, trace, profile)
    want = GOLDEN[key(profile, trace)]
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert got == want, (f"{key(profile, trace)}: {len(got)} requests (golden {len(want)}); "
                         f"the first that differs is request {first}")
