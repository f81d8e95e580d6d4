"""The `cli` fixture of the tests that run the transfer commands against a real server."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest
import structlog
from typer.testing import CliRunner

from sessionlog.cli.common import State
from tests.support.servers import ServerThread


@pytest.fixture
def cli(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """A runner whose commands talk to `server`. The server runs in this process, and unconfigured
    structlog prints to whatever `sys.stdout` is, which the runner captures: its logs go to the real
    stderr (warnings only) while a command runs, so stdout holds only what the command printed."""
    monkeypatch.setattr(State, "server", server.target)
    saved = structlog.get_config()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.__stderr__),
    )
    try:
        yield CliRunner()
    finally:
        structlog.configure(wrapper_class=saved["wrapper_class"], logger_factory=saved["logger_factory"])
