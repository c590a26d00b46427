"""Secret redaction (issue 12 item 5): patterns and the pure parts. Standard library only;
the detector that runs detect-secrets' plugins beside these patterns is
``app/services/redaction.py``.

A secret found in a text is replaced by ``[REDACTED:<kind>]`` (no quote, no backslash, so
a JSON string that held the secret is still a valid JSON string). The newlines of a
redacted span are kept after the marker, so line numbers of the redacted text are those of
the text as posted (a head + tail marker's ``?lines=a:b`` reads the raw payload's lines).

Tool-call arguments are JSON: they are parsed, every string value is redacted, and they are
serialized again only when something was redacted (:func:`redact_json_text`); arguments
that are not JSON are redacted as text.

Patterns here cover what detect-secrets 1.5 lacks or only flags (it flags the BEGIN line of
a private key; the block must go): private key blocks (also with ``\\n`` escapes inside a
JSON string, and cut off without an END line), bearer tokens, current OpenAI and Anthropic
keys, Google API keys, Hugging Face tokens, GitHub fine-grained tokens, and assignments of
a high-entropy value to a name like ``*_SECRET``, ``*_TOKEN``, ``*PASSWORD``, ``*_API_KEY``
(an ``env`` dump, a ``.env`` file, a config file). Placeholders (``${VAR}``, ``<token>``,
``changeme``, ``xxxx``, ``***``) and low-entropy values are left alone.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.manifest import Transform

#: The name of the manifest item's transform.
REDACT = "redact_secrets"


@dataclass(frozen=True, order=True)
class Span:
    """``text[start:end]`` is a secret of ``kind`` (a slug: ``aws-access-key``)."""

    start: int
    end: int
    kind: str


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


_ESCAPED_OR_REAL_NEWLINE = r"(?:\\r|\\n|\r|\n)"
PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    r"(?:[\s\S]{0,16384}?-----END (?P=label)-----"  # the whole block
    r"|(?:[A-Za-z0-9+/=:,\- \t]|" + _ESCAPED_OR_REAL_NEWLINE + r")*)"  # cut off: to the end of the base64
)

#: (kind, pattern, group of the secret: 0 for the whole match, run on the lowercased text).
#: No pattern starts with ``\b`` or ``(?i)``: both keep Python's ``re`` from skipping ahead
#: to a literal prefix (25-60 times slower on a 100 kB output). Case-insensitive patterns
#: are written in lower case and run on ``text.lower()`` (same offsets when it has the same
#: length, else on the text with IGNORECASE); a match that starts inside a word is dropped.
PATTERNS: tuple[tuple[str, re.Pattern[str], int, bool], ...] = (
    ("bearer-token", re.compile(r"bearer[ \t]+([a-z0-9\-._~+/]{16,}=*)"), 1, True),
    ("openai-api-key", re.compile(r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{32,}"), 0, False),
    ("anthropic-api-key", re.compile(r"sk-ant-[a-z]{3,6}\d\d-[A-Za-z0-9_\-]{60,}"), 0, False),
    ("google-api-key", re.compile(r"AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), 0, False),
    ("huggingface-token", re.compile(r"hf_[A-Za-z0-9]{34,}(?![A-Za-z0-9_])"), 0, False),
    ("github-token", re.compile(r"github_pat_[0-9A-Za-z_]{60,}"), 0, False),
    ("aws-secret-access-key", re.compile(
        r"aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?([a-z0-9/+]{40})(?![a-z0-9/+])"), 1, True),
    # a 40-character secret near an access key id: "AKIA... with secret <40>", a credentials CSV row
    ("aws-secret-access-key", re.compile(
        r"(?:AKIA|ASIA)[0-9A-Z]{16}\b[\s\S]{0,80}?(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"), 1, False),
)

#: ``NAME=value`` / ``name: value`` / ``"name": "value"`` where NAME says secret (lowercase: run
#: on the lowercased text; the value is read back from the text itself).
SECRET_ASSIGNMENT = re.compile(
    r"(?:secret|token|passw(?:or)?d|pwd|api[_\-]?key|access[_\-]?key|private[_\-]?key|credentials?)"
    r"(?:[_.\-][a-z0-9_.\-]*)?\b[\"']?[ \t]*(?:=|:|=>)[ \t]*"
    r"(?P<quote>[\"']?)(?P<value>[^\s\"'`,;)}\]]{8,})")

_PLACEHOLDER = re.compile(
    r"(?i)^(?:\$\{?|\{\{|<|%\(|%[sd]|\*{3}|x{4}|\.{3}|[A-Za-z_][\w.]*[(\[])|(?:changeme|example|placeholder|"
    r"your[_\-]|redacted|dummy|sample|xxxx|\*\*\*\*|\.\.\.)|^(?:none|null|true|false|undefined)$")


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s character distribution."""
    if not text:
        return 0.0
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_secret(value: str) -> bool:
    """A value worth redacting when assigned to a secret-sounding name: not a placeholder,
    a path, a URL or a reference (``settings.SECRET_KEY``, ``get_token(``), at least 8
    characters, holding letters and digits, with Shannon entropy >= 3.0 bits per character
    (``hunter2hunter2`` is not; a random token is)."""
    if len(value) < 8 or _PLACEHOLDER.search(value) or value.startswith(("/", "./", "~/", "http:", "https:")):
        return False
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+", value):
        return False  # a dotted name: settings.SECRET_KEY, os.environ.get
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False  # identifiers (_token_cache, API_KEY_ENV_VARS), words, numbers
    if "_" in value and re.fullmatch(r"[A-Za-z0-9_]+", value) and re.search(r"[A-Za-z]{3,}_|_[A-Za-z]{3,}", value):
        return False  # an identifier of words: _X509_TOKEN_TYPE, keep_old_secret_for_24_hours
    if value.startswith("urn:"):
        return False
    return shannon_entropy(value) >= 3.0


