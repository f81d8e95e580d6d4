"""What every CLI command shares: the server address, JSON output, and one-line errors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from sessionlog.cli import hints
from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError
from sessionlog.requests import DEFAULT_TARGET

if TYPE_CHECKING:  # imported where a client is made: gRPC stays unloaded until then (see `connect`)
    from sessionlog.client import SessionLogClient

T = TypeVar("T")


class State:
    """Global options, set by the app callback."""

    server: str = os.environ.get("SESSIONLOG_SERVER", DEFAULT_TARGET)
    token: str | None = os.environ.get("SESSIONLOG_TOKEN") or None
    ca_file: str | None = os.environ.get("SESSIONLOG_CA_FILE") or None


def print_json(value: Any) -> None:
    """One JSON value on one line of stdout (UTF-8, not ASCII-escaped)."""
    sys.stdout.write(jsonvalue.dumps(value) + "\n")


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print the one-line error, `sessionlog: error: MESSAGE`, on stderr; return the Exit to raise.

    Every command reports failures this way: a sessionlog error as `describe` words it
    (`REASON: message; hint`), anything else (a usage mistake, an unreadable file) as plain text.
    """
    sys.stderr.write(f"sessionlog: error: {message}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def describe(error: SessionLogError, where: str | None = None) -> str:
    """`REASON: [where: ]message[; hint]`: the reason first, so scripts can match on it."""
    message = hints.readable_message(error)
    hint = hints.hint(error, ca_file=State.ca_file, target=State.server)
    text = f"{error.reason}: {where + ': ' if where else ''}{message}"
    return f"{text}; {hint}" if hint else text


@contextmanager
def connect() -> Iterator[SessionLogClient]:
    """A client to `--server`, turning sessionlog errors into one-line failures.

    gRPC is imported here, not with the CLI: `serve` must set gRPC's options before gRPC
    loads in its process (sessionlog_server/transport/grpc_core.py), and the offline commands
    never need it."""
    from sessionlog.client import SessionLogClient

    try:
        client = SessionLogClient(State.server, token=State.token, ca_file=State.ca_file)
    except OSError as exc:  # e.g. a CA file that is not there
        raise fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", code=2) from None
    except ValueError as exc:  # a CA file with no certificate in it, a token no header can carry
        raise fail(str(exc), code=2) from None
    try:
        yield client
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
    finally:
        client.close()


def guarded(fn: Callable[[], T]) -> T:
    """Run `fn`, turning sessionlog errors into one-line failures."""
    try:
        return fn()
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
