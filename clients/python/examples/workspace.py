"""What both example agents share: their system prompt, their one tool (bash, as an OpenAI
function declaration, the form ctxd sessions take) and how they run it."""

from __future__ import annotations

import subprocess

SYSTEM = "You are a careful engineer. Use the bash tool to inspect the workspace."
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a bash command in the workspace",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def run_bash(command: str, workdir: str) -> str:
    """The command's output (stdout, then stderr), run by bash in ``workdir``."""
    done = subprocess.run(command, shell=True, cwd=workdir, capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr
