"""The synchronous sessionlog client, and its streaming `Writer`.

```python
with SessionLogClient("127.0.0.1:50051") as client:
    client.create_session("demo")
    with client.writer("demo") as writer:
        writer.append([{"type": "turn/start", "data": {"turn": 1}}]).result()
    for event in client.read_events("demo"):
        print(event.seq, event.type)
```

The writer holds the session's lease for as long as it is open, pipelines batches (`append`
returns a future at once), and after a transient failure reconnects and re-sends every batch
not yet acknowledged. That is safe because every event carries an eventId (one is generated
when the caller gives none), so the service returns the original seqs instead of appending
twice. Ownership loss (ABORTED) is never retried: the caller must reopen.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import grpc

from sessionlog import convert
from sessionlog.auth import TokenInterceptor, channel_credentials
from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog.core.events import Event, NewEvent
from sessionlog.errors import from_rpc_error
from sessionlog.requests import (
    CHANNEL_OPTIONS,
    CLOSE_REQUEST,
    DEFAULT_TARGET,
    MAX_COALESCED_BATCHES,
    AppendResult,
    CaughtUp,
    EventLike,
    HeaderReport,
    HistoryCopy,
    ResumeInfo,
    SubscriptionCursor,
    acquire_from_pb,
    acquire_request,
    append_request,
    batch_request,
    coalesce,
    create_request,
    header_report_from_pb,
    header_request,
    header_write_request,
    history_request,
    open_request,
    read_request,
    release_request,
    renew_request,
    request_view_from_pb,
    resume_from_pb,
    resume_request,
    scope,
    surface_from_pb,
    transcript_request,
    with_event_ids,
)
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1.session_service_pb2_grpc import SessionServiceStub

_END = object()


def _call(fn: Any, request: Any, timeout: float | None = None) -> Any:
    try:
        return fn(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


class SessionLogClient:
    """A connection to a sessionlog server; thread-safe, one channel."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float | None = 30.0,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        """Connect to `target`; `token` authenticates, `ca_file` (or `credentials`) turns on TLS."""
        self.target = target
        self.timeout = timeout
        credentials = credentials or channel_credentials(ca_file)
        self.channel = (
            grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        )
        channel = grpc.intercept_channel(self.channel, TokenInterceptor(token)) if token else self.channel
        self.stub = SessionServiceStub(channel)

    def __enter__(self) -> SessionLogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    # --- sessions ---------------------------------------------------------------------

    def create_session(
        self, session_id: str | None = None, *, cwd: str | None = None, metadata: dict[str, Any] | None = None
    ) -> convert.SessionInfo:
        """Create a session (ALREADY_EXISTS if the id is taken)."""
        response = _call(self.stub.CreateSession, create_request(session_id, cwd, metadata), self.timeout)
        return convert.session_from_pb(response.session)

    def get_session(self, session_id: str) -> convert.SessionInfo:
        response = _call(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id), self.timeout)
        return convert.session_from_pb(response.session)

    def list_sessions(
        self, *, parent_session_id: str | None = None, page_size: int = 100
    ) -> Iterator[convert.SessionInfo]:
        """Every session (or every fork of `parent_session_id`), fetching pages as needed."""
        token = ""
        while True:
            request = pb.ListSessionsRequest(
                page_size=page_size, page_token=token, parent_session_id=parent_session_id or ""
            )
            response = _call(self.stub.ListSessions, request, self.timeout)
            yield from (convert.session_from_pb(s) for s in response.sessions)
            token = response.next_page_token
            if not token:
                return

    # --- unary writing ----------------------------------------------------------------

    def acquire_lease(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> convert.LeaseInfo:
        """Take the writer lease; the returned lease holds its token (`lease_token` retakes a live one)."""
        request = acquire_request(session_id, writer_id, takeover, lease_token)
        return acquire_from_pb(_call(self.stub.AcquireLease, request, self.timeout))

    def append(
        self,
        session_id: str,
        lease: convert.LeaseInfo,
        events: Iterable[EventLike],
        *,
        expected_next_seq: int | None = None,
    ) -> AppendResult:
        """Append one batch under `lease`; all events commit together or none do."""
        request = append_request(session_id, lease, with_event_ids(events), expected_next_seq)
        response = _call(self.stub.AppendEvents, request, self.timeout)
        return AppendResult(list(response.seqs), response.next_seq)

    def renew_lease(self, lease: convert.LeaseInfo) -> convert.LeaseInfo:
        """Extend `lease` (a heartbeat); the renewed lease keeps its token."""
        renewed = _call(self.stub.RenewLease, renew_request(lease), self.timeout).lease
        return convert.lease_from_pb(renewed, lease.token)

    def release_lease(self, lease: convert.LeaseInfo) -> None:
        _call(self.stub.ReleaseLease, release_request(lease), self.timeout)

    def report_header(self, session_id: str, lease: convert.LeaseInfo, header: dict[str, Any]) -> HeaderReport:
        """Report the request header about to be used; the service decides whether to log it."""
        response = _call(self.stub.ReportRequestHeader, header_request(session_id, lease, header), self.timeout)
        return header_report_from_pb(response)

    def writer(
        self,
        session_id: str,
        *,
        writer_id: str | None = None,
        takeover: bool = False,
        create_if_missing: bool = False,
        resume: bool = False,
        max_in_flight: int = 256,
        reconnect_attempts: int = 120,
    ) -> Writer:
        """Open a streaming writer (takes the lease now; use it as a context manager).

        With `resume=True` the session is resumed first (SPEC §8): an open turn is completed,
        the seed boundary is marked, and `writer.resumed` holds the state to continue from.
        """
        return Writer(
            self.stub,
            session_id,
            writer_id=writer_id,
            takeover=takeover,
            create_if_missing=create_if_missing,
            resume=resume,
            max_in_flight=max_in_flight,
            reconnect_attempts=reconnect_attempts,
        )

    # --- lifecycle --------------------------------------------------------------------

    def resume(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> ResumeInfo:
        """Resume a session for unary appends: lease, repair, seed boundary (SPEC §8)."""
        request = resume_request(session_id, writer_id, takeover, lease_token)
        return resume_from_pb(_call(self.stub.ResumeSession, request, self.timeout))

    def fork(self, session_id: str, at_seq: int, new_session_id: str | None = None) -> convert.SessionInfo:
        """Fork `session_id` after `at_seq` (inclusive); the prefix is shared, not copied."""
        request = pb.ForkSessionRequest(session_id=session_id, at_seq=at_seq, new_session_id=new_session_id or "")
        return convert.session_from_pb(_call(self.stub.ForkSession, request, self.timeout).session)

    # --- projections ------------------------------------------------------------------

    def model_history(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The messages the model sees, in order, at the head or at `at_seq` (all pages)."""
        messages: list[dict[str, Any]] = []
        token = ""
        while True:
            response = _call(
                self.stub.GetModelHistory, history_request(session_id, at_seq, with_repair, token), self.timeout
            )
            messages.extend(jsonvalue.loads(response.messages_json, what="messages"))
            token = response.next_page_token
            if not token:
                return messages

    def history_copy(self, session_id: str) -> HistoryCopy:
        """An empty local copy of the model history; pass it to `refresh_history`."""
        return HistoryCopy(session_id)

    def refresh_history(self, copy: HistoryCopy) -> list[dict[str, Any]]:
        """Bring `copy` up to date, fetching only the messages it lacks (all after a replace)."""
        while True:
            messages = copy.apply(_call(self.stub.GetModelHistory, copy.request(), self.timeout))
            if copy.complete:
                return messages

    def transcript(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The transcript rows for people (replaced events stay, marked), all pages."""
        rows: list[dict[str, Any]] = []
        token = ""
        while True:
            response = _call(
                self.stub.GetTranscript, transcript_request(session_id, at_seq, with_repair, token), self.timeout
            )
            rows.extend(jsonvalue.loads(response.rows_json, what="rows"))
            token = response.next_page_token
            if not token:
                return rows

    def request(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"request", "sha256", "headerSeq"}`: the exact request of that prefix."""
        request = pb.GetRequestRequest(scope=scope(session_id, at_seq, with_repair))
        return request_view_from_pb(_call(self.stub.GetRequest, request, self.timeout))

    def stats(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """Counts, tokens and cost over every event carrying usage."""
        request = pb.GetStatsRequest(scope=scope(session_id, at_seq, with_repair))
        return dict(jsonvalue.loads(_call(self.stub.GetStats, request, self.timeout).stats_json, what="stats"))

    def surface(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"nodes", "replaceGeneration"}` (for debugging)."""
        request = pb.GetSurfaceRequest(scope=scope(session_id, at_seq, with_repair))
        return surface_from_pb(_call(self.stub.GetSurface, request, self.timeout))

    # --- reading ----------------------------------------------------------------------

    def read_events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None, page_size: int = 500
    ) -> Iterator[Event]:
        """Events from `from_seq` to `to_seq` (inclusive), in seq order."""
        try:
            for response in self.stub.ReadEvents(read_request(session_id, from_seq, to_seq, page_size)):
                yield from (convert.event_from_pb(m) for m in response.events)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def subscribe(self, session_id: str, *, from_seq: int = 0) -> Subscription:
        """Replay from `from_seq`, a CaughtUp marker, then live events until cancelled.

        A subscription the server cuts off for falling behind (SUBSCRIBER_TOO_SLOW) resumes on
        its own from the first seq it has not delivered: the caller sees no gap and no repeat.
        """
        return Subscription(self.stub, SubscriptionCursor(session_id, from_seq))


def _coalescing(requests: queue.Queue[Any]) -> Iterator[pb.WriteRequest]:
    """The request stream of a writer: whatever queued up while gRPC was busy goes as one message."""
    while True:
        first = requests.get()
        if first is _END:
            return
        pending = [first]
        ended = False
        while len(pending) < MAX_COALESCED_BATCHES:
            try:
                item = requests.get_nowait()
            except queue.Empty:
                break
            if item is _END:
                ended = True
                break
            pending.append(item)
        yield from coalesce(pending)
        if ended:
            return


class Subscription:
    """An iterator of Events and one CaughtUp marker; `cancel()` ends it."""

    def __init__(self, stub: SessionServiceStub, cursor: SubscriptionCursor) -> None:
        self._stub = stub
        self._cursor = cursor
        self._cancelled = False
        self._call = stub.SubscribeEvents(cursor.request())

    def __iter__(self) -> Iterator[Event | CaughtUp]:
        while True:
            try:
                for response in self._call:
                    yield from self._cursor.items(response)
                return
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED or self._cancelled:
                    return
                error = from_rpc_error(exc)
                if not self._cursor.should_resume(error):
                    raise error from None
                self._call = self._stub.SubscribeEvents(self._cursor.request())

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()


@dataclass(slots=True)
class _Pending:
    batch_id: int
    events: list[NewEvent]
    expected_next_seq: int | None
    future: Future[Any]
    header: dict[str, Any] | None = None

    def request(self) -> pb.WriteRequest:
        if self.header is not None:
            return header_write_request(self.batch_id, self.header)
        return batch_request(self.batch_id, self.events, self.expected_next_seq)


class Writer:
    """A streaming writer: holds the lease while open, pipelines batches, retries safely."""

    def __init__(
        self,
        stub: SessionServiceStub,
        session_id: str,
        *,
        writer_id: str | None,
        takeover: bool,
        create_if_missing: bool,
        max_in_flight: int,
        reconnect_attempts: int,
        resume: bool = False,
    ) -> None:
        self._stub = stub
        self.session_id = session_id
        self._writer_id = writer_id
        self._create = create_if_missing
        self._reconnect_attempts = reconnect_attempts
        self._ids = itertools.count(1)
        self._pending: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._closed = False
        self._failure: SessionLogError | None = None
        self.lease: convert.LeaseInfo
        self._held = False  # whether `lease` (and its token) came from an open stream
        self.next_seq = 0
        self.resumed: ResumeInfo | None = None
        self._resume = resume
        self._connect(takeover)
        self._resume = False  # a reconnect continues the same lifecycle: no second resume

    # --- public -----------------------------------------------------------------------

    def append(self, events: Iterable[EventLike], *, expected_next_seq: int | None = None) -> Future[AppendResult]:
        """Send a batch now; the future resolves with its seqs once it is durable."""
        batch = with_event_ids(events)
        self._slots.acquire()
        with self._lock:
            if self._failure is not None:
                self._slots.release()
                raise self._failure
            if self._closed:
                self._slots.release()
                raise RuntimeError("the writer is closed")
            pending = _Pending(next(self._ids), batch, expected_next_seq, Future())
            self._pending.append(pending)
            self._requests.put(pending.request())
        return pending.future

    def report_header(self, header: dict[str, Any]) -> Future[HeaderReport]:
        """Report the request header about to be used, in order with the batches sent so far."""
        self._slots.acquire()
        with self._lock:
            if self._failure is not None:
                self._slots.release()
                raise self._failure
            pending = _Pending(next(self._ids), [], None, Future(), header=dict(header))
            self._pending.append(pending)
            self._requests.put(pending.request())
        return pending.future

    def flush(self) -> None:
        """Wait until every batch sent so far is durable (raises the first failure)."""
        with self._lock:
            futures = [p.future for p in self._pending]
        for future in futures:
            future.result()

    def close(self) -> None:
        """Flush, end the stream and give the lease back."""
        try:
            if self._failure is None:
                self.flush()
        finally:
            with self._lock:
                self._closed = True
                self._requests.put(CLOSE_REQUEST)
                self._requests.put(_END)
            self._reader.join(timeout=30)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # end on purpose (the lease is released), without waiting for what is in flight
            with self._lock:
                self._closed = True
                self._requests.put(CLOSE_REQUEST)
                self._requests.put(_END)
            self._reader.join(timeout=30)

    # --- stream -----------------------------------------------------------------------

    def _connect(self, takeover: bool) -> None:
        requests: queue.Queue[Any] = queue.Queue()
        with self._lock:
            # A reconnect presents the token of the lease it held, so it takes that lease again
            # (at a new epoch) instead of finding it held until it lapses.
            token = self.lease.token if self._held else ""
            requests.put(open_request(self.session_id, self._writer_id, takeover, self._create, self._resume, token))
            for pending in self._pending:  # after a reconnect: re-send what was not acknowledged
                requests.put(pending.request())
            self._requests = requests
        self._call = self._stub.Write(_coalescing(requests))
        try:
            first = next(self._call)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        self.lease = convert.lease_from_pb(first.opened.lease, first.opened.lease_token)
        self._held = True
        self._writer_id = self.lease.writer_id
        self.next_seq = first.opened.next_seq
        if first.opened.HasField("resumed"):
            self.resumed = resume_from_pb(first.opened.resumed)
        self._reader = threading.Thread(target=self._read, args=(self._call,), daemon=True, name="sessionlog-writer")
        self._reader.start()

    def _read(self, call: Any) -> None:
        try:
            for response in call:
                kind = response.WhichOneof("kind")
                if kind == "header_ack":
                    header = response.header_ack
                    self._acknowledge(header.batch_id, header_report_from_pb(header.result), None)
                    continue
                for ack in response.acks.acks if kind == "acks" else [response.ack]:
                    self._acknowledge(ack.batch_id, AppendResult(list(ack.seqs), ack.next_seq), ack.next_seq)
            if self._pending:
                self._fail(
                    Unavailable("STREAM_ENDED", "the server ended the writer stream before acknowledging every batch")
                )
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            if isinstance(error, Unavailable) and not self._closed and self._reconnect():
                return
            self._fail(error)

    def _acknowledge(self, batch_id: int, result: Any, next_seq: int | None) -> None:
        """Resolve the pending batch `batch_id` (earlier ones re-sent after a reconnect were acked before)."""
        with self._lock:
            while self._pending and self._pending[0].batch_id != batch_id:
                self._pending.popleft()
            pending = self._pending.popleft() if self._pending else None
            if next_seq is not None:
                self.next_seq = next_seq
        if pending is not None:
            pending.future.set_result(result)
            self._slots.release()

    def _reconnect(self) -> bool:
        delay = 0.05
        for _ in range(self._reconnect_attempts):
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            try:
                self._connect(takeover=False)
                return True
            except Unavailable:
                continue
            except SessionLogError as exc:
                self._fail(exc)
                return True
        return False

    def _fail(self, error: SessionLogError) -> None:
        with self._lock:
            self._failure = error
            failed = list(self._pending)
            self._pending.clear()
        for pending in failed:
            if not pending.future.done():
                pending.future.set_exception(error)
            self._slots.release()
