"""A 2 MB tool output (issue 9, item 7): the next GET cuts it from windows at its ends
instead of tokenizing all of it (it took 8.6 s), the marker names the handle and the
elided lines and bytes, the exact token count is computed once after the POST and
reported in the manifest (tokens_known), and the body never depends on it."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from fastapi.testclient import TestClient

from app.domain.framing import unframe
from tests.api.test_api import assistant, new_session, post, result


def big_log(size: int = 2_000_000) -> str:
    rng = random.Random(7)
    words = ["error", "warning", "File", "line", "def", "return", "import", "module", "self", "0x7f3a", "test_case"]
    lines, total, i = [], 0, 0
    while total < size:
        line = f"{i:06d} " + " ".join(rng.choice(words) for _ in range(12)) + "\n"
        lines.append(line)
        total, i = total + len(line), i + 1
    return "".join(lines)[:size]


class SpyTokenizer:
    """Delegates to a transformers tokenizer, recording the length of every text it is given."""

    def __init__(self, inner: Any) -> None:
        self._inner, self.seen = inner, []

    def __call__(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(len(text))
        return self._inner(text, *args, **kwargs)

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(len(text))
        return self._inner.encode(text, *args, **kwargs)

    def encode_batch(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self.seen.extend(map(len, texts))
        return self._inner.encode_batch(texts, *args, **kwargs)

    def encode_batch_fast(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self.seen.extend(map(len, texts))
        return self._inner.encode_batch_fast(texts, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_two_megabyte_output_is_cut_from_its_ends(client: TestClient) -> None:
    payload = big_log()
    handle = hashlib.sha256(payload.encode()).hexdigest()
    sid = new_session(client)
    assert post(client, sid, assistant("a1", "c1"), result("r1", "c1", payload)).status_code == 200
    state = client.app.state.ctxd
    meter = state.meters.get(state.profiles.get("qwen3"))
    spy = SpyTokenizer(meter.tokenizer)
    # counts and cuts call the tokenizers backend directly when it encodes alike (HFChatMeter._backend)
    backend = SpyTokenizer(meter._backend) if meter._backend is not None else None
    meter.tokenizer = spy
    if backend is not None:
        meter._backend = backend
    try:
        first = client.get(f"/v1/sessions/{sid}/request")
    finally:
        meter.tokenizer = spy._inner
        if backend is not None:
            meter._backend = backend._inner
    assert first.status_code == 200, first.text
    seen = spy.seen + (backend.seen if backend is not None else [])
    assert seen and max(seen) < 100_000, "only windows of the 2 MB output were tokenized"

    body, manifest = first.json()["request"], first.json()["manifest"]
    tool = next(m for m in body["messages"] if m["role"] == "tool")["content"]
    marker = re.search(r"\[\.\.\. ([\d,]+) lines \(([\d,]+) bytes\) elided by ctxd; the whole output is handle "
                       r"([0-9a-f]{64}): GET /v1/handles/\3\?lines=(\d+):(\d+) \.\.\.\]", tool)
    assert marker is not None and marker.group(3) == handle and "tokens" not in tool
    n_lines, n_bytes, first_line, last_line = (int(marker.group(i).replace(",", "")) for i in (1, 2, 4, 5))
    item = next(i for i in manifest["items"] if i["kind"] == "tool_result")
    assert item["representation"] == "head_tail" and item["elided_lines"] == [first_line, last_line]
    assert n_lines == last_line - first_line + 1 and item["elided_bytes"] == n_bytes
    assert item["bytes"] == 2_000_000 and item["lines"] == payload.count("\n") + 1
    # the elided lines, read back by handle, hold what the request leaves out
    back = client.get(f"/v1/handles/{handle}?lines={first_line}:{last_line}").content.decode()
    head, tail = unframe(tool).split("\n" + marker.group(0) + "\n")
    head = head.split("\n", 1)[1]  # after the exit_code header line
    missing = payload[len(head):len(payload) - len(tail)]
    assert payload.startswith(head) and payload.endswith(tail) and missing.strip("\n") in back
    assert len(missing.encode()) == n_bytes

    # the exact count, computed once after the POST, is in the manifest
    whole = len(meter.tokenizer.encode(payload, add_special_tokens=False))
    assert item["tokens_known"] is True and item["tokens"] == whole
    assert 0 < item["elided_tokens"] < whole and manifest["elided_tokens_exact"] is True
    again = client.get(f"/v1/sessions/{sid}/request")
    assert again.json()["request"] == body
