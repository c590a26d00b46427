"""What the user said: the progress record's section that keeps the user's own words through
every pass (docs: README "Progress record", "What the user said").

An interactive agent's user speaks again and again during a session ("from now on, don't run
the full suite", "the CI box has no network") and pastes long specs. A pass folds their turns
like any other; this section keeps their words:

* every folded user message (after the task: the contract holds the task), in seq order, with
  its seq and handle; verbatim up to :data:`MESSAGE_TOKENS` tokens;
* a longer message keeps its leading sentences (up to :data:`LEAD_TOKENS`) and every sentence
  that gives a standing instruction (:func:`is_instruction`), each verbatim, the gaps marked,
  the whole message behind its handle;
* the section has its own budget (the watermarks' ``user_text_tokens``) beside the record's:
  when it is full, the oldest text that is not an instruction is cut first (pasted messages,
  those over the per-message bound, before typed ones; oldest first in each), then, only if
  the instructions alone exceed it, the oldest instructions; every cut is listed
  (:attr:`UserSection.cuts`, the manifest's ``compaction.record.user_text``).

Built from the folded user messages alone, message by message, so between passes it only
grows at its end (a pass appends the messages it newly folds) unless the budget cuts.

Sentences: split at line breaks and after ``.``, ``!``, ``?`` or ``…`` followed by
whitespace (not after a few common abbreviations); each keeps its exact characters, and
adjacent kept sentences keep what lay between them, so any run of kept sentences is an exact
slice of the message.

Standard library only; pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from app.domain.compaction.lineage import SHORT_HANDLE
from app.domain.types import MessageEvent

__all__ = ["LEAD_TOKENS", "MESSAGE_TOKENS", "SECTION_TOKENS", "UserEntry", "UserSection", "is_instruction",
           "protect_user_text", "render_user_section", "sentence_spans"]

#: a user message up to this many tokens (the profile's tokenizer) is kept whole, verbatim
MESSAGE_TOKENS: Final = 512
#: a longer one keeps its leading sentences up to this many tokens, beside its instructions
LEAD_TOKENS: Final = 128
#: the section's default budget (tokens of its rendered text; the watermarks' ``user_text_tokens``)
SECTION_TOKENS: Final = 2048
#: a "sentence" longer than this (characters) is pasted text (a log, a code block), never an instruction
INSTRUCTION_CHARS: Final = 500
#: what marks a gap between kept sentences
GAP: Final = " [...] "

HEADING: Final = ("## What the user said (verbatim, in seq order; where sentences are cut, the whole message is "
                  "behind its handle)")

_ABBREVIATIONS: Final = frozenset({"e.g.", "i.e.", "etc.", "vs.", "cf.", "mr.", "mrs.", "ms.", "dr.", "no.", "fig.",
                                   "approx.", "incl.", "ex.", "p.ex.", "st."})
_MARKER: Final = re.compile(r"[-*+]?\s*\(?(?:\d{1,3}|[a-zA-Z]|[ivxIVX]{1,4})[.)]")
_BOUNDARY: Final = re.compile(r"[.!?\u2026]+[\"')\]\u201d\u2019*_`]*(?=\s)")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text`` (module docstring), leading and trailing
    whitespace outside the span; empty lines have none."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        start, line_end = pos, pos + len(line)
        pos = line_end + 1
        cursor = start
        for m in _BOUNDARY.finditer(text, start, line_end):
            word = text[text.rfind(" ", start, m.start()) + 1:m.end()].lower().lstrip("([\"'")
            if word in _ABBREVIATIONS or re.fullmatch(r"[a-z]\.", word) \
                    or _MARKER.fullmatch(text[cursor:m.end()].strip()):  # "1." of a numbered list
                continue
            spans.append((cursor, m.end()))
            cursor = m.end()
        spans.append((cursor, line_end))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            out.append((a, b))
    return out


# A standing instruction: a sentence that tells the agent what to do, not do, or take as given
# for the rest of the session. Recall matters more than precision here (a sentence taken for an
# instruction only costs the section a few tokens), so the rule is broad: modal verbs,
# negation, limits, universal statements, imperative openings, the user's or the team's
# standing facts ("we ship on", "our ... is", "the CI box has no network"), in English, French
# and Spanish. Questions that ask for something ("can you make sure ...") count; a pasted log
# or code line does not (too long, or mostly symbols).
_LEAD: Final = r"^(?:[-*+>#\d.)\s]|\*\*|please\b|pls\b|also\b|and\b|but\b|so\b|ok(?:ay)?\b,?|now\b,?|note\b:?|" \
               r"btw\b,?|oh\b,?|hey\b,?|just\b|then\b|again\b,?|et\b|aussi\b|y\b|también\b|tambien\b|porfa\b)*"
_IMPERATIVE: Final = re.compile(_LEAD + r"(?:add|allow|always|ask|avoid|be|build|call|change|check|clean|commit|"
                                r"consider|continue|create|delete|do|document|don'?t|dont|drop|edit|ensure|"
                                r"explain|fix|focus|follow|forget|generate|give|go|handle|ignore|implement|include|"
                                r"install|keep|leave|let'?s|limit|log|look|make|mark|mention|merge|move|name|never|"
                                r"no|not|only|prefer|preserve|print|push|put|read|refactor|remember|remove|rename|"
                                r"replace|report|respect|restrict|return|reuse|run|save|send|set|show|skip|split|"
                                r"start|stay|stick|stop|store|switch|take|target|tell|test|treat|try|turn|update|"
                                r"use|validate|verify|wait|write|"
                                # French and Spanish openings
                                r"ajoute|arrête|assure|conserve|crée|enlève|évite|fais|garde|mets|n'|ne|"
                                r"jamais|toujours|supprime|utilise|vérifie|agrega|añade|asegúrate|asegurate|"
                                r"cambia|conserva|crea|elimina|evita|haz|mantén|manten|nunca|pon|quita|"
                                r"remueve|siempre|usa|utiliza|verifica)\b", re.IGNORECASE)
_ANYWHERE: Final = re.compile(
    r"\b(?:must|mustn'?t|should|shouldn'?t|shall|have to|has to|had better|need to|needs to|needn'?t|"
    r"no need|can'?t|cannot|can not|won'?t|wouldn'?t|not allowed|required|requires?|mandatory|forbidden|"
    r"never|always|from now on|going forward|from here on|as a rule|by default|for now|every time|whenever|"
    r"each time|instead|rather than|only|without|not|no|none|nothing|n't|make sure|ensure|be sure|"
    r"remember|keep in mind|note that|careful|prefer|preferably|avoid|don'?t|dont|stick to|"
    r"i want|i'?d like|i would like|i need|i prefer|i'?ll|i will|i'?m already|we want|we need|we use|we ship|"
    r"we target|we rely|we run|we deploy|we'?re on|we are on|we'?re using|we don'?t|we never|we always|"
    r"our|ours|all|every|any|lives? in|is read-only|read only|is built with|are built with|is generated|"
    r"when you|whenever you|if you|before you|after you|once you|"
    r"under \d|at most|at least|up to|limit|max(?:imum)?|min(?:imum)?|"
    # French
    r"ne|pas|jamais|toujours|il faut|faut|doit|doivent|devrait|merci de|veuillez|sans|seulement|uniquement|"
    r"surtout|à partir de maintenant|désormais|nous utilisons|on utilise|"
    # Spanish
    r"nunca|siempre|debe|deben|debería|deberia|deberían|hay que|tiene que|tienes que|por favor|sin|solo|sólo|"
    r"únicamente|a partir de ahora|de ahora en adelante|usamos|utilizamos|tambien|también)\b", re.IGNORECASE)
_FACT: Final = re.compile(r"^(?:the|our|this|that|these|those|we|us|my|le|la|les|el|los|las|nuestro|nuestra)\b"
                          r"[^.?!]{0,80}\b(?:is|are|has|have|was|lives|runs|uses|ships|needs|stays|gets|"
                          r"est|sont|a|es|son|tiene|usa)\b", re.IGNORECASE)


#: pasted terminal output, not the user's own words: prompts, build tags, git's status
#: phrases, compiler and tool diagnostics, stack frames, Windows paths
_OUTPUT: Final = re.compile(
    r"^(?:\$ |> |>>> |\[[\w .:-]{1,30}\] |[\w.-]+@[\w.-]+[ :]|Traceback|File \"|at [\w.$<>]+\(|npm (?:ERR|WARN)|"
    r"On branch |Your branch |Changes (?:not staged|to be committed)|nothing (?:to commit|added to commit)|"
    r"no changes added|Untracked files|\(use \"git |(?:modified|deleted|new file|renamed|both modified):|"
    r"(?:fatal|hint|error|warning|remote) ?:|Already on |Switched to |HEAD is now|[0-9a-f]{7,40} )"
    r"|: (?:fatal )?(?:error|warning) [A-Z]*\d+|\b[A-Za-z]:\\[\w\\ .-]+", re.IGNORECASE)


def is_instruction(sentence: str) -> bool:
    """Whether ``sentence`` gives a standing instruction (module docstring): broad on purpose,
    a sentence taken for one only costs the section its tokens."""
    text = sentence.strip()
    if not text or len(text) > INSTRUCTION_CHARS:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in text)
    if letters < 0.6 * len(text) or _OUTPUT.search(text):
        return False
    return bool(_IMPERATIVE.search(text) or _ANYWHERE.search(text) or _FACT.search(text))


@dataclass(frozen=True)
class UserEntry:
    """One folded user message as the section shows it. ``text``: what is shown (the message
    itself, or its kept sentences with :data:`GAP` between runs); ``sentences`` / ``kept``:
    the message's sentences and how many are shown; ``instructions``: how many of them are
    instructions, ``instructions_cut`` how many of those the section's budget cut."""

    seq: int
    handle: str
    text: str
    whole: bool
    sentences: int
    kept: int
    instructions: int
    instructions_cut: int = 0
    bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "handle": self.handle, "whole": self.whole, "sentences": self.sentences,
                "kept_sentences": self.kept, "instructions": self.instructions,
                "instructions_cut": self.instructions_cut, "bytes": self.bytes}


