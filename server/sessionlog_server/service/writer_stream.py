"""The writer-stream protocol, independent of gRPC: what one open `Write` stream does.

A harness opens a stream for a session (taking the lease, or resuming), then sends batches and
header reports in order; each is planned at once (so batches pipeline) and acknowledged in the
order it came, once durable. Acknowledgements that are ready together are handed out together
(the transport sends them in one message). The stream ends in one of three ways, and each
decides what happens to the lease:

- the writer sends `close`: the lease is released;
- the service ends it with an error the writer is told: released as well, unless the error is
  UNAVAILABLE (the database failed, a commit's outcome is unknown): the writer reconnects on
  that with its token and re-sends, so the lease is left to it as below;
- the requests just stop (the writer process died, or its connection broke): the lease is left
  to lapse, and the expiry sweep repairs an open turn exactly as for a unary writer (SPEC §8);
  but if the writer gave the call up while its `open` was being granted, before `opened` was
  written (`withdraw`), nobody learnt the token, and the lease is released;
- the service stops: what is pending is acknowledged, then the stream ends with UNAVAILABLE
  `SHUTTING_DOWN` and the lease is left live, so the writer reconnects with its token to
  wherever the service runs next and goes on in the same lease. Released instead, the start-up
  repair would close the writer's open turn before it got back.

The transport translates messages to `open` / `batch` / `header` / `close` / `requests_ended`
and `Outcome`s back; it holds no protocol state of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sessionlog.convert import DecodedEvent
from sessionlog.core import validate
from sessionlog.core.errors import AlreadyExists, SessionLogError, Unavailable
from sessionlog_server.service import lifecycle
from sessionlog_server.service.acknowledged import check_acknowledged
from sessionlog_server.service.appends import AppendResult
from sessionlog_server.service.headers import HeaderReport, replayed_header_report, start_header_report
from sessionlog_server.service.leases import Grant, LeaseHolder
from sessionlog_server.storage.records import SessionRecord

if TYPE_CHECKING:
    from sessionlog_server.service.app import SessionLogService


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """The writer's `open`: which session, as whom, and how to take the lease."""

    session_id: str
    writer_id: str | None
    takeover: bool = False
    resume: bool = False
    create_if_missing: bool = False
    lease_token: str = ""
    acknowledged_next_seq: int | None = None
    """On a reconnect: the seq after the last event the writer saw acknowledged (`_Replay`)."""
    request_id: str = ""
    """On a first open: what makes it safe to retry, as a grant's (`LeaseManager.grant`)."""


@dataclass(frozen=True, slots=True)
class Opened:
    """The stream is open: the lease it holds, and the resume's result when it resumed."""

    record: SessionRecord
    lease_token: str
    next_seq: int
    resumed: lifecycle.ResumeResult | None
    holder: LeaseHolder


@dataclass(frozen=True, slots=True, init=False)
class BatchesAcked:
    """Durable batches, in the order they were sent: `(batch_id, result)` pairs."""

    acks: list[tuple[int, AppendResult]]

    # Written out: one is built per acknowledgement (docs/architecture/compiled-build.md).
    def __init__(self, acks: list[tuple[int, AppendResult]]) -> None:
        object.__setattr__(self, "acks", acks)


@dataclass(frozen=True, slots=True)
class HeaderAcked:
    """A header report decided and (when logged) durable."""

    batch_id: int
    report: HeaderReport


Outcome = BatchesAcked | HeaderAcked


@dataclass(frozen=True, slots=True)
class _Ended:
    closed: bool
    error: SessionLogError | None = None
    """What the writer is told the stream ended with, its lease kept (a shutdown)."""


_Pending = tuple[int, "asyncio.Future[Any]"]


@dataclass(slots=True)
class _Replay:
    """What a reconnected writer's stream re-sends first: the requests whose answers were lost.

    The log from `cursor` to `end` (the next seq when the stream opened) holds what the service
    did with them, in the order they were sent: nothing else writes under the lease. A re-sent
    batch is answered by its eventIds and moves the cursor past its events; a re-sent header
    report is answered from the event at the cursor (`replayed_header_report`). Once the cursor
    reaches `end`, or a batch appends anything, the requests are new: decided as usual.
    """

    cursor: int
    end: int


