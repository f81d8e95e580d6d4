"""Sending a session to an OTLP endpoint with the official OpenTelemetry SDK exporter (issue 14).

The spans are `core.formats.otlp`'s (the same ids, names and attributes, under the same
resource, as `sessionlog export --format otlp-json`), turned into the SDK's `ReadableSpan`s and handed to
an SDK `SpanExporter` (`OTLPSpanExporter`, OTLP/HTTP protobuf), so no OTLP is written by hand.

`SessionExport` follows a session as it grows: every span of a turn is sent when the turn ends
(the model calls and tool calls in it, and what came between the previous turn and this one,
such as a compaction's summariser call); the rest and the session's root span, which carries
the markers as span events, are sent by `finish` (the end of a one-shot export). A follower
that stops (`sessionlog otlp --follow` on SIGINT/SIGTERM) sends the root span but not the turn
still open: sent then, it went out cut short, and again whole under the same span id from the
run that saw it end. A span is sent once, and `next_seq` is where a later run goes on from.

`RetryingExporter` is a follower's patience: a collector that refuses a turn (an HTTP 500, or
down for longer than the SDK exporter's own retries last) is tried again until it takes it.

Needs the `otlp` extra (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.formats.otlp import SCOPE_NAME, ForkOrigin, OtlpFold
from sessionlog.core.vocabulary import TURN_END

_KINDS = {0: SpanKind.INTERNAL, 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}


class ExportFailed(RuntimeError):
    """The exporter did not accept a batch of spans."""


EXPORTER_LOGGER = "opentelemetry.exporter.otlp"
"""Where the SDK exporter logs its retries ("Transient error ... retrying in 0.87s") and its
failures, each a line of its own on stderr unless someone takes them."""


class ExporterLog(logging.Handler):
    """Takes what the SDK exporter logs while `held` (nothing reaches stderr), so a command
    reports the outcome in a line of its own words: `summary` says what the exporter said last
    and what its last retried error was."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @contextmanager
    def held(self) -> Iterator[ExporterLog]:
        logger = logging.getLogger(EXPORTER_LOGGER)
        propagate = logger.propagate
        logger.addHandler(self)
        logger.propagate = False
        try:
            yield self
        finally:
            logger.removeHandler(self)
            logger.propagate = propagate

    def summary(self) -> str:
        """The exporter's last message and, if it retried, how often and its last error, on one
        line ('' when it said nothing)."""
        if not self.records:
            return ""
        text = self.records[-1].getMessage().rstrip(".")
        retries = [r for r in self.records if str(r.msg).startswith("Transient error") and r.args]
        if retries:
            last = retries[-1].args[0] if isinstance(retries[-1].args, tuple) else retries[-1].args
            text += f" ({len(retries)} retried, the last error: {last})"
        return " ".join(text.split())


def _value(value: JsonObject) -> Any:
    """An OTLP/JSON AnyValue as the SDK's attribute value."""
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return tuple(_value(item) for item in value["arrayValue"].get("values", []))
    return next(iter(value.values()))


def _attributes(items: Iterable[JsonObject]) -> dict[str, Any]:
    return {item["key"]: _value(item["value"]) for item in items}


