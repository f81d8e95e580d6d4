"""The `sessionlog` command line: serve, talk to a server, and fold files offline.

Concepts and contract: docs/README.md in the sessionlog repository.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from sessionlog.cli import (
    cost_commands,
    health_commands,
    lifecycle_commands,
    projection_commands,
    server_commands,
    session_commands,
)
from sessionlog.cli.common import State
from sessionlog.cli.global_options import GlobalOptionsAnywhere
from sessionlog.cli.help_style import ConventionalTyper
from sessionlog.requests import DEFAULT_TARGET

# Help is Markdown: a docstring's paragraphs flow to the terminal's width (Typer's "rich" mode
# kept every line break of the source, so an 80-column terminal cut each line again), `code`
# is styled, and an indented block (recompute's example) keeps its lines. A `<placeholder>`
# goes in backticks: bare, Markdown takes it for an HTML tag and drops it.
COMMAND_SETTINGS: dict[str, Any] = {"pretty_exceptions_enable": False, "rich_markup_mode": "markdown"}
"""How every command is made, those of the app and those of a module loaded later alike."""


class SessionlogGroup(GlobalOptionsAnywhere):
    """The `sessionlog` group: its global options after a command too (global_options.py), and
    the commands that read or write files loaded when one of them is run or listed
    (lazy_commands.py)."""

    modules = {
        "import": "sessionlog.cli.transfer_commands",
        "export": "sessionlog.cli.transfer_commands",
        "ingest": "sessionlog.cli.transfer_commands",
        "replay": "sessionlog.cli.offline",
        "recompute": "sessionlog.cli.offline",
        "view": "sessionlog.cli.view_commands",
        "diff": "sessionlog.cli.view_commands",
        "otlp": "sessionlog.cli.otlp_commands",
    }

    @staticmethod
    def make_app() -> typer.Typer:
        return ConventionalTyper(add_completion=False, **COMMAND_SETTINGS)


app = ConventionalTyper(
    no_args_is_help=True, add_completion=False, help=__doc__, cls=SessionlogGroup, **COMMAND_SETTINGS
)


@app.callback()
def options(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="HOST:PORT",
            envvar="SESSIONLOG_SERVER",
            help=f"HOST:PORT of the sessionlog server (default {DEFAULT_TARGET}).",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", metavar="TOKEN", envvar="SESSIONLOG_TOKEN", help="Bearer token for the server."),
    ] = None,
    ca_file: Annotated[
        str | None,
        typer.Option(
            "--ca-file", metavar="FILE", envvar="SESSIONLOG_CA_FILE", help="PEM CA to trust: connect with TLS."
        ),
    ] = None,
) -> None:
    """sessionlog: the event log of AI agent sessions."""
    State.set("server", server)
    State.set("token", token)
    State.set("ca_file", ca_file)


server_commands.register(app)
session_commands.register(app)
projection_commands.register(app)
cost_commands.register(app)
lifecycle_commands.register(app)
health_commands.register(app)


def main() -> None:
    """Entry point of the `sessionlog` console script."""
    app()