@dataclass(frozen=True)
class UserSection:
    """The section: its entries in seq order, its tokens and budget, and the entries the budget
    cut (``cuts``: their seqs; each entry says what it kept)."""

    entries: tuple[UserEntry, ...] = ()
    tokens: int = 0
    budget: int = SECTION_TOKENS
    cuts: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        cut = [e.as_dict() for e in self.entries if e.seq in set(self.cuts)]
        return {"messages": len(self.entries), "tokens": self.tokens, "budget": self.budget,
                "bounded": sum(1 for e in self.entries if not e.whole), "cut_to_budget": cut}


@dataclass(frozen=True)
class _Parsed:
    message: MessageEvent
    spans: tuple[tuple[int, int], ...]
    instruction: tuple[bool, ...]
    lead: int  # leading sentences within LEAD_TOKENS
    whole: bool  # within MESSAGE_TOKENS: shown whole


def _parse(message: MessageEvent, count: Callable[[str], int], message_tokens: int) -> _Parsed:
    text = message.content
    spans = tuple(sentence_spans(text))
    flags = tuple(is_instruction(text[a:b]) for a, b in spans)
    whole = count(text) <= message_tokens
    lead = 0
    if not whole:
        lo, hi = 0, len(spans)
        while lo < hi:  # the most leading sentences within LEAD_TOKENS
            mid = (lo + hi + 1) // 2
            if count(text[spans[0][0]:spans[mid - 1][1]]) <= LEAD_TOKENS:
                lo = mid
            else:
                hi = mid - 1
        lead = lo
    return _Parsed(message, spans, flags, lead, whole)


