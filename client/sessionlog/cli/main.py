"""The `sessionlog` command line: serve, talk to a server, and fold files offline."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


def main() -> None:
    """Entry point of the `sessionlog` console script."""
    app()
