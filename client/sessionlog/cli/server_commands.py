"""CLI commands that run the service itself: serve, db upgrade."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")

DbOption = Annotated[
    str | None, typer.Option("--db", help="Database URL (default: $SESSIONLOG_DB or sqlite:///var/sessionlog.db).")
]


def register(app: typer.Typer) -> None:
    """Add `serve` and `db upgrade` to `app`."""
    app.command("serve")(serve)
    app.add_typer(db_app, name="db")


def serve(
    db: DbOption = None,
    listen: Annotated[str | None, typer.Option("--listen", help="HOST:PORT to bind (default 127.0.0.1:50051).")] = None,
    no_migrate: Annotated[bool, typer.Option("--no-migrate", help="Do not run migrations on start.")] = False,
) -> None:
    """Run the sessionlog service (embedded SQLite by default) until SIGTERM/SIGINT."""
    from sessionlog_server.config import Settings
    from sessionlog_server.logging import configure
    from sessionlog_server.transport.server import serve as run

    settings = Settings.from_env(db=db, listen=listen, migrate=False if no_migrate else None)
    _ensure_sqlite_dir(settings.db)
    configure(settings.log_level)
    asyncio.run(run(settings))


@db_app.command("upgrade")
def upgrade(db: DbOption = None) -> None:
    """Run the migration chain up to the newest revision."""
    from sessionlog_server.config import Settings
    from sessionlog_server.storage.migrate import upgrade as run

    settings = Settings.from_env(db=db)
    _ensure_sqlite_dir(settings.db)
    run(settings.db)
    typer.echo("database is at the newest revision")


def _ensure_sqlite_dir(url: str) -> None:
    from pathlib import Path

    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