def _in_word(text: str, at: int) -> bool:
    return at > 0 and (text[at - 1].isalnum() or text[at - 1] == "_")


def _matches(pattern: re.Pattern[str], text: str, lowered: str | None) -> Iterable[re.Match[str]]:
    """``pattern`` over ``lowered`` (same offsets as ``text``) or, without it, over ``text``
    ignoring case."""
    if lowered is not None:
        return pattern.finditer(lowered)
    return re.compile(pattern.pattern, re.IGNORECASE).finditer(text)


#: ``scheme://user:password@host``: the password is whatever the userinfo holds after the
#: first ``:`` up to the last ``@`` before the host (as URL parsers split the authority), so
#: every character userinfo allows (sub-delims ``!$&'()*+,;=``, ``:``, ``%XX``) and the raw
#: ``@`` people leave in passwords are covered; the authority ends at ``/``, ``?``, ``#`` or
#: a blank. detect-secrets' pattern stops at ``:`` and a few others, so ``u:pa:ss@h`` and
#: ``u:p@ss@h`` went through.
URL_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://(?P<user>[^\s/?#@:\[\]]*):(?P<password>[^\s/?#\[\]]+)"
                          r"@(?P<host>[A-Za-z0-9\[][^\s/?#@\\\"'<>]*)")

_URL_PLACEHOLDERS = frozenset({"pass", "password", "passwd", "pwd", "pw", "secret", "token", "mypassword", "mytoken",
                               "changeme", "example", "user", "username", "foo", "bar", "test", "admin", "key",
                               "apikey", "api_key", "repo", "xxx", "none", "null"})


def url_placeholder(password: str) -> bool:
    """A URL password of documentation, not a secret: a word such as ``pass`` or ``password``,
    an environment reference (``$DB_PASSWORD``, ``${TOKEN}``, ``%(pw)s``), ``<password>``,
    ``{{ secret }}``, ``****`` (one character over 60 %)."""
    if password.lower() in _URL_PLACEHOLDERS:
        return True
    if re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%\(\w+\)s|<[^<>]*>|\{\{[^{}]*\}\}|\{[A-Za-z_]\w*\}", password):
        return True
    return max(Counter(password).values()) > 0.6 * len(password)


