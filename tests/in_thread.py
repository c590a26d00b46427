"""The app served by a real uvicorn in a thread of the test process, on a free loopback port:
real HTTP (a real server's concurrency: background tasks run after the response, as in
production, not before TestClient returns) with the app object at hand (``app.state``).
Every test that needs this uses :func:`served`; a ``ctxd serve`` process is
``ctxd_tools.bench_http.serve`` or ``ctxd_tools.native_stack.Ctxd``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ctxd_tools.native_stack import free_port, wait_ready


@contextmanager
def served(app: Any, *, ready_timeout: float = 120.0, **config: Any) -> Iterator[str]:
    """Serve ``app`` (lifespan on, log level warning; ``config``: more ``uvicorn.Config``
    options) and yield its base URL once ``/readyz`` answers 200 (the default profile's
    tokenizer is loaded); then ask uvicorn to exit and join its thread (30 s).
    Raises NativeStackError when the server's thread ends early or is not ready within
    ``ready_timeout`` seconds."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           **({"log_level": "warning", "lifespan": "on"} | config)))
    thread = threading.Thread(target=server.run, name="ctxd-test-server", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", timeout=ready_timeout, alive=thread.is_alive, what="uvicorn in a thread")
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)
