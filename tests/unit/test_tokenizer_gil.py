"""Counting and cutting release the GIL while they tokenize.

``tokenizers.Tokenizer.encode`` takes the GIL back at once after every switch while it
tokenizes; the batch calls release it. The meter counted and cut with ``encode``, so the
count of a new tool output that runs after its POST (a background task in the server's
thread pool, about 0.5 s per MB here) slowed every other thread of the worker to about a
quarter of its speed for as long: the event loop, and the agent's next GET. The fault kind
of ModelTC/LightLLM#1258 (``tokenizer.encode`` on the serving path blocked every other
request) and benbrandt/text-splitter#1182 (bindings holding the GIL, so moving the work to
a thread did not keep the event loop responsive). Now the meter tokenizes with the batch
calls, and the figures are the same as transformers' ``encode``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry, load_profiles
from app.tokenizers.segments import LocalLRUCache

PROFILES = ProfileRegistry(load_profiles())
TRACES = Path("/work/shared/traces/miniswe")


def meter(profile: str = "qwen3") -> Any:
    return MeterRegistry(LocalLRUCache(64 * 1024 * 1024)).get(PROFILES.get(profile))


def trace_texts(limit: int = 240) -> list[str]:
    """Message texts of the shared traces (tool outputs, commands, prose), and hostile ones."""
    out: list[str] = ["", " ", "\n\n", "<|im_start|>user\nhi<|im_end|>", "é e\u0301 Å \u00a0 \t x", "ab" * 3000]
    files = sorted(TRACES.glob("*.traj.json"))
    for path in files[:: max(1, len(files) // 8)]:
        for m in json.loads(path.read_text(encoding="utf-8"))["messages"]:
            if isinstance(m.get("content"), str) and len(out) < limit:
                out.append(m["content"])
    return out


def test_counts_and_cuts_equal_transformers_encode() -> None:
    m = meter()
    texts = trace_texts()
    assert len(texts) > 100
    for t in texts:
        ids = m.tokenizer.encode(t, add_special_tokens=False)
        assert m._count_text(t) == len(ids)
    for t in texts[6:60]:
        spans = m.tokenizer(t, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        from app.domain.text import cut_head_tail

        assert m._head_tail(t, 40, 40) == cut_head_tail(t, spans, 40, 40)


def _ticks(until: threading.Event) -> int:
    """How many times this thread goes round a loop of Python bytecode until ``until`` is set."""
    n = 0
    while not until.is_set():
        n += 1
    return n


def test_counting_a_large_payload_lets_other_threads_run() -> None:
    """While one thread counts a 1.5 MB payload, another keeps running at most of its speed
    alone (about 95% here); with ``encode`` it ran at about 23%."""
    m = meter()
    line = "  File \"src/module.py\", line 12, in test_case: AssertionError: expected 3 got 4\n"
    big = line * (1_500_000 // len(line))
    later = threading.Event()
    threading.Timer(0.3, later.set).start()
    t0 = time.perf_counter()
    alone = _ticks(later) / (time.perf_counter() - t0)  # ticks per second, nothing else running
    started, done = threading.Event(), threading.Event()
    span: list[float] = []

    def count() -> None:
        started.set()
        t = time.perf_counter()
        m._count_text(big)
        span.append(time.perf_counter() - t)
        done.set()

    worker = threading.Thread(target=count)
    worker.start()
    started.wait()
    t1 = time.perf_counter()
    during = _ticks(done) / (time.perf_counter() - t1)
    worker.join()
    assert span[0] > 0.05, "the count must take long enough for the check to mean something"
    assert during > 0.4 * alone, (f"another thread ran at {during / alone:.0%} of its speed during a "
                                   f"{span[0] * 1e3:.0f} ms count")
