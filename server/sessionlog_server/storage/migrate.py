"""Run the Alembic migration chain in migrations/ (the `db upgrade` command and `serve`)."""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config

from sessionlog_server.storage.factory import normalise_url


def migrations_dir() -> Path:
    """migrations/ at the repository root, or $SESSIONLOG_MIGRATIONS_DIR."""
    override = os.environ.get("SESSIONLOG_MIGRATIONS_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic config for `url`, without needing an alembic.ini on disk."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision` (creating the SQLite file if needed)."""
    command.upgrade(alembic_config(url), revision)
