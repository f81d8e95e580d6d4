"""Run the Alembic migration chain in migrations/ (the `db upgrade` command and `serve`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

from sessionlog_server.storage.factory import normalise_url

INSTALLED_MIGRATIONS = Path("share") / "sessionlog" / "migrations"  # under sys.prefix (pyproject's data-files)


def migrations_dir() -> Path:
    """Where the Alembic chain is: $SESSIONLOG_MIGRATIONS_DIR, else migrations/ of the checkout this
    code runs from (a development install), else the copy a regular install put under sys.prefix.

    The checkout wins over the installed copy so that a developer's new migration is the one run.
    """
    override = os.environ.get("SESSIONLOG_MIGRATIONS_DIR")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[3] / "migrations"
    for candidate in (checkout, Path(sys.prefix) / INSTALLED_MIGRATIONS):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(
        f"no Alembic migrations in {checkout} or {Path(sys.prefix) / INSTALLED_MIGRATIONS}: "
        "set SESSIONLOG_MIGRATIONS_DIR to the repository's migrations/ directory"
    )


def alembic_config(url: str) -> Config:
    """An Alembic config for `url`, without needing an alembic.ini on disk."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision` (creating the SQLite file if needed)."""
    command.upgrade(alembic_config(url), revision)
