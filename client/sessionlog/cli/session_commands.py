"""CLI commands that talk to a server: create, append, events, sessions, tail."""

from __future__ import annotations

import os
import sys
import threading
from typing import Annotated, Any

import typer

from sessionlog.cli.batching import Appender, BatchFailed
from sessionlog.cli.common import LeaseTokenOption, connect, describe, fail, print_json, seq_option, stdout_closed
from sessionlog.core.errors import SessionLogError
from sessionlog.core.events import Event, NewEvent
from sessionlog.core.formats.jsonl import JsonlReader
from sessionlog.core.vocabulary import REQUEST_HEADER
from sessionlog.requests import CaughtUp, HeaderReport

READ_BYTES = 1 << 20


def register(app: typer.Typer) -> None:
    """Add the server commands to `app`."""
    app.command("create")(create)
    app.command("append")(append)
    app.command("events")(events)
    app.command("sessions")(sessions)
    app.command("tail")(tail)


def create(
    session_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Session id (generated if omitted).")
    ] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", metavar="DIR", help="The agent's working directory.")] = None,
) -> None:
    """Create a session and print it as JSON."""
    with connect() as client:
        print_json(client.create_session(session_id, cwd=cwd).to_json())


def append(
    session_id: Annotated[str, typer.Argument(help="The session to append to.")],
    takeover: Annotated[bool, typer.Option("--takeover", help="Take the lease from a live writer.")] = False,
    lease_token: LeaseTokenOption = "",
) -> None:
    """Append JSON Lines event envelopes from stdin, printing each committed seq.

    The lease is taken at once (with --lease-token, the lease `resume --keep` kept) and held
    until stdin closes; lines are sent as they arrive
    (whatever is available is sent at once, in as many batches as the service's limits of events
    and bytes per batch need: a server configured below the defaults says so when it refuses a
    batch, and the batch goes again cut to fit, without reordering or appending twice), so
    `producer | sessionlog append ID` streams, and each seq is printed as soon as its batch is
    durable. An envelope's `seq` and `time` are the service's to assign and are ignored, but
    must be well formed (BAD_SEQ, BAD_TIME). Lines read before a bad line may already be
    committed; the error names the bad line. Should the reader of the seqs leave (`| head -1`),
    every line is still appended; only the printing stops.
    """
    reader = JsonlReader()
    with connect() as client:
        writer = client.writer(session_id, takeover=takeover, lease_token=lease_token)
        appender = Appender(writer, lambda: client.writer(session_id))
        printer = AckPrinter(appender)
        try:
            while True:
                chunk = os.read(sys.stdin.fileno(), READ_BYTES)
                batch: list[NewEvent] = []
                numbers: list[int] = []
                for number, obj in reader.feed_numbered(chunk) if chunk else reader.close():
                    if _is_header_report(obj):
                        # A header the service decides on: send what came before, then the report.
                        appender.append(batch, numbers)
                        batch, numbers = [], []
                        appender.report_header(_header_of(number, obj), number)
                        continue
                    batch.append(_parse_line(number, obj))
                    numbers.append(number)
                appender.append(batch, numbers)
                if not chunk:  # the end of input, its last line without LF included
                    break
        except SessionLogError as exc:
            raise fail(describe(exc)) from None
        finally:
            printer.finish()
            appender.close()


class AckPrinter:
    """Prints each batch's seqs, in input order, as soon as the batch is durable.

    A background thread, because the main thread sits in a blocking read of stdin while a
    producer thinks; a failed batch ends the process at once with the one-line error.
    """

    def __init__(self, appender: Appender) -> None:
        self._appender = appender
        self._thread = threading.Thread(target=self._run, daemon=True, name="ack-printer")
        self._thread.start()

    def finish(self) -> None:
        self._appender.finish()
        self._thread.join()

    def _run(self) -> None:
        try:
            for _, result in self._appender.results():
                # A header report appends nothing: the seq of the latest header stands for its line.
                seqs = [result.header_seq] if isinstance(result, HeaderReport) else result.seqs
                self._print("".join(f"{seq}\n" for seq in seqs))
        except BatchFailed as exc:
            self._print("")  # the seqs before the error come first
            where = f"batch starting at line {exc.sent.first_line}"
            sys.stderr.write(f"sessionlog: error: {describe(exc.error, where)}\n")
            sys.stderr.flush()
            os._exit(1)

    @staticmethod
    def _print(text: str) -> None:
        """`text` on stdout, flushed. Should the reader of the seqs have left (`| head -1`), the
        lines are still appended and a refused batch still ends the process with its error: only
        the printing stops."""
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            stdout_closed()


def _is_header_report(obj: dict[str, Any]) -> bool:
    """A `request/header` line whose data has a header but no reason is a report (docs/headers.md)."""
    data = obj.get("data")
    return obj.get("type") == REQUEST_HEADER and isinstance(data, dict) and "header" in data and "reason" not in data


def _header_of(number: int, obj: dict[str, Any]) -> dict[str, Any]:
    header = obj["data"]["header"]
    if not isinstance(header, dict):
        raise fail(f"HEADER_NOT_OBJECT: line {number}: data.header must be a JSON object")
    return header


def _parse_line(number: int, obj: object) -> NewEvent:
    try:
        return NewEvent.from_json(obj)
    except SessionLogError as exc:
        raise fail(describe(exc, f"line {number}")) from None


def events(
    session_id: Annotated[str, typer.Argument(help="The session to read.")],
    from_seq: Annotated[
        int,
        seq_option("--from", "First seq (inclusive); past the session's next seq, an error."),
    ] = 0,
    to_seq: Annotated[int | None, seq_option("--to", "Last seq (inclusive).")] = None,
) -> None:
    """Print events as JSON Lines envelopes (none from the session's next seq: nothing since)."""
    with connect() as client:
        for event in client.read_events(session_id, from_seq=from_seq, to_seq=to_seq):
            print_json(event.to_json())


def sessions(
    parent: Annotated[str | None, typer.Option("--parent", metavar="ID", help="Only forks of this session.")] = None,
) -> None:
    """List sessions, one JSON object per line."""
    with connect() as client:
        for session in client.list_sessions(parent_session_id=parent):
            print_json(session.to_json())


def tail(
    session_id: Annotated[str, typer.Argument(help="The session to follow.")],
    from_seq: Annotated[int, seq_option("--from", "First seq (inclusive).")] = 0,
) -> None:
    """Print events as they land (after replaying from --from), until interrupted."""
    with connect() as client:
        subscription = client.subscribe(session_id, from_seq=from_seq)
        try:
            for item in subscription:
                if isinstance(item, Event):
                    print_json(item.to_json())
                    sys.stdout.flush()
                elif isinstance(item, CaughtUp):
                    sys.stderr.write(f"sessionlog: caught up at seq {item.next_seq}\n")
        except KeyboardInterrupt:
            subscription.cancel()