def pattern_spans(text: str) -> list[Span]:
    """Secrets found by this module's own patterns (see the module docstring)."""
    lower = text.lower()
    lowered = lower if len(lower) == len(text) else None
    spans = [Span(m.start(), m.end(), "private-key") for m in PRIVATE_KEY_BLOCK.finditer(text)]
    for kind, pattern, group, ignore_case in PATTERNS:
        found = _matches(pattern, text, lowered) if ignore_case else pattern.finditer(text)
        spans += [Span(m.start(group), m.end(group), kind) for m in found if not _in_word(text, m.start())]
    if "://" in text:
        for m in URL_USERINFO.finditer(text):
            password = m.group("password")
            if not _in_word(text, m.start()) and not url_placeholder(password):
                spans.append(Span(m.start("password"), m.end("password"), "basic-auth-credentials"))
    for m in _matches(SECRET_ASSIGNMENT, text, lowered):
        value = text[m.start("value"):m.end("value")]
        if looks_secret(value):
            spans.append(Span(m.start("value"), m.end("value"), "secret-assignment"))
    return spans


def merge(spans: Iterable[Span]) -> list[Span]:
    """Overlapping spans merged (the kind of the earliest, longest one), sorted."""
    out: list[Span] = []
    # at one place, the longest span; of equal ones, a named kind before the generic assignment
    for span in sorted(spans, key=lambda s: (s.start, -s.end, s.kind == "secret-assignment", s.kind)):
        if span.end <= span.start:
            continue
        if out and span.start < out[-1].end:
            last = out[-1]
            out[-1] = Span(last.start, max(last.end, span.end), last.kind)
        else:
            out.append(span)
    return out


def apply(text: str, spans: Sequence[Span]) -> str:
    """``text`` with each (merged) span replaced by its marker and the span's newlines."""
    parts: list[str] = []
    at = 0
    for span in merge(spans):
        parts.append(text[at:span.start])
        parts.append(marker(span.kind) + "\n" * text.count("\n", span.start, span.end))
        at = span.end
    parts.append(text[at:])
    return "".join(parts)


Finder = Callable[[str], list[Span]]


@dataclass(frozen=True)
class Redaction:
    """What redaction did to one field or payload: the text and the kinds it removed."""

    text: str
    kinds: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.kinds)


def redact_text(text: str, find: Finder) -> Redaction:
    spans = merge(find(text))
    if not spans:
        return Redaction(text)
    return Redaction(apply(text, spans), tuple(s.kind for s in spans))


def _walk(value: Any, find: Finder, kinds: list[str]) -> Any:
    if isinstance(value, str):
        done = redact_text(value, find)
        kinds.extend(done.kinds)
        return done.text
    if isinstance(value, list):
        return [_walk(v, find, kinds) for v in value]
    if isinstance(value, dict):
        return {k: _walk(v, find, kinds) for k, v in value.items()}
    return value


def redact_json_text(text: str, find: Finder) -> Redaction:
    """Tool-call arguments: when ``text`` is JSON, every string in it is redacted and the
    value serialized again (``json.dumps``, non-ASCII kept) only when something was, so the
    result is valid JSON whenever the input was; otherwise ``text`` is redacted as text."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return redact_text(text, find)
    kinds: list[str] = []
    walked = _walk(value, find, kinds)
    if not kinds:
        return Redaction(text)
    return Redaction(json.dumps(walked, ensure_ascii=False), tuple(kinds))


def redaction_transform(kinds: Sequence[str]) -> Transform:
    """The manifest item's transform for the secrets redacted from its event at ingest."""
    counts = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in sorted(Counter(kinds).items()))
    return Transform(REDACT, count=len(kinds),
                     note=f"{len(kinds)} secret(s) replaced by [REDACTED:<kind>] at ingest ({counts}); the handle "
                          "keeps the text as posted")
