"""Bounding what enters a request: tool outputs, documents and user messages cut to head +
tail at a cap, and the newest turn group fitted as a whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from app.domain.assembly.base import BoundedResult
from app.domain.budget import Budget, split_share
from app.domain.cuts import ElidedSpan, elided_span, payload_size
from app.domain.errors import NewestGroupOverBudget
from app.domain.layout import (
    Conversation,
)
from app.domain.ports import Measurement, TokenMeter
from app.domain.text import neutralise_control_text
from app.domain.types import (
    DocumentEvent,
    MessageEvent,
    ToolResultEvent,
    TurnGroup,
)


def head_tail_cut(meter: TokenMeter, text: str, cap_tokens: int) -> tuple[str, str, ElidedSpan] | None:
    """``text``'s head and tail (half of ``cap_tokens`` each, an exact prefix and suffix cut
    between characters, tokenizing only windows at the ends: ``meter.cut_ends``) and the
    span they leave out; None when the text is within the cap. The one cut of tool outputs,
    documents and user messages."""
    cut = meter.cut_ends(text, cap_tokens // 2, cap_tokens - cap_tokens // 2)
    if cut is None:
        return None
    head, tail = cut
    return head, tail, elided_span(text, head, tail)


def bound_tool_output(meter: TokenMeter, result: ToolResultEvent, cap_tokens: int, *,
                      payload_tokens: int | None = None) -> BoundedResult:
    """Seed 001 ``bound_tool_output``: the text unchanged if within ``cap_tokens``, else
    a head and a tail (half the cap each) joined by a marker naming the handle and the
    elided size in lines and bytes. The marker's own tokens are not charged to the cap.

    The payload's control strings (``meter.control_strings``) are neutralised first, so
    the cap bounds the text that is rendered (a control string grows from one token to
    several once broken); head and tail are an exact prefix and suffix of that text,
    cut between characters. The cut tokenizes only a window at each end
    (``meter.cut_ends``), and the marker says only what is cheap and deterministic (bytes
    and "\n"-lines of the elided span of the text as rendered whole, the line range to
    read back by handle), so a 2 MB output costs no more than a small one and the body
    never depends on whether a token count is known yet. ``payload_tokens``: the
    payload's exact count when known (stored after its POST); the elided tokens are then
    that less the head's and the tail's (reported in the manifest only)."""
    payload, neutralised = neutralise_control_text(result.payload, meter.control_strings)
    size, lines = payload_size(result.payload)
    known = payload_tokens if payload_tokens is not None and not neutralised else None  # the count of ``payload``
    # a known count within the cap says the cut would keep it whole: it is not tokenized again
    cut = None if known is not None and known <= cap_tokens else head_tail_cut(meter, payload, cap_tokens)
    if cut is None:  # within the cap: its count costs no more than the cap
        tokens = known if known is not None else meter.count_text(payload)
        return BoundedResult(payload, tokens, 0, None, size, lines, neutralised)
    head, tail, span = cut
    elided = None
    if payload_tokens is not None:
        elided = max(0, payload_tokens - meter.count_text(head) - meter.count_text(tail))
    marker = (
        f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) elided by ctxd; the whole output is handle "
        f"{result.handle}: GET /v1/handles/{result.handle}?lines={span.first_line}:{span.last_line} ...]\n"
    )
    return BoundedResult(head + marker + tail, payload_tokens, elided, span, size, lines, neutralised)


def bound_documents(documents: Sequence[DocumentEvent], meter: TokenMeter,
                    cap_tokens: int) -> tuple[tuple[DocumentEvent, ...], dict[int, ElidedSpan]]:
    """The current retrieved documents as the leaf shows them (issue 16 item 3): a text
    within ``cap_tokens`` (the per-item cap of tool outputs) unchanged; a longer one cut to
    a head and a tail (half the cap each) around a marker naming the document's handle and
    the elided lines and bytes, like :func:`bound_tool_output`. Returns the documents and
    the elided span by seq of those cut. Before: a 37,559-token document was pinned whole,
    and every GET of its session was a 422 until the agent replaced it."""
    shown: list[DocumentEvent] = []
    spans: dict[int, ElidedSpan] = {}
    for doc in documents:
        cut = head_tail_cut(meter, doc.text, cap_tokens)
        if cut is None:
            shown.append(doc)
            continue
        head, tail, span = cut
        spans[doc.seq] = span
        marker = (f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) elided by ctxd; the whole document is handle "
                  f"{doc.handle}: GET /v1/handles/{doc.handle}?lines={span.first_line}:{span.last_line} ...]\n")
        shown.append(replace(doc, text=head + marker + tail))
    return tuple(shown), spans


def bound_user_message(meter: TokenMeter, message: MessageEvent,
                       cap_tokens: int) -> tuple[MessageEvent, ElidedSpan | None]:
    """A user message as the leaf shows it: unchanged within ``cap_tokens`` (the
    observations role's share of input_limit; input_limit without shares), else a head and a tail (half the cap each)
    around a marker naming the message's handle and the elided lines and bytes, like
    :func:`bound_tool_output`. Returns the message and the elided span (None: not cut).
    A text of at most ``cap_tokens`` characters is not tokenized.

    Before: the newest user message is pinned, so one of ~30,300 tokens (over qwen3's
    input_limit of 28,160) made every GET of its session a 422 until another user message
    came (the peer fault of gi-dellav/zerostack#132: an oversized message stayed in the
    history and was refused on every following turn)."""
    if message.role != "user" or len(message.content) <= cap_tokens:
        return message, None
    cut = head_tail_cut(meter, message.content, cap_tokens)
    if cut is None:
        return message, None
    head, tail, span = cut
    # no line range here: the message's handle holds its JSON event (one line), so ``?lines=``
    # cannot reach the elided lines; the recall tool's query searches the text
    marker = (f"\n[... {span.lines:,} lines ({span.bytes:,} bytes) of this message elided by ctxd; the whole message "
              f"is handle {message.handle}: GET /v1/handles/{message.handle} returns it as JSON (its text is the "
              "content field); search a phrase of it to find the elided lines ...]\n")
    return replace(message, content=head + marker + tail), span


def capped_tokens(meter: TokenMeter, text: str, cap_tokens: int) -> int:
    """``min(tokens of text, cap_tokens)``, tokenizing at most windows at the ends of a long
    text (``meter.cut_ends``, memoized): a 2 MB output is not tokenized whole to learn that
    it exceeds the cap."""
    if meter.cut_ends(text, cap_tokens // 2, cap_tokens - cap_tokens // 2) is not None:
        return cap_tokens
    return meter.count_text(text)


def _cut_is_shorter(meter: TokenMeter, payload: str, cut_text: str) -> bool:
    """Whether a head + marker + tail has fewer tokens than the payload it stands for, without
    tokenizing a long payload: a token is at least one byte, and a payload of more than 8
    bytes a token of the cut is taken as longer (an estimate only for runs of very long
    tokens, where keeping the cut is still within the cap)."""
    cut_tokens = meter.count_text(cut_text)
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size <= cut_tokens:
        return False
    return size > 8 * cut_tokens or meter.count_text(payload) > cut_tokens


def bound_group(meter: TokenMeter, group: TurnGroup, share_tokens: int, item_cap_tokens: int, *,
                payload_tokens: Mapping[str, int] | None = None) -> dict[str, BoundedResult]:
    """The results of ``group`` bounded as a whole: ``share_tokens`` split max-min fair
    (:func:`app.domain.budget.split_share`) over their sizes ``s_i = min(tokens_i,
    item_cap_tokens)``, each result cut to head + tail at its cap (:func:`bound_tool_output`).

    A result whose cut text (marker included) would not be shorter than the result itself
    stays verbatim. Results with equal payloads (one handle) take the smaller of their caps.
    ``payload_tokens``: the outputs' known token counts (manifest figures only).
    Returns ``{handle: BoundedResult}`` for the group's results.
    """
    sizes = [capped_tokens(meter, r.payload, item_cap_tokens) for r in group.results]
    cap_of: dict[str, int] = {}
    for result, cap in zip(group.results, split_share(sizes, share_tokens)):
        cap_of[result.handle] = min(cap, cap_of.get(result.handle, cap))
    out: dict[str, BoundedResult] = {}
    for result in group.results:
        if result.handle not in out:
            b = bound_tool_output(meter, result, cap_of[result.handle],
                                  payload_tokens=(payload_tokens or {}).get(result.handle))
            if b.span is not None and not _cut_is_shorter(meter, result.payload, b.text):
                payload, neutralised = neutralise_control_text(result.payload, meter.control_strings)
                b = BoundedResult(payload, meter.count_text(payload), 0, None, b.payload_bytes, b.payload_lines,
                                  neutralised)
            out[result.handle] = b
    return out


FIT_ROUNDS = 8  # measured shrink steps before the newest group's results fall back to their markers


@dataclass(frozen=True)
class FittedGroup:
    """The newest turn group bounded so the request fits: its results' bounded texts,
    the tokens they share (``share_tokens``) and the request that fits."""

    bounded: dict[str, BoundedResult]
    share_tokens: int
    conversation: Conversation
    measurement: Measurement


def fit_newest_group(group: TurnGroup, *, budget: Budget, meter: TokenMeter, item_cap_tokens: int,
                     excess_tokens: int,
                     measure_with: Callable[[Mapping[str, BoundedResult]], tuple[Conversation, Measurement]],
                     payload_tokens: Mapping[str, int] | None = None) -> FittedGroup:
    """Bound the newest turn group as a whole so the request fits ``input_limit`` with it
    present (eq. 1); it is never evicted silently.

    ``excess_tokens``: how far the request with only this group in the leaf (its results
    each under ``item_cap_tokens``) exceeds ``input_limit``. ``measure_with(bounded)``
    renders and measures the request with the group's results as ``bounded``.
    ``payload_tokens``: the outputs' known token counts (manifest figures only).

    Equation: the results share ``S`` tokens, ``c = split_share(s, S)`` with
    ``s_i = min(tokens_i, item_cap_tokens)``. ``S_0 = min(B_obs, sum(s) - excess_tokens)``
    (``B_obs`` = the observations share of ``input_limit``, or all of it when the profile
    sets no share); while the measured request ``T(S)`` exceeds ``input_limit``,
    ``S <- max(0, S - (T(S) - input_limit))`` (at most ``FIT_ROUNDS`` rounds, then
    ``S = 0``: each result is its marker alone, or its text when that is shorter).

    Invariant: the result's ``measurement.total <= budget.input_limit`` with every message
    and result of ``group`` in the leaf, or :class:`NewestGroupOverBudget` is raised.

    Raises:
        NewestGroupOverBudget: even ``T(0) > input_limit``; names the group (seq, seqs,
        event ids) and ``over_by = T(0) - input_limit`` tokens.
    """
    limit = budget.input_limit
    observations = budget.role_limits()["observations"] if budget.shares.get("observations") else limit
    sizes = sum(capped_tokens(meter, r.payload, item_cap_tokens) for r in group.results)
    share = max(0, min(observations, sizes - excess_tokens))
    for rounds in range(FIT_ROUNDS + 1):
        bounded = bound_group(meter, group, share, item_cap_tokens, payload_tokens=payload_tokens)
        conversation, measurement = measure_with(bounded)
        if measurement.total <= limit:
            return FittedGroup(bounded, share, conversation, measurement)
        if share == 0:
            break
        share = 0 if rounds == FIT_ROUNDS - 1 else max(0, share - (measurement.total - limit))
    events: tuple[MessageEvent | ToolResultEvent, ...] = (group.message, *group.results)
    over_by = measurement.total - limit
    raise NewestGroupOverBudget(
        f"the newest turn group (seq {group.first_seq}, events {', '.join(e.event_id for e in events)}) does not fit "
        f"input_limit {limit} = W - O - M even with every older group evicted and each tool result cut to its "
        f"marker: the request needs {measurement.total} tokens, {over_by} over; shorten the group's message "
        "or the pinned content (system, tools, task contract, next step)",
        seq=group.first_seq, seqs=list(group.seqs), event_ids=[e.event_id for e in events],
        over_by=over_by, input_limit=limit, total=measurement.total,
    )
