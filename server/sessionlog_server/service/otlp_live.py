"""Live OTLP export (issue 14): with `SESSIONLOG_OTLP_ENDPOINT` set, every session's spans go to
a collector as its turns end, through the official OpenTelemetry SDK exporter.

It taps the batches this process commits (`AppendPipeline.commit_taps`, in commit order;
with `serve --workers N` each worker sends what it committed, so nothing goes out twice) and
hands each batch to one thread, so neither the event loop nor a writer ever waits for the
collector. Per session it keeps a `SessionExport` (the follower of `sessionlog otlp --follow`, so the spans,
ids and attributes are those of `sessionlog export --format otlp-json`: the session is named by
its id, its trace is the one the service tells clients, `access.trace_id`, and its spans' resource
names its namespace, `sessionlog.namespace`, so a collector fed several tenants' sessions tells
them apart): at each `turn/end`
the spans since the previous send go out. The session's root span, which carries the markers,
is sent by `sessionlog otlp` and the OTLP/JSON export, not here (a live session has no end).

A session seen for the first time (after a start, or after it left the bounded set of folded
sessions) is folded from the log up to its batch; sending resumes at its open turn's start, so
a turn is sent whole and a closed turn is not sent again by this process. A collector that
refuses spans is logged, never retried forever; the log stays the source of truth, and
`sessionlog otlp` re-sends any session.

A fork's spans are those of its own events, as its clients' exports have them (`OtlpFold`
learns its parent and cut from its session record). What ForkSession writes (the seed, and the
closers of a turn it cut) is not an append: the process that made the fork hands it to the taps
(`AppendPipeline.tap_committed`), so the turn the fork cut and closed (`forked`) is sent by that
process, when the fork is made, whole from its start in the inherited prefix, as every other
turn is sent by the process that committed its `turn/end`. A restart in between (the fork made,
its batch not yet sent) loses that turn as it loses any other turn queued and not sent: the
process that next meets the fork warms it from the log, past the fork's closers, and does not
send it (nor any turn that ended before); `sessionlog otlp` sends it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import structlog

from sessionlog.core.events import Event
from sessionlog.core.formats.otlp import ForkOrigin, fork_origin
from sessionlog_server.service import access
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.storage.records import SessionRecord

log = structlog.get_logger("sessionlog.otlp")
MAX_SESSIONS = 64
"""Sessions whose fold the exporter keeps (least recently used beyond that are re-folded)."""
MAX_EVENTS = 500_000
"""Events those folds may hold in all (a fold keeps its session's events), same eviction."""


class LiveOtlpExport:
    """Sends committed turns of every session to an SDK `SpanExporter`."""

    def __init__(self, service: SessionLogService, exporter: Any, *, max_sessions: int = MAX_SESSIONS) -> None:
        from sessionlog.otlp_live import SessionExport  # the otlp extra

        self._session_export = SessionExport
        self.service = service
        self.exporter = exporter
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, Any] = OrderedDict()
        self._queue: queue.SimpleQueue[tuple[str, list[Event]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sessionlog-otlp")
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Tap the hub and start the worker (call on the service's event loop)."""
        self._loop = asyncio.get_running_loop()
        self.service.appends.commit_taps.append(self.tap)
        self._thread.start()

    def tap(self, session_id: str, events: Sequence[Event]) -> None:
        """A committed batch (on the event loop): queue it, never block."""
        self._queue.put((session_id, list(events)))

    def stop(self, timeout: float = 10.0) -> None:
        """Send what is queued, then stop the worker and the exporter."""
        if self.tap in self.service.appends.commit_taps:
            self.service.appends.commit_taps.remove(self.tap)
        self._queue.put(None)
        self._thread.join(timeout)
        self.exporter.shutdown()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            session_id, events = item
            try:
                self._feed(session_id, events)
            except Exception as exc:
                self.sessions.pop(session_id, None)
                # The batch's seqs say which turns went unsent (`sessionlog otlp --from` sends them).
                seqs = [events[0].seq, events[-1].seq]
                log.warning("live OTLP export failed", seqs=seqs, **access.session_log_fields(session_id, exc))

    def _feed(self, session_id: str, events: list[Event]) -> None:
        export = self.sessions.get(session_id)
        if export is None or len(export.fold.events) != events[0].seq:
            export = self._warm(session_id, events[0].seq)
        self.sessions[session_id] = export
        self.sessions.move_to_end(session_id)
        while len(self.sessions) > 1 and (
            len(self.sessions) > self.max_sessions
            or sum(len(held.fold.events) for held in self.sessions.values()) > MAX_EVENTS
        ):
            self.sessions.popitem(last=False)
        for event in events:
            export.add(event)

    def _warm(self, session_id: str, first_seq: int) -> Any:
        """A `SessionExport` holding the log before `first_seq`, sending from its open turn."""
        record, prefix = self._read(session_id, first_seq - 1)
        # Named by the id its clients know, under the trace and namespace they are told
        # (`Session.trace_id`, `Session.namespace`), so the spans and their resource are those
        # of their exports; the key itself never leaves the service.
        export = self._session_export(
            access.public_id(session_id),
            self.exporter,
            trace=access.trace_id(session_id),
            namespace=access.namespace_of(session_id),
            fork=_fork_of(record),
        )
        for event in prefix:
            export.fold.add(event)
        open_turns = export.fold.fold.open_turns
        export.next_seq = min((turn["startSeq"] for turn in open_turns.values()), default=first_seq)
        return export

    def _read(self, session_id: str, to_seq: int) -> tuple[SessionRecord, list[Event]]:
        """The session's record and its events 0..to_seq (none for a `to_seq` below 0)."""
        assert self._loop is not None
        reader = self.service.reader

        async def read() -> tuple[SessionRecord, list[Event]]:
            record = await reader.session(session_id)
            events: list[Event] = []
            if to_seq >= 0:
                async for page in reader.pages(record, 0, to_seq):
                    events.extend(page)
            return record, events

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(timeout=120)


def _fork_of(record: SessionRecord) -> ForkOrigin | None:
    """Where a session came from, as its clients' exports name it: its parent by the id they
    know, and the parent's trace as the service tells it (None: no fork)."""
    parent = record.parent_id
    if parent is None:
        return None
    return fork_origin(access.public_id(parent), record.fork_seq, access.trace_id(parent))


def start_live_export(service: SessionLogService, endpoint: str) -> LiveOtlpExport:
    """The exporter of `SESSIONLOG_OTLP_ENDPOINT`, started (call on the service's event loop)."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ValueError("SESSIONLOG_OTLP_ENDPOINT needs the otlp extra: pip install 'sessionlog[otlp]'") from None
    live = LiveOtlpExport(service, OTLPSpanExporter(endpoint=endpoint))
    live.start()
    return live
