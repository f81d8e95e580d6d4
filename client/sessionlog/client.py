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

Idempotent unary calls (reads; appends, whose events always carry eventIds; creates and
forks, which always name their new session) are retried on UNAVAILABLE with backoff. What
each call sends and how it is read lives in `sessionlog.base`, shared with the asyncio client
(`sessionlog.aio`); this module only makes the calls.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeVar

import grpc

from sessionlog import base, session_info
from sessionlog.auth import TokenInterceptor
from sessionlog.base import (
    RECONNECT,
    Call,
    Paged,
    RetryPolicy,
    WriterCore,
    reject,
    settle,
)
from sessionlog.core.errors import OwnershipLost, SessionLogError, Unavailable
from sessionlog.core.events import Event
from sessionlog.errors import from_rpc_error
from sessionlog.requests import (
    CHANNEL_OPTIONS,
    CLOSE_REQUEST,
    MAX_COALESCED_BATCHES,
    AppendResult,
    CaughtUp,
    EventLike,
    ForkInfo,
    HeaderReport,
    HistoryCopy,
    OnResubscribe,
    ResumeInfo,
    SubscriptionCursor,
    coalesce,
    with_event_ids,
)
from sessionlog.v1 import session_service_pb2 as pb

T = TypeVar("T")
_END = object()


class _CallEnded(Exception):
    """A call stopped in its wait to try again because its caller ended (`_run`'s `ended`):
    raised only to that caller, which ends quietly."""


