"""The one settings object (DESIGN.md section 5, rule 4): environment prefix ``CTXD_``.

Defaults give the embedded mode: a SQLite file under ``CTXD_DATA_DIR`` and an
in-process token cache. Nothing else in ctxd reads the environment.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration, validated at start-up.

    Fields:
        data_dir: directory for the embedded SQLite file (created if missing).
        database_url: SQLAlchemy URL; ``postgresql+psycopg://...`` selects PostgreSQL.
            Empty means ``sqlite:///<data_dir>/ctxd.sqlite3``.
        redis_url: Redis URL for the segment cache; empty means the in-process LRU.
        profiles_path: a TOML file of profiles that overrides/extends the shipped ones.
        default_profile: profile used when a session names none.
        local_cache_bytes: byte bound of the in-process token cache.
        memo_bytes: byte bound (estimated) of the per-session assembly memo: parsed
            events, leaf messages, the previous request's ids (app/services/memo.py).
        max_payload_bytes: largest payload a POST may store, in bytes: a tool result's
            payload (UTF-8) or a message's canonical JSON (content, reasoning, tool calls).
            Larger answers 413 and stores nothing. The largest in the shared traces is
            110,817 bytes; the default (8 MiB) admits a 2 MB tool output with room to spare.
        max_body_bytes: largest HTTP request body, in bytes (413 before the body is read when
            Content-Length says more; a streamed body is cut off at the limit). Default 32 MiB;
            the largest POST of the shared traces is 114,098 bytes.
        redis_timeout_seconds: socket timeout for Redis; past it ctxd encodes locally.
        redis_ttl_seconds: lifetime of a cached segment in Redis.
        summarizer_url: an OpenAI-compatible chat-completions endpoint (e.g.
            ``http://127.0.0.1:8001/v1/chat/completions``) asked for a candidate progress
            record after each POST (issue 10 item 6; app/services/summarizer.py). Empty: no
            summarizer, the deterministic record only.
        summarizer_model: the ``model`` field of its requests.
        summarizer_api_key: sent as ``Authorization: Bearer`` when set.
        summarizer_timeout_seconds: per HTTP request to it.
        summarizer_retries: N, how many times the audit's findings are fed back before
            the deterministic record is used (default 2).
        summarizer_input_tokens: cap of one request's input (estimated tokens); the
            evidence is sent in bounded chunks within it.
        summarizer_max_chunks: most requests per candidate (older evidence beyond them is
            left to the host record).
        summarizer_output_tokens: ``max_tokens`` of each request.
    """

    model_config = SettingsConfigDict(env_prefix="CTXD_", extra="ignore")

    data_dir: Path = Field(default=Path("./.data"))
    database_url: str = ""
    redis_url: str = ""
    profiles_path: Path | None = None
    default_profile: str = "qwen3"
    local_cache_bytes: int = 256 * 1024 * 1024
    memo_bytes: int = 256 * 1024 * 1024
    max_payload_bytes: int = Field(default=8 * 1024 * 1024, ge=1)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    redis_timeout_seconds: float = 0.05
    redis_ttl_seconds: int = 7 * 24 * 3600
    log_level: str = "info"
    summarizer_url: str = ""
    summarizer_model: str = "summarizer"
    summarizer_api_key: str = ""
    summarizer_timeout_seconds: float = Field(default=30.0, gt=0)
    summarizer_retries: int = Field(default=2, ge=0, le=10)
    summarizer_input_tokens: int = Field(default=32768, ge=1024)
    summarizer_max_chunks: int = Field(default=4, ge=1, le=64)
    summarizer_output_tokens: int = Field(default=4096, ge=256)

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


def offline_environment() -> None:
    """Forbid model-hub downloads: tokenizers load from files shipped in packages."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
