"""The secret detector of ingest (issue 12 item 5): detect-secrets' (Apache-2.0) regex
plugins plus the patterns of ``app/domain/redaction.py``.

detect-secrets' plugins are instantiated directly and run over the whole text
(``analyze_string``: their regular expressions, no global settings, so threads may share
them); each secret they report is then located in the text. Left out on purpose, because
on real tool output they flag hashes, UUIDs, base64 test data and addresses: the generic
high-entropy plugins (``Base64HighEntropyString``, ``HexHighEntropyString``), the keyword
plugin (its place is taken by the domain's secret-assignment pattern, which checks the
value's entropy and skips placeholders) and ``IPPublicDetector``.

:func:`redact_event` redacts what an event brings into requests: a message's content,
reasoning and tool-call arguments (arguments stay valid JSON), a tool result's payload.
The contract, system text and tool declarations (session create) are never redacted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector

from app.domain.ingest import redact_message
from app.domain.redaction import Redaction, Span, merge, pattern_spans, redact_text
from app.observability import metrics

#: detect-secrets plugins not used (see the module docstring).
EXCLUDED = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector", "IPPublicDetector",
                      # flags the words "BEGIN ... PRIVATE KEY" (in code too); the domain pattern takes whole blocks
                      "PrivateKeyDetector",
                      # keyword = value forms (``cloudant_password = ...``) that the domain's secret-assignment
                      # pattern covers; their look-behind patterns cost 3/4 of the scan time on tool output
                      "CloudantDetector", "IbmCloudIamDetector", "IbmCosHmacDetector", "SoftlayerDetector"})


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


@lru_cache(maxsize=1)
def plugins() -> tuple[tuple[str, RegexBasedDetector], ...]:
    """(kind, plugin) of every detect-secrets regex plugin used."""
    out: list[tuple[str, RegexBasedDetector]] = []
    # detect-secrets types the mapping with an unbound TypeVar: state its bound
    mapping: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    for secret_type, cls in sorted(mapping.items()):
        if cls.__name__ in EXCLUDED or not issubclass(cls, RegexBasedDetector):
            continue
        out.append((_slug(secret_type), cls()))
    return tuple(out)


#: Values in URLs (``scheme://user:<value>@host``) that are placeholders of documentation.
PLACEHOLDER_WORDS = frozenset({"pass", "password", "passwd", "pwd", "pw", "secret", "token", "mypassword", "mytoken",
                               "changeme", "example", "user", "username", "foo", "bar", "test", "admin", "key",
                               "apikey", "api_key", "repo", "xxx", "none", "null"})


def _plain(value: str) -> bool:
    """A reported value that is a placeholder, not a secret: ``$PASSWORD``, ``${TOKEN}``,
    ``<password>``, ``****``, ``ACxxxxxxxxxxxxxxxx`` (one character over 60 %), or a word
    documentation uses (``user:pass@host``)."""
    if value.startswith(("$", "{", "<", "%", ":")) or value.lower() in PLACEHOLDER_WORDS:
        return True
    return max(Counter(value).values()) > 0.6 * len(value)


_EDGE = " \t\r\n=:\"'"


#: Literals without which a plugin's patterns cannot match: the plugin is skipped on a text
#: holding none of them (most tool output), which makes the scan several times faster.
PREFILTER: dict[str, tuple[str, ...]] = {
    "aws-access-key": ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "aws", "AWS", "Aws"),
    "artifactory-credentials": ("AKC", "AP"),
    "azure-storage-account-access-key": ("AccountKey=",),
    "basic-auth-credentials": ("://",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "gitlab-token": ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-"),
    "json-web-token": ("eyJ",),
    "mailchimp-access-key": ("-us",),
    "npm-tokens": ("_authToken",),
    "openai-token": ("T3BlbkFJ",),
    "pypi-token": ("pypi-",),
    "sendgrid-api-key": ("SG.",),
    "slack-token": ("xox", "hooks.slack.com"),
    "square-oauth-secret": ("sq0csp-",),
    "stripe-access-key": ("k_live_",),
    "twilio-api-key": ("AC", "SK"),
}


def find_secrets(text: str) -> list[Span]:
    """Spans of ``text`` holding a secret (merged, sorted). A plugin's pattern with one group
    that starts inside the match (``://user:(password)@``) marks the group, however short;
    otherwise the whole match (8 characters or more), less the delimiters some patterns
    include (quotes, ``=``, blanks)."""
    spans = pattern_spans(text)
    for kind, plugin in plugins():
        literals = PREFILTER.get(kind)
        if literals is not None and not any(literal in text for literal in literals):
            continue
        for regex in plugin.denylist:
            for m in regex.finditer(text):
                grouped = regex.groups == 1 and bool(m.group(1)) and m.start(1) > m.start()
                if grouped:
                    start, end = m.start(1), m.end(1)
                else:
                    start, end = m.start(), m.end()
                    while start < end and text[start] in _EDGE:
                        start += 1
                    while end > start and text[end - 1] in _EDGE:
                        end -= 1
                    if (start > 0 and text[start - 1].isalnum()) or (end < len(text) and text[end].isalnum()):
                        continue  # inside a longer word: base64 data, not a token (AKIA... in a font blob)
                if (grouped or end - start >= 8) and not _plain(text[start:end]):
                    spans.append(Span(start, end, kind))
    return merge(spans)


def count_redactions(kinds: Sequence[str]) -> None:
    """``ctxd_redactions_total`` += 1 per kind redacted (call it once the redacted event is
    committed: app/services/sessions.py)."""
    for kind in kinds:
        metrics.REDACTIONS.labels(kind).inc()


def redact_payload(text: str) -> Redaction:
    """A tool output (or any text) redacted."""
    return redact_text(text, find_secrets)


def redact_event(body: dict[str, Any]) -> tuple[str, ...]:
    """Redact, in place, the message fields of an event body that enter requests (content,
    reasoning, each tool call's arguments); returns the kinds redacted (empty: unchanged).
    A tool result's payload is redacted by the caller (:func:`redact_payload`): its raw
    bytes are stored first under their own handle."""
    return redact_message(body, find_secrets)