def _shown(text: str, spans: Sequence[tuple[int, int]], keep: Sequence[bool]) -> str:
    """The kept sentences of ``text``: each run of adjacent kept sentences as the exact slice
    it covers, runs joined by :data:`GAP`, which also marks a cut head or tail."""
    parts: list[str] = []
    run: tuple[int, int] | None = None
    for (a, b), k in zip(spans, keep):
        if k:
            run = (run[0] if run is not None else a, b)
        elif run is not None:
            parts.append(text[run[0]:run[1]])
            run = None
    if run is not None:
        parts.append(text[run[0]:run[1]])
    body = GAP.join(parts)
    if parts and not keep[0]:
        body = GAP.lstrip() + body
    if parts and not keep[-1]:
        body = body + GAP.rstrip()
    return body or GAP.strip()


def _entry(parsed: _Parsed, level: int) -> UserEntry:
    """The entry of a message at a cut level: 0 as bounded per message (whole, or lead +
    instructions), 1 instructions only, 2 nothing (the handle alone)."""
    m = parsed.message
    text, spans, flags = m.content, parsed.spans, parsed.instruction
    n, instructions = len(spans), sum(flags)
    size = len(text.encode("utf-8", "surrogatepass"))
    if level == 0 and parsed.whole:
        return UserEntry(m.seq, m.handle, text, True, n, n, instructions, 0, size)
    if level == 0:
        keep = [i < parsed.lead or f for i, f in enumerate(flags)]
    elif level == 1:
        keep = list(flags)
    else:
        keep = [False] * n
    shown = _shown(text, spans, keep) if any(keep) else GAP.strip()
    return UserEntry(m.seq, m.handle, shown, False, n, sum(keep), instructions,
                     instructions - sum(1 for k, f in zip(keep, flags) if k and f), size)