def _context(trace_hex: str, span_hex: str) -> SpanContext:
    return SpanContext(
        int(trace_hex, 16), int(span_hex, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )


def readable_span(span: JsonObject, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """One OTLP/JSON span (as `core.formats.otlp` builds it) as an SDK span."""
    parent = span.get("parentSpanId")
    status = span.get("status")
    return ReadableSpan(
        name=span["name"],
        context=_context(span["traceId"], span["spanId"]),
        parent=_context(span["traceId"], parent) if parent else None,
        resource=resource,
        attributes=_attributes(span["attributes"]),
        events=[
            SpanEvent(event["name"], _attributes(event["attributes"]), int(event["timeUnixNano"]))
            for event in span.get("events", [])
        ],
        links=[
            Link(_context(link["traceId"], link["spanId"]), _attributes(link.get("attributes", [])))
            for link in span.get("links", [])
        ],
        kind=_KINDS[span["kind"]],
        status=Status(StatusCode.ERROR, status.get("message")) if status else Status(StatusCode.UNSET),
        start_time=int(span["startTimeUnixNano"]),
        end_time=int(span["endTimeUnixNano"]),
        instrumentation_scope=scope,
    )


class SessionExport:
    """Feeds a session's events in seq order to an exporter, a turn at a time."""

    def __init__(
        self,
        session_id: str,
        exporter: SpanExporter,
        *,
        trace: str | None = None,
        namespace: str | None = None,
        content: bool = False,
        version: str = "",
        from_seq: int = 0,
        fork: ForkOrigin | None = None,
    ) -> None:
        """`trace` and `namespace`: the session's trace id and namespace as the service tells
        them (`Session.trace_id`, `Session.namespace`), and `fork` where a fork came from, as
        `OtlpFold` takes them (a fork's trace holds its own events only). Turns that end before
        `from_seq` are folded, not sent (an earlier run sent them: its `next_seq`)."""
        self.fold = OtlpFold(session_id, trace=trace, namespace=namespace, content=content, fork=fork)
        self.from_seq = from_seq
        self.exporter = exporter
        # The fold's resource, as the OTLP/JSON export writes it: one session, one resource.
        self.resource = Resource(self.fold.resource)
        self.scope = InstrumentationScope(SCOPE_NAME, version)
        self.next_seq = 0
        """The first seq whose spans were not sent yet (nor left to an earlier run)."""
        self.sent = 0

    def add(self, event: Event) -> None:
        """Fold one event; at a `turn/end`, send the spans of everything since the last send."""
        self.fold.add(event)
        if event.type == TURN_END:
            if event.seq >= self.from_seq:
                self._send(self.fold.spans(self.next_seq, event.seq, root=False))
            self.next_seq = event.seq + 1

    def finish(self, *, open_turn: bool = True) -> int:
        """Send what is left (an open turn included, ending at the last event; not with
        `open_turn` False: a follower's stop) and the root span; returns how many spans were
        sent in all."""
        if open_turn:
            self._send(self.fold.spans(self.next_seq, root=True))
            self.next_seq = len(self.fold.events)
        else:
            self._send([self.fold.root_span()])
        return self.sent

    def _send(self, spans: list[JsonObject]) -> None:
        if not spans:
            return
        result = self.exporter.export([readable_span(span, self.resource, self.scope) for span in spans])
        if result is not SpanExportResult.SUCCESS:
            raise ExportFailed(f"the OTLP exporter refused {len(spans)} span(s) ({result.name})")
        self.sent += len(spans)


class RetryingExporter(SpanExporter):
    """An SDK exporter that tries a refused batch again, waiting `first_wait_s` and then twice as
    long each time up to `max_wait_s`, until the endpoint takes it or `stopping()` says to give
    up (the batch then fails, as the wrapped exporter's own failure). `refused(spans, wait)` is
    told of each refusal before the wait, for a warning."""

    def __init__(
        self,
        inner: SpanExporter,
        stopping: Callable[[], bool],
        refused: Callable[[int, float], None],
        *,
        first_wait_s: float = 1.0,
        max_wait_s: float = 30.0,
    ) -> None:
        self.inner = inner
        self.stopping = stopping
        self.refused = refused
        self.first_wait_s = first_wait_s
        self.max_wait_s = max_wait_s

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        wait = self.first_wait_s
        while True:
            result = self.inner.export(spans)
            if result is SpanExportResult.SUCCESS or self.stopping():
                return result
            self.refused(len(spans), wait)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.stopping():
                    return result
                time.sleep(min(STOP_POLL_S, max(0.0, deadline - time.monotonic())))
            wait = min(wait * 2, self.max_wait_s)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


STOP_POLL_S = 0.1
"""How often a wait before another attempt looks for a stop."""
