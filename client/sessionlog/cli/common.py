"""What every CLI command shares: the server address, JSON output, and one-line errors."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from decimal import ROUND_HALF_UP, Decimal, localcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from sessionlog.cli import hints
from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError
from sessionlog.requests import DEFAULT_TARGET, seq_argument

if TYPE_CHECKING:  # imported where a client is made: gRPC stays unloaded until then (see `connect`)
    from sessionlog.client import SessionLogClient

T = TypeVar("T")


class State:
    """Global options, set by the app callback (given before the command) and by the command
    (given after it: cli/global_options.py)."""

    server: str = os.environ.get("SESSIONLOG_SERVER", DEFAULT_TARGET)
    token: str | None = os.environ.get("SESSIONLOG_TOKEN") or None
    ca_file: str | None = os.environ.get("SESSIONLOG_CA_FILE") or None

    @classmethod
    def set(cls, name: str, value: str | None) -> None:
        """Take the global option `name` (`server`, `token`, `ca_file`) given as `value`. None
        (not given) leaves it; so does an empty token or CA file, while an empty server is kept:
        it is refused when a command connects."""
        if name == "server" and value is not None:
            cls.server = value
        elif name == "token" and value:
            cls.token = value
        elif name == "ca_file" and value:
            cls.ca_file = value


LeaseTokenOption = Annotated[
    str,
    typer.Option(
        "--lease-token",
        metavar="TOKEN",
        envvar="SESSIONLOG_LEASE_TOKEN",
        help="Write under a live lease already held: the token `resume --keep` printed.",
    ),
]
"""The commands that write (`append`, `ingest`) take a lease `resume --keep` kept with this, as
the clients' writers take `lease_token`: without it the session is held by that very lease
(WRITER_HELD) until it lapses. The lease is given back when the command ends."""


def seq_within_range(param: typer.CallbackParam, value: int | None) -> int | None:
    """A `SEQ` option checked as the client checks a seq (`seq_argument`) while the command
    line is read: a usage mistake (exit status 2), where one past what the wire carries ended
    the command in a traceback."""
    if value is not None:
        try:
            seq_argument(value, param.opts[0])
        except SessionLogError as exc:
            raise typer.BadParameter(exc.message) from None
    return value


def seq_option(name: str, help: str) -> Any:
    """A `SEQ` option (`--from`, `--to`, `--at`): at least 0 and within what the wire carries
    (`seq_within_range`)."""
    return typer.Option(name, metavar="SEQ", min=0, callback=seq_within_range, help=help)


def print_json(value: Any) -> None:
    """One JSON value on one line of stdout (UTF-8 whatever the locale, not ASCII-escaped)."""
    write_stdout([jsonvalue.dumps_bytes(value) + b"\n"])


def write_stdout(chunks: Iterable[bytes]) -> None:
    """UTF-8 bytes on stdout whatever the locale: a Windows console's cp1252 or a C locale's
    ASCII cannot encode the emoji and CJK that sessions hold, and the output of every command is
    UTF-8 as docs/formats.md says its files are. Text written before is flushed first, so lines
    keep their order."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    for chunk in chunks:
        if buffer is not None:
            buffer.write(chunk)
        else:  # a stream with no bytes below it (a test's capture): it encodes
            sys.stdout.write(chunk.decode("utf-8"))
    sys.stdout.flush()


def table_cell(key: str, value: Any) -> str:
    """A figure as a plain-text table shows it (`replay`, `costs`): `-` for none, a `...Usd`
    cost to six decimals (`usd_text`), anything else as is."""
    if value is None:
        return "-"
    if key.endswith("Usd") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return usd_text(value)
    return str(value)


USD_DECIMALS = Decimal("0.000001")
"""The places a table writes a cost to."""


def usd_text(value: int | float) -> str:
    """A cost to six decimals, a half rounded up, as the session page writes it (JavaScript's
    `toFixed(6)`: both round the float's exact value): Python's `:.6f` rounds a half to even,
    and a cost of exactly 0.0078125 read 0.007812 here and $0.007813 on the page."""
    if not math.isfinite(value):
        return str(value)
    with localcontext() as exact:
        exact.prec = 1000  # a float's exact value fits whole
        return str(Decimal(value or 0).quantize(USD_DECIMALS, rounding=ROUND_HALF_UP))


LOWER_BOUND = "≥"
"""Marks a cost that leaves out the cost of unpriced events (`unpricedEvents` not 0): the
usage of a model with no pricing added 0, so the cost is a lower bound, not the spend."""


def lower_bound(cost: str, unpriced_events: Any) -> str:
    """A cost as printed (`costs`' table, `replay`'s, `recompute`'s report), marked `≥` when
    `unpriced_events` (the figures' `unpricedEvents`) is not 0: the cost of those events is not
    known, so the cost shown is a lower bound (docs/projections.md). JSON keeps the number and
    says `unpricedEvents` beside it."""
    return f"{LOWER_BOUND}{cost}" if unpriced_events else cost


