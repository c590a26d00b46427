"""Secret redaction (issue 12 item 5), the detector on its own: every fake secret of the
corpus is found, near misses are not, tool-call arguments stay valid JSON, line numbers
survive.

Peer fault kind: excitedjs/dreamux#412 (pattern-matching the serialized arguments missed
``TOKEN=\\"abc\\"`` inside a JSON string and every .env line but the first): here arguments
are parsed and each string redacted, so the escaped forms are tests below.
"""

from __future__ import annotations

import json

import pytest

from app.domain.redaction import Span, apply, looks_secret, merge, redact_json_text, redact_text
from app.services.redaction import find_secrets
from tests.secret_corpus import ARGUMENTS, ASSISTANT_TEXT, CORPUS, NEAR_MISSES


@pytest.mark.parametrize(("name", "text", "secrets"), CORPUS, ids=[c[0] for c in CORPUS])
def test_every_corpus_secret_is_redacted(name: str, text: str, secrets: list[str]) -> None:
    done = redact_text(text, find_secrets)
    assert done.changed
    assert [s for s in secrets if s in done.text] == []
    assert done.text.count("\n") == text.count("\n"), "line numbers must survive (head + tail markers cite lines)"


def test_assistant_text_is_redacted() -> None:
    text, secrets = ASSISTANT_TEXT
    done = redact_text(text, find_secrets)
    assert [s for s in secrets if s in done.text] == [] and "I will not print it again." in done.text


@pytest.mark.parametrize(("arguments", "secrets"), ARGUMENTS)
def test_arguments_stay_valid_json(arguments: str, secrets: list[str]) -> None:
    done = redact_json_text(arguments, find_secrets)
    value = json.loads(done.text)  # valid JSON
    assert [s for s in secrets if s in done.text] == []
    assert set(value) == set(json.loads(arguments)), "the same keys"


def test_arguments_that_are_not_json_are_redacted_as_text() -> None:
    secret = CORPUS[0][2][2]  # a GitHub token
    done = redact_json_text('{"command": "echo ' + secret, find_secrets)
    assert secret not in done.text and done.kinds == ("github-token",)


def test_unchanged_arguments_keep_their_exact_text() -> None:
    args = '{ "command" :"ls -la"  }'
    assert redact_json_text(args, find_secrets).text == args


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(text: str) -> None:
    assert redact_text(text, find_secrets).text == text


@pytest.mark.parametrize(("value", "secret"), [("wJalrXUtnFEMI/K7MDENG/bPxRfiCY9XAMPLEKEY", True), ("Xk9#mP2qLw8zR4vT", True),
                                               ("hunter2hunter2", False), ("password", False), ("${TOKEN}", False),
                                               ("os.environ.get", False), ("_token_cache", False), ("12345678", False),
                                               ("/etc/ssl/private/key.pem", False), ("get_token(", False)])
def test_looks_secret(value: str, secret: bool) -> None:
    assert looks_secret(value) is secret


def test_merge_and_apply_keep_newlines() -> None:
    text = "a\nBEGIN\nx\ny\nEND\nz"
    spans = [Span(2, 15, "private-key"), Span(8, 9, "other")]
    assert merge(spans) == [Span(2, 15, "private-key")]
    assert apply(text, spans) == "a\n[REDACTED:private-key]\n\n\n\nz"
