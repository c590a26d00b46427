"""Alembic migrations run programmatically (``ctxd migrate`` and the app lifespan)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    """An alembic Config pointing at ``migrations/`` with ``url`` as the database."""
    config = Config()
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_head(url: str | None = None) -> None:
    """Bring the database at ``url`` (default: the settings' URL) to the latest revision."""
    if url is None:
        from app.settings import Settings

        url = Settings().effective_database_url
    command.upgrade(alembic_config(url), "head")