class SessionLogClient(base.ClientBase):
    """A connection to a sessionlog server; thread-safe, one channel."""

    def _open_channel(self, target: str, credentials: Any, token: str | None) -> tuple[Any, Any]:
        channel = (
            grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        )
        return channel, grpc.intercept_channel(channel, TokenInterceptor(token)) if token else channel

    def __enter__(self) -> SessionLogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel. Writers still open are abandoned (batches in flight fail with an
        outcome unknown; the lease is left to lapse), and so are those opening (`_add_writer`);
        lease writers' heartbeats stop (their leases lapse); subscriptions, reads, writer opens
        and calls under way, those waiting to try again too (`_pause`), and any later call,
        raise RuntimeError."""
        self._end_writers()
        self._wake_waits()
        self.channel.close()

    def _error(self, exc: grpc.RpcError) -> SessionLogError:
        """The error a failed call stands for; RuntimeError when `close()` ended the call under
        way, as in the asyncio client (gRPC ends it with CANCELLED "Channel closed!", which
        read as a failure of the service)."""
        self._check_open()
        return from_rpc_error(exc)

    def _pause(self, delay: float, *, ended: threading.Event | None = None) -> bool:
        """Every wait of the client before trying again (a call's retry, a read's, a writer's
        open and reconnect, a subscription's resubscribe), and a lease writer's wait for its next
        heartbeat: `delay` seconds, ended at once by `close()` (from another thread), after which
        it raises the closed client's RuntimeError, or by `ended`, the waiter's own end (a
        subscription's `cancel()`, a lease writer's `close()`), after which it returns True: what
        its caller ended ends quietly, the client closed meanwhile or not. The next attempt on
        the closed channel raised gRPC's ValueError ("Cannot invoke RPC: Channel closed!")
        instead, after the wait was out, and a heartbeat outlived the close until then. Whoever
        sets `ended` calls `_wake_waits`."""
        with self._waits:
            self._waits.wait_for(lambda: self.closed or (ended is not None and ended.is_set()), delay)
        if ended is not None and ended.is_set():
            return True
        self._check_open()
        return False

    def _wake_waits(self) -> None:
        """Wake every `_pause` to look again whether it has ended (the client closed, or a
        waiter's own `ended` set): one Condition for them all, as threads cannot wait on two
        Events at once."""
        with self._waits:
            self._waits.notify_all()

    def _run(self, call: Call[T], *, ended: threading.Event | None = None) -> T:
        """Make a unary call, retrying an idempotent one while its outcome is unknown, within
        the client's `timeout` in all (`base.Budget`). `ended` is the caller's own end (a lease
        writer's close): set during a wait to try again, the call stops there (`_CallEnded`)."""
        method = getattr(self.stub, call.method)
        budget = base.Budget(self.timeout, self.retry if call.idempotent else base.NO_RETRY)
        while True:
            self._check_open()
            try:
                return call.read(method(call.request, timeout=budget.next_attempt()))
            except grpc.RpcError as exc:
                delay = budget.wait_after(self._error(exc))
            if self._pause(delay, ended=ended):
                raise _CallEnded(call.method)

    def _pages(self, paged: Paged[T]) -> Iterator[T]:
        token = ""
        while True:
            items, token = self._run(Call(paged.method, paged.request(token), paged.read, idempotent=True))
            yield from items
            if not token:
                return

    # --- sessions ---------------------------------------------------------------------

    def create_session(
        self, session_id: str | None = None, *, cwd: str | None = None, metadata: dict[str, Any] | None = None
    ) -> session_info.SessionInfo:
        """Create a session, named `session_id` (a uuid when None). It is retried on
        UNAVAILABLE: asked for again, the service answers with the session it made. Another
        session under the id (other cwd or metadata, or written to since) is ALREADY_EXISTS."""
        return self._run(base.create_session(session_id, cwd, metadata))

    def get_session(self, session_id: str) -> session_info.SessionInfo:
        return self._run(base.get_session(session_id))

    def list_sessions(
        self, *, parent_session_id: str | None = None, page_size: int = 100
    ) -> Iterator[session_info.SessionInfo]:
        """Every session (or every fork of `parent_session_id`), fetching pages as needed."""
        return self._pages(base.list_sessions(parent_session_id, page_size))

    # --- unary writing ----------------------------------------------------------------

    def acquire_lease(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> session_info.LeaseInfo:
        """Take the writer lease; the returned lease holds its token (`lease_token` retakes a live one).
        Retried on UNAVAILABLE: a retry whose first answer was lost gets that lease and token
        (the call carries a request_id made once, `base.acquire_lease`)."""
        return self._run(base.acquire_lease(session_id, writer_id, takeover, lease_token))

    def append(
        self,
        session_id: str,
        lease: session_info.LeaseInfo,
        events: Iterable[EventLike],
        *,
        expected_next_seq: int | None = None,
    ) -> AppendResult:
        """Append one batch under `lease`; all events commit together or none do (retried safely)."""
        return self._run(base.append(session_id, lease, events, expected_next_seq, self._acknowledged))

    def renew_lease(self, lease: session_info.LeaseInfo) -> session_info.LeaseInfo:
        return self._run(base.renew_lease(lease))

    def release_lease(self, lease: session_info.LeaseInfo) -> None:
        self._run(base.release_lease(lease))
        self._acknowledged.forget(lease.token)

    def report_header(self, session_id: str, lease: session_info.LeaseInfo, header: dict[str, Any]) -> HeaderReport:
        """Report the request header about to be used; the service decides whether to log it."""
        return self._run(base.report_header(session_id, lease, header))

    def writer(
        self,
        session_id: str,
        *,
        writer_id: str | None = None,
        takeover: bool = False,
        create_if_missing: bool = False,
        resume: bool = False,
        max_in_flight: int = 256,
        reconnect_attempts: int = RECONNECT.attempts,
        lease_token: str = "",
        open_retry: RetryPolicy | None = None,
    ) -> Writer:
        """Open a streaming writer (takes the lease now; use it as a context manager).

        With `resume=True` the session is resumed first (SPEC §8): an open turn is completed,
        the seed boundary is marked, and `writer.resumed` holds the state to continue from.
        `lease_token` is the token of a live lease already held (`resume`'s or `acquire_lease`'s):
        the writer takes that lease again (at a new epoch, keeping the token) and gives it back
        when closed.

        The open is tried again after a transient failure (UNAVAILABLE, a stream that ended
        before the service answered) by `open_retry`, by default the client's `retry` policy, as
        every call safe to retry is (`create_session` and `acquire_lease` give a service that is
        down the same few seconds); each attempt sends the open's one request_id, so an attempt
        whose answer was lost leaves no lease behind to be refused by (WRITER_HELD until it
        lapsed), and a resume is written once, its repairs named in `writer.resumed` all the same
        (SPEC §7). Once open, a broken stream reconnects for up to `reconnect_attempts` attempts
        (about a minute: long enough to ride out a service restart).
        """
        self._check_open()
        base.check_max_in_flight(max_in_flight)
        request_id = self._unanswered.request_id(session_id)
        core = WriterCore(session_id, writer_id, create_if_missing, lease_token, request_id)
        policy = replace(RECONNECT, attempts=reconnect_attempts)
        try:
            writer = Writer(
                self,
                core,
                takeover=takeover,
                resume=resume,
                max_in_flight=max_in_flight,
                reconnect=policy,
                open_retry=self.retry if open_retry is None else open_retry,
            )
        except Unavailable:  # its outcome unknown: the next writer on the session retries it
            self._unanswered.unanswered(session_id, request_id)
            raise
        self._add_writer(writer)
        return writer

    def lease_writer(
        self,
        session_id: str,
        *,
        writer_id: str | None = None,
        takeover: bool = False,
        resume: bool = False,
        heartbeat: float | None = None,
    ) -> LeaseWriter:
        """Take the lease for unary appends (or resume, SPEC §8) and keep it alive with heartbeats
        every `heartbeat` seconds (default: a third of the lease's time left; a given one is checked
        first, `base.check_heartbeat`)."""
        base.check_heartbeat(heartbeat)
        if resume:
            resumed = self.resume(session_id, writer_id=writer_id, takeover=takeover)
            return LeaseWriter(self, resumed.lease, resumed, heartbeat)
        lease = self.acquire_lease(session_id, writer_id=writer_id, takeover=takeover)
        return LeaseWriter(self, lease, None, heartbeat)

    # --- lifecycle --------------------------------------------------------------------

    def resume(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> ResumeInfo:
        """Resume a session for unary appends: lease (with its token), repair, seed boundary (SPEC §8).
        Retried on UNAVAILABLE: a retry whose first answer was lost gets that answer, nothing
        written twice (`base.resume`)."""
        return self._run(base.resume(session_id, writer_id, takeover, lease_token))

    def fork(self, session_id: str, at_seq: int, new_session_id: str | None = None) -> ForkInfo:
        """Fork `session_id` after `at_seq` (inclusive); the prefix is shared, not copied. The
        fork is named (a uuid when `new_session_id` is None) and retried on UNAVAILABLE: asked
        for again, the service answers with the fork it made. The answer is the new session
        and the seqs of the events written to close a turn the cut fell inside (`repair_seqs`)."""
        return self._run(base.fork(session_id, at_seq, new_session_id))

    # --- projections ------------------------------------------------------------------

    def model_history(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The messages the model sees, in order, at the head or at `at_seq` (page by page)."""
        return list(self._pages(base.model_history(session_id, at_seq, with_repair)))

    def history_copy(self, session_id: str) -> HistoryCopy:
        """An empty local copy of the model history; pass it to `refresh_history`."""
        return HistoryCopy(session_id)

    def refresh_history(self, copy: HistoryCopy) -> list[dict[str, Any]]:
        """Bring `copy` up to date, fetching only the messages it lacks or a replace changed."""
        copy.apply(self._run(base.history_page(copy)))
        while not copy.complete:
            copy.apply(self._run(base.history_page(copy)))
        return copy.messages

    def transcript(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The transcript rows for people (replaced events stay, marked), page by page."""
        return list(self._pages(base.transcript(session_id, at_seq, with_repair)))

    def request(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"request", "requestJson", "sha256", "headerSeq", "atSeq"}`: the exact request of that
        prefix, parsed and as its bytes (`requestJson`, what `sha256` is of)."""
        return self._run(base.request_view(session_id, at_seq, with_repair))

    def stats(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """Counts, tokens and cost over every event carrying usage."""
        return self._run(base.stats(session_id, at_seq, with_repair))

    def surface(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"nodes", "replaceGeneration", "atSeq"}` (for debugging; `atSeq` None for a session
        without events)."""
        return self._run(base.surface(session_id, at_seq, with_repair))

    # --- reading ----------------------------------------------------------------------

    def read_events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None, page_size: int = 500
    ) -> Iterator[Event]:
        """Events from `from_seq` to `to_seq` (inclusive), in seq order; a read broken by a
        transient failure goes on from the seq after the last event it delivered. None from the
        session's next seq; from past it, OutOfRange (FROM_SEQ_PAST_HEAD).

        The client's `timeout` bounds the wait for each page (the first, and each one after),
        not the whole read, which may take long for a long session: a read that gets no page
        within it fails with Unavailable (TRANSPORT_ERROR, `base.no_page`), after the events of
        the pages before. The time the caller spends between events is not counted."""
        cursor = base.EventCursor(session_id, from_seq, to_seq, page_size)
        for attempt in cursor.attempts():
            self._check_open()
            try:
                for response in _each_within(self.stub.ReadEvents(cursor.request()), self.timeout):
                    yield from cursor.events(response)
                return
            except grpc.RpcError as exc:
                delay = self.retry.wait_after(self._error(exc), attempt)
            self._pause(delay)

    def subscribe(
        self, session_id: str, *, from_seq: int = 0, on_resubscribe: OnResubscribe | None = None
    ) -> Subscription:
        """Replay from `from_seq`, a CaughtUp marker, then live events until cancelled (resuming
        on its own after a cut: `on_resubscribe(seq, cause)` is told of each resumption, and
        the subscription's `resubscribes` counts them)."""
        self._check_open()
        return Subscription(self, SubscriptionCursor(session_id, from_seq, on_resubscribe))


def _first_answer(call: Any, timeout: float | None) -> Any:
    """The first message of the writer stream `call` (None if it ended first), waited for at most
    `timeout` seconds (None: as long as it takes): past it the call is cancelled and the open
    fails, `base.no_open_answer`. An answer that comes as the time runs out is given up with it
    (the lock decides which came first); a retry of the open takes its lease again."""
    if timeout is None:
        return next(call, None)
    lock = threading.Lock()
    answered = False
    given_up = False

    def give_up() -> None:
        nonlocal given_up
        with lock:
            if not answered:
                given_up = True
                call.cancel()

    timer = threading.Timer(timeout, give_up)
    timer.daemon = True
    timer.start()
    try:
        first = next(call, None)
    except grpc.RpcError:
        if given_up:
            raise base.no_open_answer(timeout) from None
        raise
    finally:
        timer.cancel()
    with lock:
        answered = True
        late = given_up
    if late:
        raise base.no_open_answer(timeout)
    return first


def _each_within(call: Any, timeout: float | None) -> Iterator[Any]:
    """The messages of the server stream `call`, each waited for at most `timeout` seconds (None:
    no bound), as gRPC's sync streams take a deadline for the whole call only. One thread per
    stream (`_fetch`) takes each message from gRPC when asked; the caller waits for its answer
    with a bounded wait, so the caller alone decides whether a page came in time: a page handed
    over within the wait is delivered, and a wait that runs out cancels the call (a page gRPC
    hands over later goes with it) and fails with `base.no_page`. A timer thread per page cost
    a thread a page and decided apart from the reader: it could cancel the stream under a page
    just delivered. The caller's own time between messages is not counted (a message is taken
    only when asked for). The call is cancelled however the iteration ends (a caller that stops
    reading leaves no stream, and no thread, behind)."""
    if timeout is None:  # nothing to bound: no thread either
        try:
            yield from call
        finally:
            call.cancel()
        return
    asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_fetch, args=(call, asks, answers), daemon=True, name="sessionlog-read").start()
    try:
        while True:
            asks.put(True)
            try:
                answer = answers.get(timeout=timeout)
            except queue.Empty:
                raise base.no_page(timeout) from None
            if answer is _END:
                return
            if isinstance(answer, BaseException):
                raise answer
            yield answer
    finally:
        call.cancel()
        asks.put(False)


def _fetch(call: Any, asks: queue.SimpleQueue[bool], answers: queue.SimpleQueue[Any]) -> None:
    """The thread of `_each_within`: for each ask, the stream's next message, `_END` at its end,
    or the error that ended it; stops when told (False) or once the stream ended."""
    while asks.get():
        try:
            answers.put(next(call))
        except StopIteration:
            answers.put(_END)
            return
        except BaseException as exc:  # the reader raises it, as it would have from next(call)
            answers.put(exc)
            return


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
    """An iterator of Events and one CaughtUp marker; `cancel()` ends it, and so does leaving
    the loop (`break`, an exception), as with the asyncio client's `async for`: the service
    then holds no stream for it.

    A cut (the service restarting, or cutting off a subscriber that fell behind) resubscribes
    from the seq after the last delivered event: the caller sees no gap and no repeat.
    """

    def __init__(self, client: SessionLogClient, cursor: SubscriptionCursor) -> None:
        self._client = client
        self._cursor = cursor
        self._cancelled = threading.Event()
        self._call = client.stub.SubscribeEvents(cursor.request())

    def __iter__(self) -> Iterator[Event | CaughtUp]:
        try:
            yield from self._follow()
        finally:
            self.cancel()  # however the iteration ended, its stream goes (the caller left it)

    def _follow(self) -> Iterator[Event | CaughtUp]:
        while not self._cancelled.is_set():
            try:
                for response in self._call:
                    yield from self._cursor.items(response)
                error: SessionLogError = Unavailable("STREAM_ENDED", "the service ended the subscription")
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED and self._cancelled.is_set():
                    return
                error = self._client._error(exc)
            delay = self._cursor.resume_delay(error)
            if delay is None:
                raise error
            if self._client._pause(delay, ended=self._cancelled):  # a close raises RuntimeError
                return
            self._call = self._client.stub.SubscribeEvents(self._cursor.request())

    @property
    def resubscribes(self) -> int:
        """How many times it resubscribed after a cut."""
        return self._cursor.resubscribes

    def cancel(self) -> None:
        self._cancelled.set()
        self._client._wake_waits()  # a resubscribe waiting ends now
        self._call.cancel()


class LeaseWriter(base.LeaseKeeper):
    """A unary writer: a lease kept alive by heartbeats (a background thread), appends retried
    safely (they carry eventIds), and OwnershipLost final: once the lease is lost, from a
    heartbeat or an append, every later call raises it and nothing re-acquires the lease. So is
    ACKNOWLEDGED_PAST_LOG (the database was restored; the service released the lease)."""

    def __init__(
        self,
        client: SessionLogClient,
        lease: session_info.LeaseInfo,
        resumed: ResumeInfo | None,
        heartbeat: float | None,
    ) -> None:
        super().__init__(lease, resumed, heartbeat)
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="sessionlog-heartbeat")
        self._thread.start()

    def append(self, events: Iterable[EventLike], *, expected_next_seq: int | None = None) -> AppendResult:
        """Append one batch under the lease (all or nothing); renews the lease as a side effect."""
        session_id = self.lease.session_id
        return self._checked(
            lambda: self._client.append(session_id, self.lease, events, expected_next_seq=expected_next_seq)
        )

    def report_header(self, header: dict[str, Any]) -> HeaderReport:
        return self._checked(lambda: self._client.report_header(self.lease.session_id, self.lease, header))

    def close(self) -> None:
        """Stop the heartbeats and give the lease back (unless it was lost); a second close does nothing."""
        if not self._close_once():
            return
        self._stop.set()
        self._client._wake_waits()  # the heartbeat's wait ends now
        self._thread.join(timeout=30)
        if self._failure is None and not self._client.closed:  # with the client closed, it lapses
            self._client.release_lease(self.lease)

    def __enter__(self) -> LeaseWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _checked(self, call: Callable[[], T]) -> T:
        self._check()
        try:
            return call()
        except SessionLogError as exc:
            self._failed(exc)
            raise

    def _beat(self) -> None:
        """Renew the lease every `_next_beat()` seconds until the writer closes (`_stop`), the
        lease is lost, or the client closes: the wait is the client's `_pause`, which its close
        ends at once, so the thread ends then, no renewal tried (a wait on `_stop` alone outlived
        the close until the next beat, up to a third of the lease's time)."""
        try:
            while not self._client._pause(self._next_beat(), ended=self._stop):
                try:
                    self.lease = self._client._run(base.renew_lease(self.lease), ended=self._stop)
                except _CallEnded:
                    return  # closed while a renewal waited to try again: the close releases
                except OwnershipLost as exc:
                    self._failed(exc)
                    return
                except SessionLogError:
                    continue  # a transient failure: the next beat tries again before the lease lapses
        except (RuntimeError, ValueError):  # the client's, or gRPC's while the channel closes
            if not self._client.closed:
                raise
            # the client was closed: its writers end with it, the lease lapses


class Writer(base.WriterView):
    """A streaming writer: holds the lease while open, pipelines batches, retries safely."""

    def __init__(
        self,
        client: SessionLogClient,
        core: WriterCore,
        *,
        takeover: bool,
        resume: bool,
        max_in_flight: int,
        reconnect: RetryPolicy,
        open_retry: RetryPolicy,
    ) -> None:
        self._client = client
        self._core = core
        self._reconnect_policy = reconnect
        self._open_retry = open_retry
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._open(takeover, resume)

    # --- public -----------------------------------------------------------------------

    def append(self, events: Iterable[EventLike], *, expected_next_seq: int | None = None) -> Future[AppendResult]:
        """Send a batch now; the future resolves with its seqs once it is durable."""
        batch = with_event_ids(events)
        return self._send(lambda future: self._core.add_batch(batch, expected_next_seq, future))

    def report_header(self, header: dict[str, Any]) -> Future[HeaderReport]:
        """Report the request header about to be used, in order with the batches sent so far."""
        return self._send(lambda future: self._core.add_header(header, future))

    def _send(self, add: Any) -> Future[Any]:
        self._slots.acquire()
        with self._lock:
            try:
                self._core.check_open()
                future: Future[Any] = Future()
                request = add(future).request  # a bad argument raises here: nothing is pending
            except BaseException:
                self._slots.release()
                raise
            future.add_done_callback(lambda _: self._slots.release())
            self._requests.put(request)
        return future

    def flush(self) -> None:
        """Wait until every batch sent so far is durable (raises the first failure)."""
        with self._lock:
            self._core.check_failure()
            futures = [p.future for p in self._core.pending]
        for future in futures:
            assert isinstance(future, Future)
            future.result()

    def close(self) -> None:
        """Flush, end the stream and give the lease back."""
        try:
            if self._core.failure is None:
                self.flush()
        finally:
            self._end()

    def _end(self) -> None:
        """End the stream on purpose: `close` makes the service release the lease (a stream that
        just ends is taken for a dead writer, and its lease is left to lapse)."""
        with self._lock:
            self._core.closed = True
            self._requests.put(CLOSE_REQUEST)
            self._requests.put(_END)
        self._reader.join(timeout=30)

    def _abandon(self, error: SessionLogError) -> None:
        """End the stream at once, without flushing: what is pending fails with `error` (its
        outcome unknown) and later calls say the writer was closed by it (nothing, for a writer
        already closed)."""
        with self._lock:
            if self._core.closed and not self._core.pending:
                return
            self._core.closed = True  # the reader then takes the stream's end for no cut
            failed = self._core.fail(error)
            self._requests.put(_END)
        for pending in failed:
            reject(pending, error)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:  # end on purpose (the lease is released), without waiting for what is in flight
            self._end()

    # --- stream -----------------------------------------------------------------------

    def _open(self, takeover: bool, resume: bool) -> None:
        """The first open, tried again after a transient failure (UNAVAILABLE, a stream that
        ended before `opened`) by the open's retry policy: every attempt sends the writer's one
        `request_id`, so the lease an attempt whose answer was lost got is this writer's (the
        same token), and a resume is written once (`WriterCore`). The client's close ends the
        open (RuntimeError), waiting or under way."""
        budget = base.Budget(self._client.timeout, self._open_retry)  # all attempts within the timeout
        while True:
            try:
                self._connect(takeover, resume, budget.next_attempt())
                return
            except base.NoOpenAnswer:
                raise budget.unanswered() from None
            except Unavailable as exc:
                self._client._pause(budget.wait_after(exc))  # raises once they are spent

    def _connect(self, takeover: bool, resume: bool, timeout: float | None) -> None:
        """One stream, open once the service answers `opened` within `timeout` seconds."""
        requests: queue.Queue[Any] = queue.Queue()
        with self._lock:
            requests.put(self._core.open_request(takeover, resume))
        call = self._client.stub.Write(_coalescing(requests))
        try:
            first = _first_answer(call, timeout)
        except grpc.RpcError as exc:
            requests.put(_END)
            raise self._core.refused(self._client._error(exc)) from None
        except Unavailable:
            requests.put(_END)
            raise
        try:
            with self._lock:
                self._core.opened(first)
                # Only now, once the lease is known to be this writer's own, what was not
                # acknowledged goes again: sent along with `open`, it was appended under a lease
                # that had passed to another writer meanwhile, and then reported as failed.
                # Batches appended while reconnecting are pending too, so they follow in order.
                for request in self._core.resend():
                    requests.put(request)
                self._requests = requests
                if self._core.closed:  # ended while this stream opened: its `close` went nowhere
                    requests.put(CLOSE_REQUEST)
                    requests.put(_END)
        except SessionLogError:
            requests.put(CLOSE_REQUEST)  # give back a lease granted by mistake; the stream then ends
            requests.put(_END)
            raise
        self._reader = threading.Thread(target=self._read, args=(call,), daemon=True, name="sessionlog-writer")
        self._reader.start()

    def _read(self, call: Any) -> None:
        try:
            for response in call:
                with self._lock:
                    done = self._core.acknowledged(response)
                for pending, result in done:
                    settle(pending, result)
            with self._lock:
                closed = self._core.closed
            if not closed:  # idle or not, the writer goes on: reconnect as after any cut
                self._recover(base.stream_ended())
        except grpc.RpcError as exc:
            self._recover(from_rpc_error(exc))

    def _recover(self, error: SessionLogError) -> None:
        """After the stream broke: reconnect and re-send if the failure is transient, else fail."""
        recovery = base.Recovery(self._core, self._reconnect_policy, error)
        for delay in recovery:
            try:
                self._client._pause(delay)
                # no second resume: same lifecycle
                self._connect(takeover=False, resume=False, timeout=self._client.timeout)
                return
            except SessionLogError as exc:
                recovery.failed(exc)
            except (RuntimeError, ValueError):  # the client's, or gRPC's while the channel closes
                if not self._client.closed:
                    raise
                break  # the client's close ended the writer (`_end_writers`)
        error = recovery.error
        if self._client.closed:
            # The close broke the stream. A writer it abandoned failed with its error already; one
            # it came before the registration of (`_add_writer`) may see the break first, and
            # fails as the abandoned do, not with gRPC's CANCELLED "Channel closed!".
            error = base.closed_with_writer_open()
        with self._lock:
            failed = self._core.fail(error)
        rejections = [(pending, error) for pending in failed] if self._client.closed else recovery.rejections(failed)
        for pending, rejection in rejections:
            reject(pending, rejection)
