"""The one settings object (DESIGN.md section 5, rule 4): environment prefix ``CTXD_``.

Defaults give the embedded mode: a SQLite file under ``CTXD_DATA_DIR`` and an
in-process token cache. Nothing else in ctxd reads the environment.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


class Settings(BaseSettings):
    """Service configuration, validated at start-up. Every field is the environment
    variable ``CTXD_<FIELD>``; its description is what ``ctxd serve --help`` and the
    README's Configuration table say (:func:`settings_help`)."""

    model_config = SettingsConfigDict(env_prefix="CTXD_", extra="ignore")

    data_dir: Path = Field(default=Path("./.data"), description=(
        "directory of the embedded SQLite file (created if missing; resolved to an absolute path, "
        "logged at start-up)"))
    database_url: str = Field(default="", description=(
        "SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host/db (the password is never logged); "
        "empty: the SQLite file ctxd.sqlite3 in the data directory"))
    redis_url: str = Field(default="", description=(
        "Redis URL of the segment token cache, e.g. redis://host:6379/0; empty: the in-process cache"))
    profiles_path: Path | None = Field(default=None, description=(
        "a TOML file of profiles that overrides or adds to the shipped ones"))
    default_profile: str = Field(default="qwen3", description="profile of the sessions that name none")
    local_cache_bytes: int = Field(default=256 * 1024 * 1024, ge=0, description=(
        "byte bound of the in-process segment token cache (when no Redis)"))
    memo_bytes: int = Field(default=256 * 1024 * 1024, ge=0, description=(
        "byte bound (estimated, at or above the real size: 1.03x-1.83x over the 32 traces) of the per-session "
        "assembly memo: parsed events, leaf messages and what is derived from them, the previous request's ids "
        "and manifest; about 27 kB per event (a 400-event session: ~11 MB, so ~20 such sessions stay warm by "
        "default); least recently used sessions are dropped and re-read from the database"))
    shell_state_bytes: int = Field(default=64 * 1024 * 1024, ge=0, description=(
        "byte bound (estimated) of the per-session shell inference state kept between POSTs (texts written, "
        "artifacts seen, calls unanswered); a session dropped rebuilds it from its stored calls; 0: none kept"))
    summary_outcome_bytes: int = Field(default=16 * 1024 * 1024, ge=1, description=(
        "byte bound (estimated) of the summarizer's latest outcome per session kept for the next pass (records "
        "and findings); least recently used sessions are dropped and their pass uses the deterministic record"))
    max_payload_bytes: int = Field(default=8 * 1024 * 1024, ge=1, description=(
        "largest payload a POST may store, in bytes: a tool result's payload (UTF-8) or a message's canonical "
        "JSON (content, reasoning, tool calls); larger answers 413 and stores nothing (the largest in the shared "
        "traces is 110,817 bytes)"))
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1, description=(
        "largest HTTP request body, in bytes: 413 before the body is read when Content-Length says more; a "
        "streamed body is cut off at the limit (the largest POST of the shared traces is 114,098 bytes)"))
    redis_timeout_seconds: float = Field(default=0.05, gt=0, description=(
        "Redis socket timeout in seconds; past it ctxd encodes locally (counted, never an error)"))
    redis_ttl_seconds: int = Field(default=7 * 24 * 3600, gt=0, description=(
        "lifetime of a cached segment in Redis, in seconds"))
    auth: Literal["auto", "required", "off"] = Field(default="auto", description=(
        "API keys (Authorization: Bearer): auto = off when serving on a loopback address (CTXD_HOST), required "
        "otherwise; required; off (every caller is the default tenant)"))
    host: str = Field(default="127.0.0.1", description=(
        "the address ctxd serves on (`ctxd serve --host` sets it); with CTXD_AUTH=auto keys are required unless it "
        "is a loopback address, and on any connection that arrives on a non-loopback address"))
    rate_limit: str = Field(default="20000/minute", description=(
        "per-tenant request rate limit in the `limits` notation, several separated by ';' (e.g. 600/minute;50/second); "
        "over it: 429 with Retry-After. Counted in Redis when CTXD_REDIS_URL is set, in process otherwise; empty: none"))
    storage_quota_bytes: int = Field(default=10 * 1024**3, ge=0, description=(
        "per-tenant storage quota in bytes: the payloads its sessions posted, each counted every time it is posted "
        "(as if not deduplicated); a batch that would exceed it answers 429 and stores nothing; 0: none"))
    max_json_depth: int = Field(default=64, ge=2, description=(
        "deepest nesting of arrays and objects in a JSON body; deeper answers 422 naming the place"))
    max_string_chars: int = Field(default=1024 * 1024, ge=1, description=(
        "longest string (or object key) of a JSON body, in characters, but the event payload fields (payload, content, "
        "reasoning, tool-call arguments), bounded by CTXD_MAX_PAYLOAD_BYTES instead; longer answers 422"))
    redact_secrets: bool = Field(default=True, description=(
        "redact credentials (cloud keys, private key blocks, API tokens, passwords in URLs, secret assignments) in "
        "message text, tool-call arguments and tool outputs at ingest; the raw payload stays whole behind its handle"))
    manifest_retention_days: float = Field(default=0, ge=0, description=(
        "delete persisted manifests older than this many days (hourly, and `ctxd prune`); the newest manifest of "
        "each session and format, and what kept manifests are rebuilt from, stay; 0: keep every manifest"))
    summarizer_url: str = Field(default="", description=(
        "OpenAI-compatible chat-completions URL of the optional model-written progress record (e.g. "
        "http://127.0.0.1:8001/v1/chat/completions), asked after a POST for the pass the next GET would run, never "
        "by a GET (the GET that runs that pass may wait for it: CTXD_SUMMARIZER_WAIT_SECONDS); its candidate is audited against that pass and used only by a pass of exactly that fold; "
        "empty: the deterministic record only"))
    summarizer_wait_seconds: float = Field(default=20.0, ge=0, le=600, description=(
        "how long a GET that runs a compaction pass waits for the summarizer's candidate of exactly that pass while "
        "its job (started after the POST) is in flight in the same worker, in seconds; then it uses the admitted "
        "candidate or the deterministic record, and the manifest's compaction.record.source.wait says how long it "
        "waited or that the wait ran out. Other GETs never wait; a job in another worker is not waited for (that "
        "GET uses the deterministic record); 0: never wait"))
    summarizer_model: str = Field(default="summarizer", description="the `model` field of the summarizer's requests")
    summarizer_api_key: str = Field(default="", description=(
        "sent to the summarizer as Authorization: Bearer when set (never logged)"))
    summarizer_timeout_seconds: float = Field(default=30.0, gt=0, description=(
        "timeout of one summarizer request, in seconds"))
    summarizer_retries: int = Field(default=2, ge=0, le=10, description=(
        "N: how many times the audit's findings are fed back to the summarizer before the deterministic record "
        "is used"))
    summarizer_input_tokens: int = Field(default=32768, ge=1024, description=(
        "cap of one summarizer request's input, in (estimated) tokens; the evidence goes in bounded chunks"))
    summarizer_max_chunks: int = Field(default=4, ge=1, le=64, description=(
        "most summarizer requests per candidate (older evidence beyond them is left to the host record)"))
    summarizer_output_tokens: int = Field(default=4096, ge=256, description=(
        "`max_tokens` of each summarizer request"))
    auto_migrate: bool = Field(default=True, description=(
        "migrate the database schema to the head revision at start-up, under a lock (PostgreSQL: an advisory lock; "
        "SQLite: a file lock beside the database) so concurrent starters never race; false: only `ctxd migrate` "
        "migrates (a one-shot job) and ctxd refuses to start while the schema is behind, naming the current and head "
        "revisions"))
    ui_session_seconds: int = Field(default=900, ge=30, le=7 * 24 * 3600, description=(
        "lifetime of the inspector's (/ui) session cookie, in seconds, when API keys are required: the page asks "
        "for a key once, then keeps a signed, HttpOnly, SameSite=Strict cookie naming the key (never the key "
        "itself); a revoked key ends it at once"))
    ui_secret: str = Field(default="", description=(
        "secret that signs the inspector's session cookies; empty: a random one per start (`ctxd serve` shares it "
        "with its --workers; cookies end at restart). Set it when several hosts serve /ui behind one address"))
    log_level: str = Field(default="info", description=(
        "log level: " + ", ".join(LOG_LEVELS)))
    log_format: Literal["auto", "json", "console"] = Field(default="auto", description=(
        "log line format on stderr: json (one JSON object a line: timestamp, level, logger, event, request_id, pid), "
        "console (the same as aligned text, for humans), auto = console when stderr is a terminal, else json"))

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        level = value.strip().lower()
        if level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return level

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @cached_property
    def effective_database_url(self) -> str:
        """The database URL in use: ``database_url`` or the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.data_dir / 'ctxd.sqlite3'}"


def settings_help() -> list[tuple[str, str, str]]:
    """``(environment variable, default, description)`` for every :class:`Settings` field,
    in declaration order: the one source of ``ctxd serve --help`` and the README table."""
    rows = []
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        text = "" if default in (None, "") else str(default)
        if isinstance(default, Path) and not default.is_absolute():
            text = os.path.join(".", text)
        rows.append((f"CTXD_{name.upper()}", text, field.description or ""))
    return rows


def offline_environment() -> None:
    """Forbid model-hub downloads: tokenizers load from files shipped in packages."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # transformers' "PyTorch was not found" advice at import (ctxd needs only its tokenizers)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
