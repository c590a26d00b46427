"""The head + tail cut of a capped tool output with the real tokenizers (issue 9, item 7):
windows at the ends give the cuts a whole-text cut gives, the tokenizer never sees more
than windows of a long output, and the marker names the handle, the elided lines (split
on "\\n" only) and bytes exactly."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.assembly import bound_tool_output
from app.domain.cuts import WINDOW_CHARS_PER_TOKEN, WINDOW_MARGIN, elided_span, windowed_head_tail
from app.domain.types import ToolResultEvent
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry, load_profiles
from app.tokenizers.segments import LocalLRUCache

PROFILES = ProfileRegistry(load_profiles())
METERS: dict[str, Any] = {}


def meter(profile: str) -> Any:
    if profile not in METERS:
        METERS[profile] = MeterRegistry(LocalLRUCache(1 << 26)).get(PROFILES.get(profile))
    return METERS[profile]


def log_text(n_lines: int) -> str:
    return "".join(f"{i:06d} INFO worker-{i % 7}: processed batch {i} in {i % 97}ms\r\n" if i % 11 == 0 else
                   f"{i:06d} INFO worker-{i % 7}: processed batch {i} in {i % 97}ms\n" for i in range(1, n_lines + 1))


TEXTS = {
    "log": log_text(3_000),
    "cjk-emoji": "日志条目：处理完成 🚀✅ " * 4_000,
    "one-long-line": '{"k": "' + "x" * 120_000 + '"}',
    "long-whitespace-tokens": ("a" + " " * 3_000) * 40,
    "short": "README.md\nsetup.py\n",
}


TYPICAL = ("log", "short", "cjk-emoji")


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
@pytest.mark.parametrize("name", sorted(TEXTS))
def test_windowed_cut_matches_the_whole_text_cut(profile: str, name: str) -> None:
    """Exact prefix and suffix, about the tokens asked for; on typical text the very cuts
    of a whole-text cut. Within one very long pre-token (a run of 120k "x", 3,000 spaces)
    BPE merges depend on the whole run, so a window's tail may start a few characters
    off; the request is measured exactly either way."""
    m = meter(profile)
    text = TEXTS[name]
    head, tail, elided = m._head_tail(text, 400, 300)
    got = windowed_head_tail(text, 400, 300, m._head_tail)
    if not elided:
        assert got is None
        return
    assert got is not None
    if name in TYPICAL:
        assert got == (head, tail)
    w_head, w_tail = got
    assert text.startswith(w_head) and text.endswith(w_tail) and len(w_head) + len(w_tail) < len(text)
    # about the tokens asked for: a cut moves back to a line boundary within 160 characters
    # (LINE_MARGIN), so on lines of text the parts end and start on whole lines
    assert 400 - 60 <= m.count_text(w_head) <= 404 and 300 - 60 <= m.count_text(w_tail) <= 304
    if name == "log":
        assert w_head.endswith("\n") and text[len(text) - len(w_tail) - 1] == "\n", "whole lines"


def test_the_tokenizer_sees_only_windows_of_a_long_output() -> None:
    m = meter("qwen3")
    text = log_text(40_000)  # ~2 MB
    assert len(text.encode()) > 2_000_000
    seen: list[int] = []

    def spying_cut(piece: str, head: int, tail: int) -> tuple[str, str, int]:
        seen.append(len(piece))
        return m._head_tail(piece, head, tail)

    head, tail = windowed_head_tail(text, 1024, 1024, spying_cut)
    assert (head, tail) == m._head_tail(text, 1024, 1024)[:2]
    assert max(seen) <= 4 * (1024 + WINDOW_MARGIN) * WINDOW_CHARS_PER_TOKEN and sum(seen) < len(text) / 50


@pytest.mark.parametrize("profile", ["qwen3", "mistral-tekken"])
def test_marker_names_handle_lines_and_bytes(profile: str) -> None:
    m = meter(profile)
    payload = log_text(2_000)
    event = ToolResultEvent(seq=2, event_id="r", call_id="c", payload=payload, handle="ab" * 32, exit_code=0)
    bounded = bound_tool_output(m, event, 512)
    head, tail = windowed_head_tail(payload, 256, 256, m._head_tail)
    span = payload[len(head): len(payload) - len(tail)]
    lines = payload.split("\n")  # as GET /v1/handles/{h}?lines=a:b counts them (\r is no break)
    first, last = bounded.span.first_line, bounded.span.last_line
    # the range is exactly the lines the elided span touches
    assert payload.count("\n", 0, len(head)) == first - 1 and span[-1:] and 1 < first < last < len(lines)
    assert "\n".join(lines[first - 1:last]).find(span.rstrip("\n")) >= 0
    assert bounded.span.bytes == len(span.encode()) and bounded.span.lines == last - first + 1
    marker = (f"\n[... {last - first + 1:,} lines ({len(span.encode()):,} bytes) elided by ctxd; the whole output is "
              f"handle {'ab' * 32}: GET /v1/handles/{'ab' * 32}?lines={first}:{last} ...]\n")
    assert bounded.text == head + marker + tail
    assert bounded.payload_tokens is None and bounded.elided_tokens is None
    assert (bounded.payload_bytes, bounded.payload_lines) == (len(payload.encode()), 2_000)
    # a known count changes the manifest figures only
    whole = m.count_text(payload)
    known = bound_tool_output(m, event, 512, payload_tokens=whole)
    assert known.text == bounded.text and known.payload_tokens == whole
    assert known.elided_tokens == whole - m.count_text(head) - m.count_text(tail)


def test_elided_span_counts_lines_on_newline_only() -> None:
    text = "a\r\nb\rc\nd\ne"
    assert elided_span(text, "a", "e") == elided_span(text, "a", "e")
    span = elided_span(text, "a\r", "\ne")
    assert (span.first_line, span.last_line, span.bytes) == (1, 3, len("\nb\rc\nd"))
