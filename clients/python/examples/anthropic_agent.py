"""An agent loop on the Anthropic SDK with ctxd holding its context (lines marked ``# ctxd``).

Assistant turns are kept as the SDK returns them (``response.content``: thinking blocks with
their signatures, text, tool_use), tool results as ``tool_result`` blocks of one user
message; ctxd sends the thinking blocks back byte for byte.

    python examples/anthropic_agent.py "List the files." --llm http://127.0.0.1:8001 --ctxd http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
from typing import Any

from anthropic import Anthropic
from ctxd_client import Session  # ctxd
from workspace import SYSTEM, TOOLS, run_bash


def main(task: str, *, llm_url: str, ctxd_url: str, workdir: str = ".", max_turns: int = 20) -> tuple[str, Any]:
    """Run the loop; returns (the model's final text, the ctxd session)."""
    llm = Anthropic(base_url=llm_url, api_key="sk-local")
    session = Session.create(goal=task, tools=TOOLS, url=ctxd_url)  # ctxd
    messages: list[Any] = [{"role": "user", "content": task}]
    for _ in range(max_turns):
        session.post(messages, format="anthropic", system=SYSTEM)  # ctxd
        reply = llm.messages.create(**session.request("anthropic").body)  # ctxd (was: model=..., system=..., messages=messages, tools=...)
        messages.append({"role": "assistant", "content": reply.content})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            session.post(messages, format="anthropic", system=SYSTEM)  # ctxd (optional: logs the final answer too)
            return "".join(b.text for b in reply.content if b.type == "text"), session
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": run_bash(b.input["command"], workdir)}
            for b in calls]})
    raise RuntimeError(f"no answer after {max_turns} turns")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("--llm", default="http://127.0.0.1:8001", help="an Anthropic-compatible base URL")
    parser.add_argument("--ctxd", default="http://127.0.0.1:8000")
    parser.add_argument("--workdir", default=".")
    args = parser.parse_args()
    print(main(args.task, llm_url=args.llm, ctxd_url=args.ctxd, workdir=args.workdir)[0])