def _entry_line(e: UserEntry) -> str:
    handle = e.handle[:SHORT_HANDLE]
    if e.whole:
        return f"- seq {e.seq} (handle {handle}): {e.text}"
    what = f"{e.kept} of {e.sentences} sentences"
    if e.instructions_cut:
        what += f", {e.instructions_cut} instructions cut"
    return f"- seq {e.seq} (handle {handle}; {what}): {e.text}"


def render_user_section(section: UserSection) -> list[str]:
    """The section's lines (heading first), or none when it has no entry."""
    if not section.entries:
        return []
    return [HEADING, *(_entry_line(e) for e in section.entries)]


class UserTextMemo(Protocol):
    """The session memo's field this module keeps (:class:`app.domain.session_memo.SessionMemo`)."""

    user_texts: dict[tuple[Any, ...], _Parsed]


def protect_user_text(messages: Sequence[MessageEvent], *, count: Callable[[str], int],
                      budget_tokens: int = SECTION_TOKENS, message_tokens: int = MESSAGE_TOKENS,
                      memo: UserTextMemo | None = None) -> UserSection:
    """The section of the folded user ``messages`` (seq order) within ``budget_tokens``
    (module docstring). ``count``: tokens of a text on the profile's tokenizer; ``memo``: an
    optional mapping kept across passes (the session's leaf cache) holding each message's
    sentences and flags. Deterministic."""
    if not messages:
        return UserSection(budget=budget_tokens)
    texts = memo.user_texts if memo is not None else {}
    parsed = []
    for m in messages:
        key = (m.seq, m.handle, message_tokens)
        hit = texts.get(key)
        if hit is None:
            hit = texts[key] = _parse(m, count, message_tokens)
        parsed.append(hit)

    def render(levels: Sequence[int]) -> tuple[tuple[UserEntry, ...], int]:
        entries = tuple(_entry(p, lv) for p, lv in zip(parsed, levels))
        return entries, count("\n".join(render_user_section(UserSection(entries))))

    n = len(parsed)
    chosen = [0] * n
    entries, tokens = render(chosen)
    # Over budget: the oldest text that is not an instruction goes first, pasted text (messages
    # over the per-message bound, already bounded) before what the user typed; then, only if
    # the instructions alone are over, the oldest instructions (pasted first). Each tier reduces
    # the fewest of its oldest messages that bring the section within its budget (tokens fall
    # as more are reduced).
    tiers = ((1, False), (1, True), (2, False), (2, True))  # (level, whole messages)
    for level, whole in tiers:
        if tokens <= budget_tokens:
            break
        members = [i for i, p in enumerate(parsed) if p.whole == whole and chosen[i] < level]
        base_levels = list(chosen)

        def levels(j: int, lv: int = level, ms: Sequence[int] = members, bl: Sequence[int] = base_levels) -> list[int]:
            out = list(bl)
            for i in ms[:j]:
                out[i] = lv
            return out
        lo, hi, best = 1, len(members), None
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = render(levels(mid))
            if candidate[1] <= budget_tokens:
                best, hi = (mid, candidate), mid - 1
            else:
                lo = mid + 1
        if best is not None:
            chosen, (entries, tokens) = levels(best[0]), best[1]
            continue
        reduced = render(levels(len(members)))
        if reduced[1] < tokens:  # still over, but smaller: the next tier starts from it
            chosen, (entries, tokens) = levels(len(members)), reduced
    base = [_entry(p, 0) for p in parsed]
    cuts = tuple(e.seq for e, b, lv in zip(entries, base, chosen) if lv > 0 and e != b)
    return UserSection(entries=entries, tokens=tokens, budget=budget_tokens, cuts=cuts)
