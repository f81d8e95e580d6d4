"""The asyncio sessionlog client and its streaming `AsyncWriter` (the same shape and the same
guarantees as the sync client in `sessionlog.client`).

```python
async with AsyncSessionLogClient("127.0.0.1:50051") as client:
    async with client.writer("demo", create_if_missing=True) as writer:
        acked = await writer.append([{"type": "turn/start", "data": {"turn": 1}}])  # sent
        print((await acked).seqs)                                                    # durable
```

`append` means what it means in the sync client: it sends the batch (waiting only for an
in-flight slot) and returns a future that resolves once the batch is durable. After a
transient failure the writer reconnects and re-sends what was not acknowledged, with the same
eventIds; ownership loss is final. What each call sends and how it is read lives in
`sessionlog.base`, shared with the sync client.

A client belongs to the event loop it is created on (gRPC's asyncio channel does): create it in
a coroutine, one per loop; a call from another loop raises RuntimeError saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import grpc

from sessionlog import base, session_info
from sessionlog.auth import aio_interceptors
from sessionlog.base import (
    RECONNECT,
    Call,
    Paged,
    Pending,
    RetryPolicy,
    WriterCore,
    reject,
    settle,
)
from sessionlog.core.errors import OwnershipLost, SessionLogError, Unavailable
from sessionlog.core.events import Event
from sessionlog.errors import from_rpc_error
from sessionlog.opening import Opening
from sessionlog.requests import (
    CHANNEL_OPTIONS,
    CLOSE_REQUEST,
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
from sessionlog.v1.session_service_pb2_grpc import SessionServiceStub

T = TypeVar("T")


class AsyncSessionLogClient(base.ClientBase):
    """An asyncio connection to a sessionlog server."""

    _loop: asyncio.AbstractEventLoop
    _closable: set[asyncio.Task[Any]]
    """The tasks in a block `close()` ends (`_ended_by_close`): a writer opening, a call, read or
    subscription waiting to try again (`_pause`)."""

    def _open_channel(self, target: str, credentials: Any, token: str | None) -> tuple[Any, Any]:
        # grpc.aio binds a channel to the loop it is made on; elsewhere its calls fail in asyncio's
        # words ("Event loop is closed", "no current event loop"), naming nothing of ours.
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "create the AsyncSessionLogClient in a coroutine, on the event loop that will use it "
                "(its gRPC channel belongs to the loop it is created on)"
            ) from None
        self._closable = set()
        interceptors = aio_interceptors(token)
        channel = (
            grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS, interceptors=interceptors)
            if credentials is not None
            else grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS, interceptors=interceptors)
        )
        return channel, channel

    async def __aenter__(self) -> AsyncSessionLogClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel. Writers still open are abandoned as by their `cancel()` (batches in
        flight fail with an outcome unknown; the lease is left to lapse); subscriptions, reads
        and calls under way or waiting to try again (`_pause`), writers opening (`_open_writer`),
        and any call made later, raise RuntimeError."""
        self._end_writers()
        closable, self._closable = self._closable, set()  # each cancelled once, by the first close
        for task in closable:
            task.cancel()
        await self.channel.close()

    def _check_open(self) -> None:
        """As in both clients, and the call is on the loop the client was created on."""
        super()._check_open()
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError(
                "this AsyncSessionLogClient was created on another event loop; "
                "create one client per event loop (e.g. inside the coroutine given to asyncio.run)"
            )

    def _closed_under(self) -> None:
        """grpc.aio ends the calls of a closed channel with CancelledError: unless this task is
        being cancelled, that means `close()` ended the call under way."""
        task = asyncio.current_task()
        if self.closed and task is not None and not task.cancelling():
            raise RuntimeError("the client is closed") from None

    @contextlib.contextmanager
    def _ended_by_close(self) -> Iterator[None]:
        """A block of this task that `close()` ends at once, with the closed client's RuntimeError:
        close cancels the task (once) while it is inside, and the block takes that cancel back
        (`uncancel`), so a caller's own cancellation still ends it with CancelledError. For what
        the channel's close does not end by itself: a sleep, or a writer's open under way, which
        grpc.aio leaves waiting forever if it had not yet connected. Not nested: the cancel is
        taken back once per block."""
        self._check_open()  # a block entered after the close would take back a cancel not close's
        task = asyncio.current_task()
        assert task is not None  # a coroutine runs in a task
        self._closable.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if self.closed:  # close() came meanwhile: its cancel is taken back, the caller's stays
                task.uncancel()
            self._closed_under()
            raise
        finally:
            self._closable.discard(task)

    async def _pause(self, delay: float) -> None:
        """Every wait of the client before trying again (a call's retry, a read's, a
        subscription's resubscribe), and a lease writer's wait for its next heartbeat: `delay`
        seconds, ended at once by `close()` with the closed client's RuntimeError, as the sync
        client's `_pause`; the next attempt raised it, or grpc.aio's UsageError ("Channel is
        closed."), only after the wait was out, and a heartbeat outlived the close until then."""
        with self._ended_by_close():
            await asyncio.sleep(delay)

    async def _run(self, call: Call[T]) -> T:
        """Make a unary call, retrying an idempotent one while its outcome is unknown, within
        the client's `timeout` in all (`base.Budget`)."""
        method = getattr(self.stub, call.method)
        budget = base.Budget(self.timeout, self.retry if call.idempotent else base.NO_RETRY)
        while True:
            self._check_open()
            try:
                return call.read(await method(call.request, timeout=budget.next_attempt()))
            except grpc.RpcError as exc:
                delay = budget.wait_after(from_rpc_error(exc))
            except asyncio.CancelledError:
                self._closed_under()
                raise
            await self._pause(delay)

    async def _pages(self, paged: Paged[T]) -> AsyncIterator[T]:
        token = ""
        while True:
            items, token = await self._run(Call(paged.method, paged.request(token), paged.read, idempotent=True))
            for item in items:
                yield item
            if not token:
                return

    # --- sessions ---------------------------------------------------------------------

    async def create_session(
        self, session_id: str | None = None, *, cwd: str | None = None, metadata: dict[str, Any] | None = None
    ) -> session_info.SessionInfo:
        """Create a session, named `session_id` (a uuid when None). It is retried on
        UNAVAILABLE: asked for again, the service answers with the session it made. Another
        session under the id (other cwd or metadata, or written to since) is ALREADY_EXISTS."""
        return await self._run(base.create_session(session_id, cwd, metadata))

    async def get_session(self, session_id: str) -> session_info.SessionInfo:
        return await self._run(base.get_session(session_id))

    def list_sessions(
        self, *, parent_session_id: str | None = None, page_size: int = 100
    ) -> AsyncIterator[session_info.SessionInfo]:
        """Every session (or every fork of `parent_session_id`), fetching pages as needed."""
        return self._pages(base.list_sessions(parent_session_id, page_size))

    # --- unary writing ----------------------------------------------------------------

    async def acquire_lease(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> session_info.LeaseInfo:
        """Take the writer lease; the returned lease holds its token (`lease_token` retakes a live one).
        Retried on UNAVAILABLE: a retry whose first answer was lost gets that lease and token
        (the call carries a request_id made once, `base.acquire_lease`)."""
        return await self._run(base.acquire_lease(session_id, writer_id, takeover, lease_token))

    async def append(
        self,
        session_id: str,
        lease: session_info.LeaseInfo,
        events: Iterable[EventLike],
        *,
        expected_next_seq: int | None = None,
    ) -> AppendResult:
        """Append one batch under `lease`; all events commit together or none do (retried safely)."""
        return await self._run(base.append(session_id, lease, events, expected_next_seq, self._acknowledged))

    async def renew_lease(self, lease: session_info.LeaseInfo) -> session_info.LeaseInfo:
        return await self._run(base.renew_lease(lease))

    async def release_lease(self, lease: session_info.LeaseInfo) -> None:
        await self._run(base.release_lease(lease))
        self._acknowledged.forget(lease.token)

    async def report_header(
        self, session_id: str, lease: session_info.LeaseInfo, header: dict[str, Any]
    ) -> HeaderReport:
        """Report the request header about to be used; the service decides whether to log it."""
        return await self._run(base.report_header(session_id, lease, header))

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
    ) -> Opening[AsyncWriter]:
        """Open a streaming writer; it holds the lease until closed (`resume`, `lease_token`,
        `open_retry` and `reconnect_attempts` as in the sync client: its open is tried again after
        a transient failure by the client's retry policy unless `open_retry` says otherwise).
        Await it, or open it in `async with` (`Opening`), which closes it at the block's end."""
        request_id = self._unanswered.request_id(session_id)
        core = WriterCore(session_id, writer_id, create_if_missing, lease_token, request_id)
        reconnect = replace(RECONNECT, attempts=reconnect_attempts)
        open_policy = self.retry if open_retry is None else open_retry
        return Opening(self._open_writer(core, takeover, resume, max_in_flight, reconnect, open_policy))

    async def _open_writer(
        self,
        core: WriterCore,
        takeover: bool,
        resume: bool,
        max_in_flight: int,
        reconnect: RetryPolicy,
        open_retry: RetryPolicy,
    ) -> AsyncWriter:
        """The writer, once open; RuntimeError if `close()` came while it opened (`_ended_by_close`):
        the open's wait to try again ends with it, where the next attempt raised grpc.aio's
        UsageError ("Channel is closed."), and so does an attempt under way, which grpc.aio
        leaves waiting forever on a closed channel if it had not yet connected."""
        self._check_open()
        base.check_max_in_flight(max_in_flight)
        writer = AsyncWriter(self.stub, core, max_in_flight, reconnect, open_retry, self.timeout)
        with self._ended_by_close():
            try:
                await writer._open(takeover, resume)
            except Unavailable:  # its outcome unknown: the next writer on the session retries it
                self._unanswered.unanswered(core.session_id, core.request_id)
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
    ) -> Opening[AsyncLeaseWriter]:
        """Take the lease for unary appends (or resume, SPEC §8) and keep it alive with heartbeats
        every `heartbeat` seconds (default: a third of the lease's time left; a given one is checked
        first, `base.check_heartbeat`). Await it, or open it in `async with` (`Opening`), which
        closes it at the block's end."""
        return Opening(self._open_lease_writer(session_id, writer_id, takeover, resume, heartbeat))

    async def _open_lease_writer(
        self, session_id: str, writer_id: str | None, takeover: bool, resume: bool, heartbeat: float | None
    ) -> AsyncLeaseWriter:
        base.check_heartbeat(heartbeat)
        if resume:
            resumed = await self.resume(session_id, writer_id=writer_id, takeover=takeover)
            return AsyncLeaseWriter(self, resumed.lease, resumed, heartbeat)
        lease = await self.acquire_lease(session_id, writer_id=writer_id, takeover=takeover)
        return AsyncLeaseWriter(self, lease, None, heartbeat)

    # --- lifecycle --------------------------------------------------------------------

    async def resume(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> ResumeInfo:
        """Resume a session for unary appends: lease (with its token), repair, seed boundary (SPEC §8).
        Retried on UNAVAILABLE: a retry whose first answer was lost gets that answer, nothing
        written twice (`base.resume`)."""
        return await self._run(base.resume(session_id, writer_id, takeover, lease_token))

    async def fork(self, session_id: str, at_seq: int, new_session_id: str | None = None) -> ForkInfo:
        """Fork `session_id` after `at_seq` (inclusive); the prefix is shared, not copied. The
        fork is named (a uuid when `new_session_id` is None) and retried on UNAVAILABLE: asked
        for again, the service answers with the fork it made. The answer is the new session
        and the seqs of the events written to close a turn the cut fell inside (`repair_seqs`)."""
        return await self._run(base.fork(session_id, at_seq, new_session_id))

    # --- projections ------------------------------------------------------------------

    async def model_history(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The messages the model sees, in order, at the head or at `at_seq` (page by page)."""
        return [m async for m in self._pages(base.model_history(session_id, at_seq, with_repair))]

    def history_copy(self, session_id: str) -> HistoryCopy:
        """An empty local copy of the model history; pass it to `refresh_history`."""
        return HistoryCopy(session_id)

    async def refresh_history(self, copy: HistoryCopy) -> list[dict[str, Any]]:
        """Bring `copy` up to date, fetching only the messages it lacks or a replace changed."""
        copy.apply(await self._run(base.history_page(copy)))
        while not copy.complete:
            copy.apply(await self._run(base.history_page(copy)))
        return copy.messages

    async def transcript(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The transcript rows for people (replaced events stay, marked), page by page."""
        return [row async for row in self._pages(base.transcript(session_id, at_seq, with_repair))]

    async def request(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"request", "requestJson", "sha256", "headerSeq", "atSeq"}`: the exact request of that
        prefix, parsed and as its bytes (`requestJson`, what `sha256` is of)."""
        return await self._run(base.request_view(session_id, at_seq, with_repair))

    async def stats(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """Counts, tokens and cost over every event carrying usage."""
        return await self._run(base.stats(session_id, at_seq, with_repair))

    async def surface(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"nodes", "replaceGeneration", "atSeq"}` (for debugging; `atSeq` None for a session
        without events)."""
        return await self._run(base.surface(session_id, at_seq, with_repair))

    # --- reading ----------------------------------------------------------------------

    async def read_events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None, page_size: int = 500
    ) -> AsyncIterator[Event]:
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
                async for response in _each_within(self.stub.ReadEvents(cursor.request()), self.timeout):
                    for event in cursor.events(response):
                        yield event
                return
            except grpc.RpcError as exc:
                delay = self.retry.wait_after(from_rpc_error(exc), attempt)
            except asyncio.CancelledError:
                self._closed_under()
                raise
            await self._pause(delay)

    async def subscribe(
        self, session_id: str, *, from_seq: int = 0, on_resubscribe: OnResubscribe | None = None
    ) -> AsyncIterator[Event | CaughtUp]:
        """Replay, a CaughtUp marker, then live events (until the caller stops iterating); after
        a cut it resubscribes from the seq after the last delivered event, telling
        `on_resubscribe(seq, cause)` of each."""
        cursor = SubscriptionCursor(session_id, from_seq, on_resubscribe)
        while True:
            self._check_open()
            call = self.stub.SubscribeEvents(cursor.request())
            try:
                async for response in call:
                    for item in cursor.items(response):
                        yield item
                error: SessionLogError = Unavailable("STREAM_ENDED", "the service ended the subscription")
            except grpc.RpcError as exc:
                # CANCELLED that the caller did not ask for (a leaving `async for` ends the
                # call without an error) is a cut: a proxy or load balancer reset the stream.
                if exc.code() == grpc.StatusCode.CANCELLED and self.closed:
                    raise RuntimeError("the client is closed") from None
                error = from_rpc_error(exc)
            except asyncio.CancelledError:
                self._closed_under()
                raise
            finally:
                call.cancel()
            delay = cursor.resume_delay(error)
            if delay is None:
                raise error
            await self._pause(delay)


class AsyncLeaseWriter(base.LeaseKeeper):
    """A unary writer: a lease kept alive by heartbeats (a task), appends retried safely (they
    carry eventIds), and OwnershipLost (or ACKNOWLEDGED_PAST_LOG) final, as the sync `LeaseWriter`."""

    def __init__(
        self,
        client: AsyncSessionLogClient,
        lease: session_info.LeaseInfo,
        resumed: ResumeInfo | None,
        heartbeat: float | None,
    ) -> None:
        super().__init__(lease, resumed, heartbeat)
        self._client = client
        self._task = asyncio.get_running_loop().create_task(self._beat(), name="sessionlog-heartbeat")

    async def append(self, events: Iterable[EventLike], *, expected_next_seq: int | None = None) -> AppendResult:
        """Append one batch under the lease (all or nothing); renews the lease as a side effect."""
        session_id = self.lease.session_id
        return await self._checked(
            lambda: self._client.append(session_id, self.lease, events, expected_next_seq=expected_next_seq)
        )

    async def report_header(self, header: dict[str, Any]) -> HeaderReport:
        return await self._checked(lambda: self._client.report_header(self.lease.session_id, self.lease, header))

    async def close(self) -> None:
        """Stop the heartbeats and give the lease back (unless it was lost); a second close does nothing."""
        if not self._close_once():
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._failure is None and not self._client.closed:  # with the client closed, it lapses
            await self._client.release_lease(self.lease)

    async def __aenter__(self) -> AsyncLeaseWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _checked(self, call: Callable[[], Awaitable[T]]) -> T:
        self._check()
        try:
            return await call()
        except SessionLogError as exc:
            self._failed(exc)
            raise

    async def _beat(self) -> None:
        """Renew the lease every `_next_beat()` seconds until the writer closes (it cancels this
        task), the lease is lost, or the client closes: the wait is the client's `_pause`, which
        its close ends at once, so the task ends then, no renewal tried (a sleep of its own
        outlived the close until the next beat, up to a third of the lease's time)."""
        try:
            while True:
                await self._client._pause(self._next_beat())
                try:
                    self.lease = await self._client.renew_lease(self.lease)
                except OwnershipLost as exc:
                    self._failed(exc)
                    return
                except SessionLogError:
                    continue  # a transient failure: the next beat tries again before the lease lapses
        except RuntimeError:
            if not self._client.closed:
                raise
            # the client was closed: its writers end with it, the lease lapses


class AsyncWriter(base.WriterView):
    """An asyncio streaming writer: holds the lease while open, pipelines batches, retries safely."""

    def __init__(
        self,
        stub: SessionServiceStub,
        core: WriterCore,
        max_in_flight: int,
        reconnect: RetryPolicy,
        open_retry: RetryPolicy,
        timeout: float | None,
    ) -> None:
        self._stub = stub
        self._core = core
        self._reconnect_policy = reconnect
        self._open_retry = open_retry
        self._timeout = timeout
        """The client's: how long an open waits for its answer, all its attempts together."""
        self._slots = asyncio.Semaphore(max_in_flight)
        self._outbox: list[pb.WriteRequest] = []
        self._outbox_ready = asyncio.Event()
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None

    # --- public -----------------------------------------------------------------------

    async def append(
        self, events: Iterable[EventLike], *, expected_next_seq: int | None = None
    ) -> asyncio.Future[AppendResult]:
        """Send a batch now (waiting only for an in-flight slot); the future resolves with its
        seqs once it is durable. Cancelling the future (or a `wait_for` on it timing out) stops
        the wait, not the batch: it is sent all the same, and `flush` and `close` wait for it."""
        batch = with_event_ids(events)
        return await self._send(lambda future: self._core.add_batch(batch, expected_next_seq, future))

    async def report_header(self, header: dict[str, Any]) -> asyncio.Future[HeaderReport]:
        """Report the request header about to be used, in order with the batches sent so far."""
        return await self._send(lambda future: self._core.add_header(header, future))

    async def _send(self, add: Callable[[asyncio.Future[Any]], Pending]) -> asyncio.Future[Any]:
        self._core.check_open()
        await self._slots.acquire()
        try:
            self._core.check_open()
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            request = add(future).request  # a bad argument raises here: nothing is pending
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(self._finished)
        self._post(request)
        # The writer keeps `future` (its slot, `flush`) until the batch's outcome is known; the
        # caller's copy may be cancelled without cancelling that.
        return asyncio.shield(future)

    def _finished(self, future: asyncio.Future[Any]) -> None:
        """A batch's outcome is known: free its slot, and mark a failure read (the caller's copy
        may have been cancelled, leaving no one to read it; the writer raises it on its next
        call all the same)."""
        self._slots.release()
        if not future.cancelled():
            future.exception()

    async def flush(self) -> None:
        """Wait until every batch sent so far is durable (raises the first failure). Cancelling
        it stops the wait, not the batches (it waits on shields of the writer's futures)."""
        self._core.check_failure()
        for pending in list(self._core.pending):
            await asyncio.shield(pending.future)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Flush, end the stream and give the lease back. A close given up while it flushes
        (its task cancelled, a timeout run out) abandons the stream as `cancel()` does, rather
        than wait on for the service."""
        try:
            if self._core.failure is None:
                await self.flush()
        except asyncio.CancelledError:
            self._abandon(Unavailable("STREAM_ENDED", "the writer's close was given up with batches in flight"))
            raise
        finally:
            self._core.closed = True
            await self._stop(cancel=False)

    async def __aenter__(self) -> AsyncWriter:
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            await self.close()
        else:  # end on purpose (the lease is released), without waiting for what is in flight
            self._core.closed = True
            error = Unavailable("STREAM_ENDED", "the writer was closed with batches in flight")
            for pending in self._core.fail(error):
                reject(pending, error)
            await self._stop(cancel=False)

    def cancel(self) -> None:
        """Abandon the stream at once, without flushing: pending batches fail (their outcome is
        unknown; a new writer re-sending them with the same eventIds appends nothing twice)."""
        self._abandon(Unavailable("STREAM_ENDED", "the writer was cancelled"))

    def _abandon(self, error: SessionLogError) -> None:
        """`cancel`, failing what is pending with `error` (nothing, for a writer already closed)."""
        if self._core.closed and not self._core.pending:
            return
        self._core.closed = True
        for task in (self._sender, self._recovery):
            if task is not None:
                task.cancel()
        self._call.cancel()
        for pending in self._core.fail(error):
            reject(pending, error)

    async def _stop(self, *, cancel: bool) -> None:
        """End the stream: on purpose with `close` (the service releases the lease), or, with
        `cancel`, abandoned at once (the lease is left to lapse)."""
        for task in (self._sender, self._recovery):
            if task is not None:
                task.cancel()
        if cancel:
            self._call.cancel()
        else:
            # A stream already gone has nothing pending (it was flushed) or failed: nothing to end.
            with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                await self._call.write(CLOSE_REQUEST)
                await self._call.done_writing()
        if self._reader is not None:
            # The service gets CLOSE_WITHIN_S to end the stream (the reader then sees its end); a
            # busy or hung one does not hold the close up: the stream is cancelled, the lease lapses.
            await asyncio.wait([self._reader], timeout=None if cancel else CLOSE_WITHIN_S)
        self._call.cancel()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    # --- stream -----------------------------------------------------------------------

    def _post(self, request: pb.WriteRequest) -> None:
        self._outbox.append(request)
        self._outbox_ready.set()

    async def _open(self, takeover: bool, resume: bool) -> None:
        """The first open, tried again after a transient failure as the sync writer's is
        (`Writer._open`: by the open's retry policy, every attempt with the one `request_id`)."""
        budget = base.Budget(self._timeout, self._open_retry)  # all attempts within the timeout
        while True:
            try:
                await self._connect(takeover, resume, budget.next_attempt())
                return
            except base.NoOpenAnswer:
                raise budget.unanswered() from None
            except Unavailable as exc:
                await asyncio.sleep(budget.wait_after(exc))  # raises once spent

    async def _connect(self, takeover: bool, resume: bool, timeout: float | None) -> None:
        """One stream, open once the service answers `opened` within `timeout` seconds (else the
        call is cancelled, `base.no_open_answer`)."""
        call = self._stub.Write()
        reading: asyncio.Future[Any] | None = None
        try:
            await call.write(self._core.open_request(takeover, resume))
            # read(), as the reader uses: grpc.aio cannot mix styles. Shielded: grpc.aio cancels
            # the whole stream when a read is cancelled, and a given-up open must end it first.
            reading = asyncio.ensure_future(call.read())
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the awaited result
            # when a cancel comes as it completes, and the cancel is lost. A client closed as an
            # attempt failed then slept out the wait to retry and tried again on the closed
            # channel (grpc.aio's UsageError) instead of ending with "the client is closed".
            async with asyncio.timeout(timeout):
                first = await asyncio.shield(reading)
        except grpc.RpcError as exc:
            call.cancel()
            raise self._core.refused(from_rpc_error(exc)) from None
        except TimeoutError:
            assert reading is not None and timeout is not None  # only the timeout raises it
            reading.cancel()  # shielded from the timeout: its read is still waiting
            call.cancel()
            raise base.no_open_answer(timeout) from None
        except asyncio.CancelledError:
            # The caller gave up opening: end the stream on purpose, so the service releases a
            # lease it granted meanwhile (a stream just cancelled leaves it held until it lapses).
            with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError, asyncio.TimeoutError):
                await asyncio.wait_for(_end_on_purpose(call, reading), CLOSE_WITHIN_S)
            call.cancel()
            raise
        try:
            self._core.opened(None if first is grpc.aio.EOF else first)
        except SessionLogError:
            with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                await call.write(CLOSE_REQUEST)  # give back a lease granted by mistake
                await call.done_writing()
            call.cancel()
            raise
        self._call = call
        self._outbox = self._core.resend()  # after a reconnect: what was not acknowledged, first
        self._outbox_ready.set()
        self._reader = asyncio.ensure_future(self._read(call))
        self._sender = asyncio.ensure_future(self._send_loop(call))

    async def _send_loop(self, call: Any) -> None:
        """Write queued requests; what queued up during a write goes as one message next."""
        try:
            while True:
                await self._outbox_ready.wait()
                self._outbox_ready.clear()
                queued, self._outbox = self._outbox, []
                await _write_coalesced(call, queued)
                # Waiting for more, the writer holds nothing of what it sent (its core keeps the
                # batches not yet acknowledged, to send again after a reconnect).
                del queued
        except (grpc.RpcError, asyncio.InvalidStateError) as exc:
            error = from_rpc_error(exc) if isinstance(exc, grpc.RpcError) else Unavailable("STREAM_ENDED", str(exc))
            self._broken(call, error)

    async def _read(self, call: Any) -> None:
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    break
                self._settle_answer(response)
                del response  # waiting for the next answer, the writer holds nothing of this one
            if not self._core.closed:  # idle or not, the writer goes on: reconnect as after any cut
                self._broken(call, base.stream_ended())
        except grpc.RpcError as exc:
            self._broken(call, from_rpc_error(exc))

    def _settle_answer(self, response: pb.WriteResponse) -> None:
        """Resolve what one answer acknowledges."""
        for pending, result in self._core.acknowledged(response):
            settle(pending, result)

    def _broken(self, call: Any, error: SessionLogError) -> None:
        """The stream `call` failed: recover once (a stale call's late failure is ignored)."""
        if call is not self._call or (self._recovery is not None and not self._recovery.done()):
            return
        self._recovery = asyncio.ensure_future(self._recover(call, error))

    async def _recover(self, call: Any, error: SessionLogError) -> None:
        """Reconnect and re-send if the failure is transient and the writer open, else fail."""
        call.cancel()
        if self._sender is not None:
            self._sender.cancel()
        recovery = base.Recovery(self._core, self._reconnect_policy, error)
        for delay in recovery:
            await asyncio.sleep(delay)
            try:
                await self._connect(takeover=False, resume=False, timeout=self._timeout)  # no second resume
                return
            except SessionLogError as exc:
                recovery.failed(exc)
        for pending, error in recovery.rejections(self._core.fail(recovery.error)):
            reject(pending, error)


#: How long a writer whose open was given up, or that is closing, waits for the service to end the stream.
CLOSE_WITHIN_S = 5.0


async def _end_on_purpose(call: Any, reading: asyncio.Future[Any] | None) -> None:
    """Send `close` on a writer stream and read it to its end (the service has then released
    the lease it granted on it); `reading` is the read under way, if any."""
    await call.write(CLOSE_REQUEST)
    await call.done_writing()
    if reading is not None and await reading is grpc.aio.EOF:
        return
    while await call.read() is not grpc.aio.EOF:
        pass


async def _write_coalesced(call: Any, requests: list[pb.WriteRequest]) -> None:
    """Write `requests` on the stream, runs of batches merged into one message (`coalesce`)."""
    for request in coalesce(requests):
        await call.write(request)


async def _each_within(call: Any, timeout: float | None) -> AsyncIterator[Any]:
    """The messages of the server stream `call`, each waited for at most `timeout` seconds (None:
    no bound), as gRPC takes a deadline for the whole call only: a wait that runs out cancels the
    call and fails with `base.no_page`. The caller's own time between messages is not counted.
    The call is cancelled however the iteration ends (a caller that stops reading leaves no
    stream behind)."""
    try:
        while True:
            try:
                async with asyncio.timeout(timeout):  # not wait_for, which may lose a cancel (`_connect`)
                    response = await call.read()
            except TimeoutError:
                if timeout is None:
                    raise
                raise base.no_page(timeout) from None
            if response is grpc.aio.EOF:
                return
            yield response
    finally:
        call.cancel()
