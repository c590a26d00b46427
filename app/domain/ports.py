"""Ports the domain needs from the outside (DESIGN.md section 4): Protocols only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.domain.layout import Conversation, LeafMessage


@dataclass(frozen=True)
class Measurement:
    """Exact token counts of one rendered request.

    ``by_zone`` has root, trunk, leaf; ``by_role`` has system, tools, task_state,
    observations; each sums to ``total`` (tokens of the profile's tokenizer).

    ``leaf_tokens``: per leaf message (``conversation.leaf``, in order), the tokens of the
    rendered request the meter attributes to it, its chat framing included, read off the
    same encoding (no text is tokenized again); None for a message that owns no tokens of
    its own (mistral-common merges it into the message before it), and None altogether when
    the meter cannot attribute them exactly. ``by_zone["leaf"] - sum`` is the leaf's
    framing that belongs to no message (the generation prompt). Not part of the value.
    """

    total: int
    by_zone: dict[str, int]
    by_role: dict[str, int]
    warnings: tuple[str, ...] = ()
    # the request's token ids (a tuple, or an array('I') from the segment encoder)
    ids: Sequence[int] | None = field(default=None, repr=False, compare=False)
    extra: dict[str, object] = field(default_factory=dict, compare=False)
    leaf_tokens: tuple[int | None, ...] | None = field(default=None, repr=False, compare=False)


class TokenMeter(Protocol):
    """The profile's tokenizer, as the assembly policy sees it."""

    @property
    def control_strings(self) -> tuple[str, ...]:
        """The texts the tokenizer encodes as a chat control token when they occur inside
        ordinary text (Qwen3: ``<|im_start|>``, ``<tool_call>``, ``<think>`` ...; none for
        mistral-common, which never parses control tokens out of text). Assembly
        neutralises them in every payload and message (:mod:`app.domain.text`); a meter
        gives a :class:`~app.domain.text.ControlStrings` (the tuple with its compiled
        pattern, built once) so that no GET compiles it again."""

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` alone (no chat framing)."""

    def head_tail(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str, int]:
        """Split ``text`` at token boundaries: (head, tail, elided token count); ``head`` is
        an exact prefix and ``tail`` an exact suffix of ``text``, cut between characters."""

    def cut_ends(self, text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str] | None:
        """``(head, tail)`` of about ``head_tokens`` and ``tail_tokens`` tokens, tokenizing
        only a window at each end (:func:`app.domain.cuts.windowed_head_tail`), or None when
        ``text`` has no more than ``head_tokens + tail_tokens`` tokens."""

    def measure(self, conversation: Conversation) -> Measurement:
        """Render ``conversation`` with the chat template and count it exactly."""

    def prefetch(self, messages: Sequence[LeafMessage], *, handoff: bool = True) -> None:
        """A hint: ``messages`` (new leaf messages) are about to be measured as part of a
        conversation; a meter may start tokenizing them now, beside the caller's work. It
        never changes a measurement; doing nothing is correct. ``handoff``: the caller
        measures next and may yield to the tokenizing thread until it has started (False:
        a background caller that measures nothing)."""


class WireFormat(Protocol):
    """A wire format (openai, anthropic, tokens) as the planner sees it."""

    @property
    def name(self) -> str:
        """The format's name, as in ``?format=``."""

    @property
    def zones(self) -> Mapping[str, str]:
        """Where the root, trunk and leaf sit in the body (e.g. ``messages[1]``)."""

    @property
    def cache_breakpoints(self) -> bool:
        """True when the body marks cache breakpoints at the end of the root, the trunk
        and the request (Anthropic's ``cache_control``)."""

    def serialize(self, conversation: Conversation, measurement: Measurement) -> tuple[Mapping[str, Any], bytes]:
        """The body for ``conversation`` and its canonical bytes (what byte-identity and
        ``request_sha256`` are computed on)."""

    def layout_warnings(self, conversation: Conversation) -> Sequence[str]:
        """What the format itself changes or cannot carry in ``conversation`` (manifest
        ``layout_warnings`` lines; none for most formats)."""