class WriterStream:
    """One open writer stream's protocol state: its lease and its pending acknowledgements."""

    def __init__(self, service: SessionLogService) -> None:
        self.service = service
        self.opened: Opened | None = None
        self._items: deque[_Pending | BaseException | _Ended] = deque()
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        """What `_get` waits on while `_items` is empty, resolved by the next `_put`: a bare
        future rather than an `asyncio.Event`, whose methods (interpreted) ran three or four
        times an event."""
        self._broken = True  # until the stream ends the way the writer or the service meant it to
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self._replay: _Replay | None = None
        self._ended = False  # `finish` ran: nothing awaits what is queued from now on

    async def open(self, request: OpenRequest) -> Opened:
        """Take the lease (or resume the session) and hold it for as long as the stream lasts.

        An open asked for again with its `request_id` (its `opened` was lost) is the grant's or
        the resume's retry: the same lease again, under the same token, nothing written twice.
        """
        service = self.service
        validate.check_writer_id(request.writer_id, service.limits)  # before a session is created
        validate.check_request_id(request.request_id)
        if request.create_if_missing:
            with contextlib.suppress(AlreadyExists):
                await service.sessions.create_session(request.session_id, None, {})
        resumed = None
        if request.resume:
            resumed = await lifecycle.resume(
                service,
                request.session_id,
                request.writer_id,
                takeover=request.takeover,
                lease_token=request.lease_token,
                request_id=request.request_id,
            )
            record, token, next_seq = resumed.record, resumed.lease_token, resumed.next_seq
        else:
            grant = await service.leases.grant_for_caller(
                request.session_id,
                request.writer_id,
                takeover=request.takeover,
                lease_token=request.lease_token,
                request_id=request.request_id,
            )
            record, token, next_seq = grant.record, grant.token, grant.record.next_seq
        holder = Grant(record, token).holder
        acknowledged = request.acknowledged_next_seq
        kept = bool(request.lease_token) and token == request.lease_token
        if kept:
            await check_acknowledged(service.leases, holder, acknowledged, next_seq)
        service.leases.hold_for_stream(holder)
        service.live.pin(holder.session_id)
        service.metrics.open_writers.inc()
        service.writer_streams.add(self)
        self.opened = Opened(record, token, next_seq, resumed, holder)
        # The holder took its own lease again (its token kept): the log past what it saw
        # acknowledged, within its lease, is what became of the requests it re-sends.
        since = record.lease_since_seq
        if kept and acknowledged is not None and since is not None and since <= acknowledged < next_seq:
            self._replay = _Replay(acknowledged, next_seq)
        return self.opened

    async def batch(self, batch_id: int, expected_next_seq: int | None, decoded: Sequence[DecodedEvent]) -> None:
        """Plan a batch now (in order); it is acknowledged once durable."""
        future = await self.service.appends.start_append(self._holder(), expected_next_seq, decoded)
        self._put((batch_id, future))
        replay = self._replay
        if replay is not None:
            done = future.done() and not future.cancelled() and future.exception() is None
            seqs = future.result().seqs if done else []
            if seqs and max(seqs) < replay.end:  # a retry: every event was in the log already
                replay.cursor = max(replay.cursor, max(seqs) + 1)
            else:
                self._replay = None

    async def header(self, batch_id: int, header: dict[str, Any]) -> None:
        """Decide a header report now, in order with the batches (a re-sent one: from the log)."""
        replay = self._replay
        if replay is not None and replay.cursor < replay.end:
            report, logged = await replayed_header_report(self.service, self._holder(), header, replay.cursor)
            replay.cursor += 1 if logged else 0
            answered: asyncio.Future[HeaderReport] = asyncio.get_running_loop().create_future()
            answered.set_result(report)
            self._put((batch_id, answered))
            return
        self._replay = None
        future = await start_header_report(self.service, self._holder(), header)
        self._put((batch_id, future))

    def close(self) -> None:
        """The writer sent `close`: acknowledge what is pending, then release the lease."""
        self._put(_Ended(closed=True))

    def requests_ended(self) -> None:
        """The requests stopped without `close` (a dead writer looks like this too): the lease is
        left to lapse."""
        self._put(_Ended(closed=False))

    def end_for_shutdown(self) -> None:
        """The service is stopping: acknowledge what is pending, then end the stream with
        UNAVAILABLE `SHUTTING_DOWN`, leaving the lease to the writer's reconnect."""
        error = Unavailable("SHUTTING_DOWN", "the service is shutting down; reconnect with the lease token")
        self._put(_Ended(closed=False, error=error))

    def failed(self, error: BaseException) -> None:
        """Reading or planning a request failed: the stream ends with this error."""
        self._put(error)

    async def next_outcome(self) -> Outcome | None:
        """The next acknowledgement in request order (the batches already durable behind it
        with it), None once the stream ended as the writer or the service meant; raises the
        stream's error.

        A coroutine called once per acknowledgement, not an async generator: the transport
        writes each answer as it gets it, and mypyc compiles coroutines only.
        """
        item = await self._get()
        if isinstance(item, _Ended):
            self._broken = not item.closed
            if item.error is not None:
                raise item.error
            return None
        if isinstance(item, BaseException):
            self._told(item)
            raise item
        batch_id, future = item
        try:
            result = await future
        except BaseException as exc:
            self._told(exc)
            raise
        if isinstance(result, HeaderReport):
            return HeaderAcked(batch_id, result)
        ready = [(batch_id, result), *self._take_ready_appends()]
        for _, done in ready:
            if done.seqs:
                self.first_seq = done.seqs[0] if self.first_seq is None else self.first_seq
                self.last_seq = done.seqs[-1]
        return BatchesAcked(ready)

    def _told(self, error: BaseException) -> None:
        """The stream ends with `error`: one the service reports ends it as the service meant to
        (the lease is released); anything else leaves it broken.

        An UNAVAILABLE one (the database failed, a commit's outcome is unknown) leaves it broken
        too, as a shutdown does: the clients' writers reconnect on it with their token and
        re-send what was not acknowledged. Released, the lease their reconnect got was a fresh
        one, and they failed with OWNERSHIP_LOST, "another writer", where there was none.
        """
        if isinstance(error, SessionLogError) and not isinstance(error, Unavailable):
            self._broken = False

    async def withdraw(self) -> None:
        """The writer gave the stream up before its `opened` was written: nobody learnt the
        token, so the lease (if `open` took one) is given back rather than left to lapse."""
        self._broken = False
        await self.finish()

    async def finish(self) -> None:
        """Give the lease back, or leave it to lapse if the stream broke."""
        self._ended = True
        for item in self._items:
            _abandon(item)
        self._items.clear()
        if self.opened is None:
            return
        self.service.writer_streams.discard(self)
        self.service.live.unpin(self.opened.holder.session_id)
        self.service.metrics.open_writers.dec()
        await self.service.leases.end_stream(self.opened.holder, broken=self._broken)

    def _holder(self) -> LeaseHolder:
        assert self.opened is not None, "open the stream first"
        return self.opened.holder

    def _put(self, item: _Pending | BaseException | _Ended) -> None:
        if self._ended:  # a request read as the stream ended
            _abandon(item)
            return
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():  # else its wait was cancelled: the stream is ending
                waiter.set_result(None)

    async def _get(self) -> _Pending | BaseException | _Ended:
        while not self._items:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiter = waiter
            await waiter
        return self._items.popleft()

    def _take_ready_appends(self) -> list[tuple[int, AppendResult]]:
        """The batch acknowledgements at the head of the queue that are already durable."""
        ready: list[tuple[int, AppendResult]] = []
        while self._items:
            head = self._items[0]
            if not isinstance(head, tuple):
                break
            batch_id, future = head
            if not future.done() or future.cancelled() or future.exception() is not None:
                break
            result = future.result()
            if not isinstance(result, AppendResult):
                break
            self._items.popleft()
            ready.append((batch_id, result))
        return ready


def _abandon(item: _Pending | BaseException | _Ended) -> None:
    """A queued acknowledgement no one will await, the stream having ended (on the failure of an
    earlier one, say): its outcome is taken once it is done, so that a failed group commit is
    told once, by the stream that awaited it, not once more for each batch behind it by
    asyncio's "Future exception was never retrieved" (an ERROR line and a traceback each)."""
    if isinstance(item, tuple):
        item[1].add_done_callback(_take_outcome)


def _take_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


__all__ = ["BatchesAcked", "HeaderAcked", "OpenRequest", "Opened", "Outcome", "WriterStream"]
