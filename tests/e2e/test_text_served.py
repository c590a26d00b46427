"""Over a real socket to `ctxd serve`: a body holding a lone surrogate is a 422 and the
keep-alive connection that carried it serves the next request (before: a 500, and the
server reset the connection)."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit


def _exchange(sock: socket.socket, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    head = (f"{method} {path} HTTP/1.1\r\nHost: ctxd\r\nConnection: keep-alive\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection (after {data!r})"
        data += chunk
    header, rest = data.split(b"\r\n\r\n", 1)
    lines = header.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(fields["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        rest += chunk
    return int(lines[0].split()[1]), rest[:length]


def test_lone_surrogate_is_422_and_the_connection_stays_usable(server: str) -> None:
    url = urlsplit(server)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        status, body = _exchange(sock, "POST", "/v1/sessions", json.dumps({"contract": {"goal": "g"}}).encode())
        assert status == 201
        sid = json.loads(body)["id"]
        cut = json.dumps({"events": [{"event_id": "u1", "kind": "message", "role": "user",
                                      "content": "look \ud83d"}]}).encode("ascii")
        status, body = _exchange(sock, "POST", f"/v1/sessions/{sid}/events", cut)
        assert status == 422 and json.loads(body)["errors"][0]["loc"] == ["body", "events", 0, "content"]
        status, body = _exchange(sock, "GET", f"/v1/sessions/{sid}")  # the same connection
        assert status == 200 and json.loads(body)["last_seq"] == 0
