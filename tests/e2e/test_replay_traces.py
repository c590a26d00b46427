"""Every shared trace through the HTTP API: budget, pairing, constraints, handles, exact counts."""

from __future__ import annotations

import statistics

import pytest

from tests.e2e.replay_checks import replay_and_check
from tests.traces import TRACE_FILES

QUICK = [p for p in TRACE_FILES if p.name == "pvlib__pvlib-python-1072__reasoner.traj.json"]
PG_TRACES = [p for p in TRACE_FILES if p.name in {
    "pvlib__pvlib-python-1072__reasoner.traj.json", "pydicom__pydicom-901__chat.traj.json",
    "sqlfluff__sqlfluff-1733__chat.traj.json"}]


def test_traces_present() -> None:
    assert len(TRACE_FILES) == 32


@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.name)
def test_quick_replay_with_exact_counts(sqlite_client, qwen3_ids, path) -> None:
    stats = replay_and_check(sqlite_client, path, template_ids=qwen3_ids)
    assert stats.requests == 16


@pytest.mark.slow
def test_replay_all_traces_sqlite(sqlite_client, qwen3_ids) -> None:
    """All 32 traces; the served count equals apply_chat_template on every request."""
    all_stats = [replay_and_check(sqlite_client, p, template_ids=qwen3_ids) for p in TRACE_FILES]
    requests = sum(s.requests for s in all_stats)
    tokens = sum(s.tokens for s in all_stats)
    elided = sum(s.requests_with_elision for s in all_stats)
    cached = sum(s.cached_tokens for s in all_stats)
    print(f"\n32 traces: {requests} requests, {tokens} request tokens, {elided} requests with elided turns, "
          f"median {statistics.median(t for s in all_stats for t in s.totals)} tokens, predicted cached {cached} "
          f"({cached / tokens:.3f}), prefix divergences {sum(s.divergences for s in all_stats)}")
    assert requests == 2498
    assert elided > 0, "the longest traces overflow 28,160 tokens: eviction must have run"


@pytest.mark.slow
@pytest.mark.parametrize("path", PG_TRACES, ids=lambda p: p.name)
def test_replay_on_postgres(postgres_client, path) -> None:
    stats = replay_and_check(postgres_client, path)
    assert stats.requests > 0


# traces whose inferred writes supersede reads of files the agent edits most often
INVALIDATING = [p for p in TRACE_FILES if p.name in {
    "pvlib__pvlib-python-1854__chat.traj.json", "sqlfluff__sqlfluff-1733__reasoner.traj.json"}]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "notice"])
@pytest.mark.parametrize("path", INVALIDATING, ids=lambda p: p.name)
def test_replay_with_invalidation_exact_counts(sqlite_client, qwen3_ids, path, mode) -> None:
    """The select policy's events (inferred bindings and writes): tombstones in place
    (``auto``: superseded reads of edited files) and appended notices (``notice``) are
    counted exactly (apply_chat_template on every served body), a prefix break in the leaf
    is always one of them, and every manifest, with its per-item invalidation fields, reads
    back as served."""
    stats = replay_and_check(sqlite_client, path, template_ids=qwen3_ids, infer_bindings=True, invalidation=mode)
    assert stats.requests > 50
    if mode == "auto":
        assert stats.tombstones > 0 and stats.invalidation_divergences > 0
    else:
        assert stats.noticed > 0 and stats.tombstones == 0
