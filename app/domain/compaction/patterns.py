"""Protected lines: failure markers and test outcomes (seed 000 section 4.5.2, listing 1).

A line is *protected* (kept by failure slicing, a key line of a digest, folded by
deduplication only when byte-identical) when it matches :data:`PROTECTED_RE`:
assertions (``assert``, ``AssertionError``), exceptions (``...Error``, ``...Exception``),
``Traceback (most recent call last):``, pytest's ``FAILED`` / ``ERROR`` / ``E   `` lines,
its ``>`` lines (the failing source line of a frame) and failure section headers
(``____ test_x ____``), test result counts (``1 failed``, ``728 passed``), and common shell
failures (``error:``, ``fatal:``, ``No such file or directory``, ``command not found``,
``Permission denied``, ``Segmentation fault``). Seed 000 table 6: such a filter "can
silently drop an intermediate warning or event ordering that matches no pattern", which is
why slicing also keeps the lines just before each protected line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Final

__all__ = ["PROTECTED_RE", "TRACEBACK_RE", "alternate", "is_protected"]

PROTECTED_RE: Final = re.compile(
    r"\bassert\b|AssertionError|Error\b|Exception\b|\bFAILED\b|\bFAIL\b|\bERROR\b"
    r"|^Traceback \(most recent call last\)|^E\s|^>\s|^_{3,} .+ _{3,}$"
    r"|\b\d+ (?:failed|passed|errors?)\b|\berror:|^fatal:|No such file or directory|command not found"
    r"|Permission denied|Segmentation fault|core dumped"
)
TRACEBACK_RE: Final = re.compile(r"^\s*Traceback \(most recent call last\):")


def is_protected(body: str) -> bool:
    """True when the line (without its ending) is protected (matches :data:`PROTECTED_RE`)."""
    return PROTECTED_RE.search(body) is not None


def alternate(items: Sequence[int]) -> Iterator[int]:
    """First, last, second, second-to-last, ...: the order protected lines are taken in when
    not all fit, so both the first error and the final summary survive."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        yield items[lo]
        if hi != lo:
            yield items[hi]
        lo, hi = lo + 1, hi - 1
