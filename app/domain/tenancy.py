"""Tenancy values (issue 12): who is calling. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass

#: The tenant of every session created without authentication (and of sessions that existed
#: before tenancy: migration 0008_tenancy).
DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class Principal:
    """The caller: its tenant and the API key it presented (None when auth is off)."""

    tenant_id: str
    key_id: str | None = None
