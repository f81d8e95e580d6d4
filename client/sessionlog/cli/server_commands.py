"""CLI commands that run the service itself: serve, db upgrade."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from sessionlog.cli.common import fail
from sessionlog.cli.help_style import ConventionalTyper
from sessionlog.core.errors import first_line

db_app = ConventionalTyper(no_args_is_help=True, help="Database maintenance.")

DbOption = Annotated[
    str | None,
    typer.Option("--db", metavar="URL", help="Database URL (default: $SESSIONLOG_DB or sqlite:///var/sessionlog.db)."),
]


token_app = ConventionalTyper(no_args_is_help=True, help="Bearer tokens for the server's tokens file.")


def register(app: typer.Typer) -> None:
    """Add `serve`, `db upgrade` and `token new` to `app`."""
    app.command("serve")(serve)
    app.add_typer(db_app, name="db")
    app.add_typer(token_app, name="token")


@token_app.command("new")
def new_token(
    namespace: Annotated[
        str, typer.Option("--namespace", metavar="NS", help="The namespace the token's sessions live in.")
    ],
    read_only: Annotated[bool, typer.Option("--read-only", help="An auditor's token: reads only.")] = False,
    name: Annotated[str, typer.Option("--name", metavar="NAME", help="A label for logs.")] = "",
) -> None:
    """Make a token: prints it (give it to the client) and its tokens-file line (give that to the server).

    The server stores only the token's sha256, so the tokens file grants nothing if it leaks.
    """
    from sessionlog_server.service.access import namespace_problem
    from sessionlog_server.tokens import config_line
    from sessionlog_server.tokens import new_token as make

    problem = namespace_problem(namespace)
    if problem is not None:  # the server would refuse the line
        raise fail(problem, code=2)
    token = make()
    typer.echo(f"token: {token}")
    typer.echo(f"tokens-file line: {config_line(token, namespace, read_only=read_only, name=name)}")


def serve(
    db: DbOption = None,
    listen: Annotated[
        str | None,
        typer.Option(
            "--listen", metavar="HOST:PORT", help="HOST:PORT to bind (default: $SESSIONLOG_LISTEN or 127.0.0.1:50051)."
        ),
    ] = None,
    no_migrate: Annotated[
        bool, typer.Option("--no-migrate", help="Do not run migrations on start (as $SESSIONLOG_MIGRATE=false).")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="N",
            help=(
                "Server processes sharing the address, at most 64 "
                "($SESSIONLOG_WORKERS; default 0: one per core, at most 8)."
            ),
        ),
    ] = None,
) -> None:
    """Run the sessionlog service (embedded SQLite by default) until SIGTERM, SIGINT or SIGHUP (a graceful stop)."""
    from sessionlog_server.transport.signals import hold_stop_signals

    hold_stop_signals()  # until the handlers are in place (transport/signals.py): one that comes waits for them
    from sessionlog_server.transport.grpc_core import apply_server_options

    apply_server_options()  # before anything below loads gRPC (transport/grpc_core.py)
    from sessionlog_server.config import Settings
    from sessionlog_server.logging import configure
    from sessionlog_server.transport.collector import parse_thresholds
    from sessionlog_server.transport.event_loop import loop_factory
    from sessionlog_server.transport.event_loop import run as run_on_loop
    from sessionlog_server.transport.workers import default_workers, run_workers

    with startup_errors():
        settings = Settings.from_env(db=db, listen=listen, migrate=False if no_migrate else None, workers=workers)
        _check_db(settings.db)
        loop_factory(settings.event_loop)  # a bad choice is refused here, before any worker starts
        parse_thresholds(settings.gc_thresholds)  # likewise
        configure(settings.log_level)
        _warn_unknown_variables()
        count = settings.workers or default_workers()
        status = 0
        if count == 1:
            # Loaded here: the parent of several workers serves nothing, so it does not load the
            # server (each worker does, transport/workers.py), only what prepares for them.
            from sessionlog_server.transport.server import serve as run

            run_on_loop(run(settings), settings.event_loop)
        else:
            status = run_workers(settings, count)
    if status:
        raise typer.Exit(status)


def _warn_unknown_variables() -> None:
    """Say which `SESSIONLOG_*` variables nothing reads (a typo), in the log `serve` starts."""
    import os

    import structlog

    from sessionlog_server.config import unknown_variables

    log = structlog.get_logger("sessionlog.serve")
    for variable, meant in unknown_variables(os.environ):
        log.warning("unknown setting ignored", variable=variable, **({"did_you_mean": meant} if meant else {}))


@db_app.command("upgrade")
def upgrade(db: DbOption = None) -> None:
    """Run the migration chain up to the newest revision."""
    from sessionlog_server.config import Settings
    from sessionlog_server.storage.factory import shown_url
    from sessionlog_server.storage.migrate import upgrade as run
    from sessionlog_server.storage.schema import SCHEMA_REVISION

    with startup_errors():
        settings = Settings.from_env(db=db)
        _check_db(settings.db)
        before = run(settings.db)
    # Named (its password hidden): without --db it is $SESSIONLOG_DB or var/sessionlog.db under
    # the current directory, made if missing, and the line did not say which it had been.
    database = f"database {shown_url(settings.db)}"
    if before == SCHEMA_REVISION:
        typer.echo(f"{database} is at the newest revision ({SCHEMA_REVISION}): nothing to do")
    else:  # it said only "at the newest revision", the same whether it migrated or not
        typer.echo(f"{database} upgraded from {before or 'no schema'} to {SCHEMA_REVISION}, the newest revision")


@contextmanager
def startup_errors() -> Iterator[None]:
    """Configuration and start-up failures (a bad setting, a port in use, a missing file, an
    unreachable database) as one line that says what is wrong, and exit status 2."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except ValueError as exc:
        raise fail(first_line(exc), code=2) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise fail(f"{where}{exc.strerror or first_line(exc)}", code=2) from None
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        raise fail(f"cannot use the database: {first_line(cause)} (check --db or SESSIONLOG_DB)", code=2) from None
    except Exception as exc:
        if not isinstance(exc, _alembic_errors()):
            raise
        raise fail(first_line(exc), code=2) from None


def _alembic_errors() -> tuple[type[Exception], ...]:
    """Alembic's own error (a revision it cannot find, a chain it cannot read), if Alembic was
    loaded: only a migration loads it (`db upgrade`, or `serve` on a database not at head:
    storage/schema.py), so a start on a database at head does not import it to name an error
    it cannot raise."""
    exc = sys.modules.get("alembic.util.exc")
    return (exc.CommandError,) if exc is not None else ()


def _check_db(url: str) -> None:
    """Refuse an unsupported URL scheme (`storage.factory.check_url`) before a driver loads for
    it; make the directory of a SQLite file."""
    from sessionlog_server.storage.factory import check_url, sqlite_file

    check_url(url)
    if (file := sqlite_file(url)) is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
