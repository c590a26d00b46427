"""The body limit on a real server (`ctxd serve`, uvicorn on loopback), over raw sockets:
a declared length over the limit is refused before the body is sent, a chunked body of
many small chunks is cut off once their sum passes the limit (the gap of
headroomlabs-ai/headroom#3326 and oven-sh/bun#27507), and the server keeps serving."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from ctxd_tools.bench_http import serve

LIMIT = 50_000


@pytest.fixture()
def small_server() -> Iterator[tuple[str, int]]:
    """`ctxd serve` with CTXD_MAX_BODY_BYTES=50000; yields (base URL, port)."""
    with serve(env={"CTXD_MAX_BODY_BYTES": str(LIMIT)}, ready_timeout=90) as base:
        yield base, int(base.rsplit(":", 1)[1])


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body: (status, headers, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_declared_length_over_the_limit_is_refused_before_the_body(small_server: tuple[str, int]) -> None:
    base, port = small_server
    sid = httpx.post(f"{base}/v1/sessions", json={"contract": {"goal": "g"}}).json()["id"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        # announce 1 GB, send none of it: the answer must come anyway
        sock.sendall((f"POST /v1/sessions/{sid}/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 1000000000\r\n\r\n").encode())
        status, headers, body = read_response(sock)
    assert status == 413 and headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["size_bytes"] == 1_000_000_000 and problem["max_bytes"] == LIMIT
    assert httpx.get(f"{base}/v1/sessions/{sid}").json()["events"] == 0


def test_chunked_body_is_cut_off_and_the_server_keeps_serving(small_server: tuple[str, int]) -> None:
    base, port = small_server
    sid = httpx.post(f"{base}/v1/sessions", json={"contract": {"goal": "g"}}).json()["id"]
    events = [{"event_id": f"s{i}", "kind": "step", "text": "y" * 900} for i in range(80)]
    raw = json.dumps({"events": events}).encode()
    assert len(raw) > LIMIT
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((f"POST /v1/sessions/{sid}/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n").encode())
        try:
            for start in range(0, len(raw), 1000):  # many small chunks, each far under the limit
                piece = raw[start:start + 1000]
                sock.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before the last chunk
        status, headers, body = read_response(sock)
    assert status == 413 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["max_bytes"] == LIMIT
    # nothing stored, and the server goes on serving: a batch under the limit is accepted
    assert httpx.get(f"{base}/v1/sessions/{sid}").json()["events"] == 0
    ok = httpx.post(f"{base}/v1/sessions/{sid}/events", json={"events": events[:10]})
    assert ok.status_code == 200 and ok.json()["last_seq"] == 10