def cost_cell(figures: Mapping[str, Any]) -> str:
    """`costUsd` of `figures` as a plain-text table shows it (`replay`, `costs`): `lower_bound`
    of the cell, so a cost that is not known to be the whole spend never reads as one."""
    return lower_bound(table_cell("costUsd", figures.get("costUsd")), figures.get("unpricedEvents"))


def printable(text: str) -> str:
    """`text` with control characters (an escape sequence in a model name) as `\\uXXXX`, so a
    value cannot drive the terminal it is printed on."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cc" else c for c in text)


def stdout_closed() -> None:
    """What to do once a write to stdout raised BrokenPipeError (its reader left: `| head`) in a
    command that goes on working: point stdout at /dev/null, so later writes, and the
    interpreter's last flush, write nowhere instead of raising again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def write_atomically(path: Path, chunks: Iterable[bytes]) -> None:
    """`chunks` into the file `path`, whole or not at all: a temporary file beside it, fsynced,
    then renamed over it. A path that cannot be written (no such directory, a directory, no
    permission) is the one-line error, exit status 2, and leaves no file behind."""
    temp: str | None = None
    try:
        mode = _mode_for(path)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.resolve().parent)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
        _sync_directory(path.resolve().parent)  # the rename itself, durable
    except OSError as exc:
        raise fail(f"cannot write {path}: {exc.strerror or exc}", code=2) from None
    finally:
        if temp is not None:
            Path(temp).unlink(missing_ok=True)


def _sync_directory(directory: Path) -> None:
    """fsync `directory`, where the filesystem allows it (not every one opens a directory)."""
    with suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _mode_for(path: Path) -> int:
    """The mode a file written over `path` gets: the one it replaces keeps its own, a new one
    what the umask leaves of 0666, as `open` would give it. (mkstemp's 0600 made every exported
    file and session page readable by its owner only, whatever the umask.)"""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0o022)  # read by setting it; set back at once
        os.umask(umask)
        return 0o666 & ~umask


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print the one-line error, `sessionlog: error: MESSAGE`, on stderr; return the Exit to raise.

    Every command reports failures this way: a sessionlog error as `describe` words it
    (`REASON: message; hint`), anything else (a usage mistake, an unreadable file) as plain text.
    """
    sys.stderr.write(f"sessionlog: error: {message}\n")
    sys.stderr.flush()
    return typer.Exit(code)


def warn(message: str) -> None:
    """Print `sessionlog: warning: MESSAGE` on stderr: something the command went on past."""
    sys.stderr.write(f"sessionlog: warning: {message}\n")
    sys.stderr.flush()


def describe(error: SessionLogError, where: str | None = None) -> str:
    """`REASON: [where: ]message[; hint]`: the reason first, so scripts can match on it."""
    message = hints.readable_message(error)
    hint = hints.hint(error, ca_file=State.ca_file, target=State.server)
    text = f"{error.reason}: {where + ': ' if where else ''}{message}"
    return f"{text}; {hint}" if hint else text


def os_error(exc: OSError) -> str:
    """`PATH: No such file or directory`: what the system said, naming the file, without
    Python's `[Errno 2]` (`replay /missing` printed "[Errno 2] No such file or directory: ...")."""
    return f"{os.fspath(exc.filename) + ': ' if exc.filename else ''}{exc.strerror or exc}"


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
        raise fail(os_error(exc), code=2) from None
    except ValueError as exc:  # a CA file with no certificate in it, a token no header can carry
        raise fail(str(exc), code=2) from None
    try:
        yield client
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
    except UnicodeEncodeError as exc:
        # Bytes on the command line that are not UTF-8 reach Python as lone surrogates, which
        # protobuf cannot put in a string field: gRPC carries text only. Paths may hold them.
        raise fail(f"{not_text(exc)}: the service's ids and names are UTF-8 text", code=2) from None
    finally:
        client.close()


def not_text(error: UnicodeEncodeError) -> str:
    """Which argument could not be sent: the bytes, as the shell was given them."""
    try:
        shown = error.object.encode("utf-8", "surrogateescape")  # the bytes it was decoded from
    except UnicodeEncodeError:  # a lone surrogate of another kind (an environment variable)
        shown = error.object.encode("utf-8", "backslashreplace")
    return f"the argument {shown!r} is not valid UTF-8"


def guarded(fn: Callable[[], T]) -> T:
    """Run `fn`, turning sessionlog errors into one-line failures."""
    try:
        return fn()
    except SessionLogError as exc:
        raise fail(describe(exc)) from None
