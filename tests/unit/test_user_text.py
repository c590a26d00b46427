"""The progress record's section "What the user said" (app/domain/compaction/user_text.py):
sentences, the instruction rule on the shipped corpus, the per-message and section bounds,
append-only growth, and its place in the deterministic and the model-written record."""

from __future__ import annotations

import itertools
import json
from importlib import resources

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.compaction.record import ProgressRecord, build_record, render_record
from app.domain.compaction.user_text import (
    GAP,
    HEADING,
    LEAD_TOKENS,
    MESSAGE_TOKENS,
    is_instruction,
    protect_user_text,
    render_user_section,
    sentence_spans,
)
from app.domain.compaction.written import render_written_record
from app.domain.types import Contract, MessageEvent, TurnGroup


def words(text: str) -> int:
    """A deterministic stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def message(seq: int, text: str) -> MessageEvent:
    return MessageEvent(seq=seq, event_id=f"u{seq}", role="user", content=text, handle=f"{seq:064x}")


CORPUS = tuple(json.loads(resources.files("ctxd_tools.eval").joinpath("corpus/instructions.json").read_text())["instructions"])
NOT_INSTRUCTIONS = (
    "Thanks, that works now!", "What does this function return?", "Here is the error I get:", "Looks good.",
    "hmm", "Can you explain the output?", "It printed 42.", "Why is it slow?", "The test failed.",
    "nothing to commit, working tree clean", "Changes not staged for commit:", "$ git status",
    "[build] C:\\dev\\app\\main.cpp(12,3): error C2065: 'x': undeclared identifier",
    "modified:   src/service.py", "error: The branch 'backup' is not fully merged.",
    "Traceback (most recent call last):",
)


def test_the_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 30 and len(set(CORPUS)) == len(CORPUS)
    keywordless = [c for c in CORPUS if not any(k in c.lower() for k in ("don", "never", "always", "must", "should",
                                                                          "please", "make sure", "avoid", "use "))]
    assert "the CI box has no network" in keywordless and "we ship on Python 3.8" in keywordless
    assert len(keywordless) >= 10


def test_every_corpus_instruction_is_taken_for_one() -> None:
    assert [c for c in CORPUS if not is_instruction(c)] == []


def test_chat_and_pasted_output_are_not_instructions() -> None:
    assert [t for t in NOT_INSTRUCTIONS if is_instruction(t)] == []


def test_sentences_keep_their_exact_characters() -> None:
    text = "Hello there.  We use e.g. pytest here! Don't touch 3.8 stuff.\n1. First item\n\nLast? yes"
    spans = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == ["Hello there.", "We use e.g. pytest here!", "Don't touch 3.8 stuff.",
                                             "1. First item", "Last?", "yes"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300))
def test_sentences_are_ordered_disjoint_and_trimmed(text: str) -> None:
    spans = sentence_spans(text)
    assert all(a < b for a, b in spans)
    assert all(b <= c for (_, b), (c, _) in itertools.pairwise(spans))
    assert all(not text[a].isspace() and not text[b - 1].isspace() for a, b in spans)
    covered = {i for a, b in spans for i in range(a, b)}
    assert all(text[i].isspace() for i in range(len(text)) if i not in covered)


def test_a_short_message_is_kept_whole_verbatim() -> None:
    text = "from now on, don't run the full suite.\nthe CI box has no network"
    section = protect_user_text([message(14, text)], count=words)
    (entry,) = section.entries
    assert entry.whole and entry.text == text and section.cuts == ()
    lines = render_user_section(section)
    assert lines == [HEADING, f"- seq 14 (handle {'0' * 12}): {text}"]


def test_a_long_message_keeps_its_lead_and_every_instruction_verbatim() -> None:
    filler = " ".join(f"The dashboard shows panel {i} with its chart." for i in range(150))
    rules = ["Never call the billing API from tests.", "we ship on Python 3.8"]
    text = f"Here is the spec for the dashboard. {filler} {rules[0]}\n{filler}\n{rules[1]}\nThanks."
    assert words(text) > MESSAGE_TOKENS
    (entry,) = protect_user_text([message(3, text)], count=words).entries
    assert not entry.whole and entry.kept < entry.sentences
    assert entry.text.startswith("Here is the spec for the dashboard.")
    assert all(r in entry.text for r in rules)
    for part in entry.text.split(GAP.strip()):
        assert part.strip() in text, "every kept run is an exact slice of the message"
    lead = entry.text.split(GAP.strip())[0]
    assert words(lead) <= LEAD_TOKENS + words(rules[0])


def test_the_section_is_append_only_between_passes() -> None:
    said = [message(10 * i, f"Message {i}: keep the public API stable in module m{i}.") for i in range(8)]
    before = render_user_section(protect_user_text(said[:5], count=words))
    after = render_user_section(protect_user_text(said, count=words))
    assert after[:len(before)] == before and len(after) == len(before) + 3


def test_a_full_section_cuts_pasted_text_then_the_oldest_chat_never_an_instruction_first() -> None:
    pasted = message(2, "Here is what I get:\n" + "\n".join(f"[build] step {i} of the build log done" for i in range(400)))
    chat = [message(10 + i, f"Thanks, that helped a lot with part {i}. Never push to main.") for i in range(6)]
    section = protect_user_text([pasted, *chat], count=words, budget_tokens=125)
    assert section.tokens <= 125
    entries = {e.seq: e for e in section.entries}
    assert 2 in section.cuts and entries[2].kept == 0, "the pasted log (no instruction in it) goes first"
    assert all("Never push to main." in entries[m.seq].text for m in chat), "every instruction stays"
    assert not entries[15].instructions_cut
    cut_chat = [m.seq for m in chat if m.seq in section.cuts]
    assert cut_chat == [10, 11, 12], "then the oldest typed text, no more than the budget needs"
    assert section.as_dict()["cut_to_budget"], "the manifest lists what was cut"


def _groups(*messages: MessageEvent) -> list[TurnGroup]:
    return [TurnGroup(message=m) for m in messages]


def test_the_record_holds_the_section_outside_its_own_budget_and_before_the_volatile_part() -> None:
    contract = Contract(goal="Fix the exporter.", constraints=())
    said = [message(2, "the CI box has no network"), MessageEvent(seq=3, event_id="a3", role="assistant",
                                                                   content="Looking at exporter.py now.", handle="a" * 64),
            message(4, "we ship on Python 3.8")]
    record = build_record(contract, said, _groups(*said), fold_seq=5, budget_tokens=400, count=words)
    assert [e.seq for e in record.user_text.entries] == [2, 4]
    text = render_record(record)
    assert text.index(HEADING) > text.index("## Observations of the folded turns")
    assert text.index(HEADING) < text.index("## Names in the folded turns")
    assert "(a user message: its words are under What the user said)" in text
    assert record.tokens == words(render_record(record, with_contract=False, with_user_text=False))
    assert record.as_dict()["user_text"]["entries"][0]["text"] == "the CI box has no network"


def test_the_model_written_record_copies_the_section_verbatim() -> None:
    contract = Contract(goal="Fix the exporter.", constraints=())
    said = [message(2, "the CI box has no network\nand tabs not spaces in the Makefile")]
    record = build_record(contract, said, _groups(*said), fold_seq=3, budget_tokens=400, count=words)
    assert isinstance(record, ProgressRecord)
    written = render_written_record(contract, {"claims": [], "next_step": "run the tests"}, record)
    section = "\n".join(render_user_section(record.user_text))
    assert section in written and written.index(section) < written.index("## Next bounded step")
    bare = render_written_record(contract, {"claims": []}, record, with_contract=False, with_user_text=False)
    assert HEADING not in bare
