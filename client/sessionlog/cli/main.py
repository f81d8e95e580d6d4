"""The `sessionlog` command line: serve, talk to a server, and fold files offline."""

from __future__ import annotations

from typing import Annotated

import typer

from sessionlog.cli import (
    lifecycle_commands,
    offline,
    projection_commands,
    server_commands,
    session_commands,
    transfer_commands,
)
from sessionlog.cli.common import State

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_enable=False)


@app.callback()
def options(
    server: Annotated[
        str | None,
        typer.Option("--server", envvar="SESSIONLOG_SERVER", help="HOST:PORT of the sessionlog server."),
    ] = None,
) -> None:
    """sessionlog: the event log of AI agent sessions."""
    if server:
        State.server = server


server_commands.register(app)
session_commands.register(app)
projection_commands.register(app)
lifecycle_commands.register(app)
transfer_commands.register(app)
offline.register(app)


def main() -> None:
    """Entry point of the `sessionlog` console script."""
    app()
