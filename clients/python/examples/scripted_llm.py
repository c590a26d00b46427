"""A tiny loopback model server for the examples and their tests: it speaks the OpenAI chat
completions API (``POST /v1/chat/completions``) and the Anthropic Messages API (``POST
/v1/messages``), answers each request with the next scripted reply and records the
request bodies it received (``server.requests``). Standard library only.

    with ScriptedLLM(openai_replies=[...]) as llm:
        OpenAI(base_url=llm.url + "/v1", api_key="x").chat.completions.create(...)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class ScriptedLLM:
    """Serves ``openai_replies`` (assistant message dicts) on /v1/chat/completions and
    ``anthropic_replies`` (lists of content blocks) on /v1/messages, in order; a request
    past the script gets 500."""

    def __init__(self, *, openai_replies: list[dict[str, Any]] | None = None,
                 anthropic_replies: list[list[dict[str, Any]]] | None = None, port: int = 0) -> None:
        self.openai_replies = list(openai_replies or [])
        self.anthropic_replies = list(anthropic_replies or [])
        self.requests: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _reply(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self.requests.append(body)
        n = len(self.requests)
        if path == "/v1/chat/completions" and self.openai_replies:
            message = self.openai_replies.pop(0)
            return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        if path == "/v1/messages" and self.anthropic_replies:
            content = self.anthropic_replies.pop(0)
            tool_use = any(b["type"] == "tool_use" for b in content)
            return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": body.get("model"),
                    "content": content, "stop_reason": "tool_use" if tool_use else "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                answer = scripted._reply(self.path, body)
                data = json.dumps(answer if answer is not None else {"error": "script exhausted"}).encode()
                self.send_response(200 if answer is not None else 500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


#: The demo script of ``python examples/scripted_llm.py``: one ``ls`` tool call, then an answer.
DEMO_OPENAI = [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_demo_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
    {"role": "assistant", "content": "I listed the files."},
]
DEMO_ANTHROPIC = [
    [{"type": "tool_use", "id": "toolu_demo_1", "name": "bash", "input": {"command": "ls"}}],
    [{"type": "text", "text": "I listed the files."}],
]


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description="A scripted loopback model server for the ctxd client examples.")
    parser.add_argument("--port", type=int, default=8001, help="port on 127.0.0.1 (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=10, help="how many times the demo script is served (default: %(default)s)")
    args = parser.parse_args()
    with ScriptedLLM(openai_replies=DEMO_OPENAI * args.runs, anthropic_replies=DEMO_ANTHROPIC * args.runs,
                     port=args.port) as server:
        print(f"scripted model server on {server.url} (OpenAI base_url {server.url}/v1); Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
