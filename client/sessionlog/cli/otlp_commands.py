"""`sessionlog otlp SESSION_ID --endpoint URL [--follow]`: send a session to an OTLP endpoint.

The spans are those of `export --format otlp-json`, sent with the official OpenTelemetry SDK
exporter (OTLP/HTTP protobuf) by `sessionlog.otlp_live`. The exporter retries an endpoint that
does not answer; its own log lines are held, and a failure is one `sessionlog: error:` line
that says what the exporter said last (exit status 1). Without `--follow` the session is
read once and sent, and `{"spans": N}` printed.

With `--follow` the command replays the session and then stays subscribed, sending each turn
when it ends. A collector that refuses a turn (down, restarting, an HTTP 500) is tried again,
with a warning, until it takes it: a follower outlives a collector's restart. SIGINT or SIGTERM
sends the session's root span, not the turn still open (the run that sees it end sends it
whole), and prints `{"spans": N, "resume_from": SEQ}`: `--from SEQ` makes the next run go on
from there, sending no turn twice. A stop while the collector refuses ends with the error and
the same resume point.

A fork's spans are those of its own events (`core.formats.otlp`): the command reads its parent's
trace id too (`fork_of`), so the fork's root span links to its parent's.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sessionlog.cli.common import connect, describe, fail, print_json, seq_option, warn
from sessionlog.core.errors import from_seq_past_head
from sessionlog.core.events import Event
from sessionlog.core.formats.otlp import ForkOrigin, fork_origin, is_traces_url
from sessionlog.session_info import SessionInfo

if TYPE_CHECKING:
    from sessionlog.client import SessionLogClient


def register(app: typer.Typer) -> None:
    """Add `otlp` to `app`."""
    app.command("otlp")(otlp)


def fork_of(client: SessionLogClient, info: SessionInfo) -> ForkOrigin | None:
    """Where session `info` came from, for its OTLP spans (None: no fork): its parent, its cut,
    and its parent's trace as the service tells it (one more `GetSession`), which the fork's root
    span links to. A service that tells no trace ids tells none for the parent either: both are
    hashed from the ids then (`OtlpFold`)."""
    if info.parent_session_id is None:
        return None
    parent_trace = None if info.trace_id is None else client.get_session(info.parent_session_id).trace_id
    return fork_origin(info.parent_session_id, info.fork_seq, parent_trace)


class _Stop:
    """SIGTERM and SIGINT end the command, but never in the middle of an export.

    Interrupted while the exporter waits for the endpoint's answer, a turn's export counts as
    not sent (the endpoint may well have it), so `finish` sent that turn's spans again, after
    the root. While a turn is being sent the signal is held, and acted on once it is sent.
    """

    def __init__(self) -> None:
        self._sending = False
        self._held = False
        self.requested = False
        """A signal came: the command is stopping (a refused turn is not tried again)."""

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self._sending:
            self._held = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def sending(self) -> Iterator[None]:
        """A block the signal does not interrupt; a signal that came meanwhile stops after it."""
        self._sending = True
        try:
            yield
        finally:
            self._sending = False
        if self._held:
            raise KeyboardInterrupt


def otlp(
    session_id: Annotated[str, typer.Argument(help="The session to send.")],
    endpoint: Annotated[
        str, typer.Option("--endpoint", metavar="URL", help="OTLP/HTTP traces URL, e.g. http://HOST:4318/v1/traces.")
    ],
    follow: Annotated[bool, typer.Option("--follow", help="Stay subscribed; send each turn as it ends.")] = False,
    from_seq: Annotated[
        int,
        seq_option("--from", "Send only the turns that end at SEQ or later (a stopped --follow's resume_from)."),
    ] = 0,
    content: Annotated[bool, typer.Option("--with-content", help="Include gen_ai.input/output.messages.")] = False,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", metavar="KEY=VALUE", help="KEY=VALUE sent with every export (repeatable)."),
    ] = None,
) -> None:
    """Send a session as OpenTelemetry GenAI traces to an OTLP endpoint."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        from sessionlog.otlp_live import ExporterLog, ExportFailed, RetryingExporter, SessionExport
    except ImportError:
        raise fail("sessionlog otlp needs the otlp extra: pip install 'sessionlog[otlp]'") from None
    if not is_traces_url(endpoint):
        raise fail(f"--endpoint {endpoint!r} is not an http(s) URL (e.g. http://collector:4318/v1/traces)", 2)
    headers = {}
    for pair in header or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--header takes KEY=VALUE, got {pair!r}", 2)
        headers[key] = value
    exporter: Any = OTLPSpanExporter(endpoint=endpoint, headers=headers or None)  # the SDK is partly untyped
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The exporter's own log lines (a retry each, then its failure) are held, not printed: the
    # outcome is this command's one line, which says what the exporter said last.
    log = ExporterLog()

    def refused(spans: int, wait: float) -> None:
        said = log.summary()
        warn(f"the OTLP endpoint refused {spans} span(s){': ' + said if said else ''}; trying again in {wait:g} s")

    if follow:
        exporter = RetryingExporter(exporter, lambda: stop.requested, refused)
    export: SessionExport | None = None
    try:
        with log.held(), connect() as client:
            # The service's trace for the session (its live export's, and a tenant's own), not
            # one hashed from the id here, which another tenant's session of that id shares; and
            # its namespace, which the live export's resource names too.
            info = client.get_session(session_id)
            if from_seq > info.next_seq:
                # A seq the log has not reached is a mistake (a typo, another session's seq), as
                # `tail` and `events` are told: it skipped every turn up to it without a word.
                raise fail(describe(from_seq_past_head(info.id, from_seq, info.next_seq, "send")))
            export = SessionExport(
                info.id,
                exporter,
                trace=info.trace_id,
                namespace=info.namespace,
                content=content,
                from_seq=from_seq,
                fork=fork_of(client, info),
            )
            events = client.subscribe(session_id) if follow else client.read_events(session_id)
            try:
                for item in events:
                    if isinstance(item, Event):  # not the caught-up marker of a subscription
                        with stop.sending():
                            export.add(item)
            except KeyboardInterrupt:
                pass
            if follow:
                print_json({"spans": export.finish(open_turn=False), "resume_from": export.next_seq})
            else:
                print_json({"spans": export.finish()})
    except ExportFailed as exc:
        said = log.summary()
        resume = f"; --from {export.next_seq} goes on from the turn not sent" if follow and export else ""
        raise fail(f"{exc} sending to {endpoint}{': ' + said if said else ''}{resume}") from None
    finally:
        with log.held():
            exporter.shutdown()
