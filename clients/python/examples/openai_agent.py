"""An agent loop on the OpenAI SDK with ctxd holding its context.

The loop is the usual one (keep ``messages``, call the model, run the tool calls, append the
results); the lines marked ``# ctxd`` are all it takes to plug ctxd in: the history is posted
as the SDK returns it, and the model gets ctxd's request (budgeted, counted, cache-stable)
instead of the raw history.

    python examples/openai_agent.py "List the files." --llm http://127.0.0.1:8001/v1 --ctxd http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctxd_client import Session  # ctxd
from openai import OpenAI
from workspace import SYSTEM, TOOLS, run_bash


def main(task: str, *, llm_url: str, ctxd_url: str, workdir: str = ".", max_turns: int = 20) -> tuple[str, Any]:
    """Run the loop; returns (the model's final answer, the ctxd session)."""
    llm = OpenAI(base_url=llm_url, api_key="sk-local")
    session = Session.create(goal=task, tools=TOOLS, url=ctxd_url)  # ctxd
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _ in range(max_turns):
        session.post(messages)  # ctxd
        reply = llm.chat.completions.create(**session.request().openai_kwargs()).choices[0].message  # ctxd (was: model=..., messages=messages, tools=TOOLS)
        messages.append(reply)
        if not reply.tool_calls:
            session.post(messages)  # ctxd (optional: logs the final answer too)
            return reply.content or "", session
        for call in reply.tool_calls:
            command = json.loads(call.function.arguments)["command"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_bash(command, workdir)})
    raise RuntimeError(f"no answer after {max_turns} turns")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--llm", default="http://127.0.0.1:8001/v1", help="an OpenAI-compatible base URL")
    parser.add_argument("--ctxd", default="http://127.0.0.1:8000")
    parser.add_argument("--workdir", default=".")
    args = parser.parse_args()
    print(main(args.task, llm_url=args.llm, ctxd_url=args.ctxd, workdir=args.workdir)[0])
