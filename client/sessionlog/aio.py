"""The asyncio sessionlog client and its streaming `AsyncWriter` (same shape as the sync one).

```python
async with AsyncSessionLogClient("127.0.0.1:50051") as client:
    async with await client.writer("demo", create_if_missing=True) as writer:
        ack = await writer.append([{"type": "turn/start", "data": {"turn": 1}}])
```
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from sessionlog import convert
from sessionlog.auth import aio_interceptors, channel_credentials
from sessionlog.core import jsonvalue
from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog.core.events import Event, NewEvent
from sessionlog.errors import from_rpc_error
from sessionlog.requests import (
    CHANNEL_OPTIONS,
    CLOSE_REQUEST,
    DEFAULT_TARGET,
    AppendResult,
    CaughtUp,
    EventLike,
    HeaderReport,
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


async def _call(fn: Any, request: Any, timeout: float | None) -> Any:
    try:
        return await fn(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


class AsyncSessionLogClient:
    """An asyncio connection to a sessionlog server."""

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
        interceptors = aio_interceptors(token)
        self.channel = (
            grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS, interceptors=interceptors)
            if credentials is not None
            else grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS, interceptors=interceptors)
        )
        self.stub = SessionServiceStub(self.channel)

    async def __aenter__(self) -> AsyncSessionLogClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def create_session(
        self, session_id: str | None = None, *, cwd: str | None = None, metadata: dict[str, Any] | None = None
    ) -> convert.SessionInfo:
        response = await _call(self.stub.CreateSession, create_request(session_id, cwd, metadata), self.timeout)
        return convert.session_from_pb(response.session)

    async def get_session(self, session_id: str) -> convert.SessionInfo:
        response = await _call(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id), self.timeout)
        return convert.session_from_pb(response.session)

    async def list_sessions(
        self, *, parent_session_id: str | None = None, page_size: int = 100
    ) -> AsyncIterator[convert.SessionInfo]:
        token = ""
        while True:
            request = pb.ListSessionsRequest(
                page_size=page_size, page_token=token, parent_session_id=parent_session_id or ""
            )
            response = await _call(self.stub.ListSessions, request, self.timeout)
            for session in response.sessions:
                yield convert.session_from_pb(session)
            token = response.next_page_token
            if not token:
                return

    async def acquire_lease(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> convert.LeaseInfo:
        """Take the writer lease; the returned lease holds its token (`lease_token` retakes a live one)."""
        request = acquire_request(session_id, writer_id, takeover, lease_token)
        return acquire_from_pb(await _call(self.stub.AcquireLease, request, self.timeout))

    async def append(
        self,
        session_id: str,
        lease: convert.LeaseInfo,
        events: Iterable[EventLike],
        *,
        expected_next_seq: int | None = None,
    ) -> AppendResult:
        request = append_request(session_id, lease, with_event_ids(events), expected_next_seq)
        response = await _call(self.stub.AppendEvents, request, self.timeout)
        return AppendResult(list(response.seqs), response.next_seq)

    async def renew_lease(self, lease: convert.LeaseInfo) -> convert.LeaseInfo:
        """Extend `lease` (a heartbeat); the renewed lease keeps its token."""
        renewed = (await _call(self.stub.RenewLease, renew_request(lease), self.timeout)).lease
        return convert.lease_from_pb(renewed, lease.token)

    async def release_lease(self, lease: convert.LeaseInfo) -> None:
        await _call(self.stub.ReleaseLease, release_request(lease), self.timeout)

    async def writer(
        self,
        session_id: str,
        *,
        writer_id: str | None = None,
        takeover: bool = False,
        create_if_missing: bool = False,
        resume: bool = False,
        max_in_flight: int = 256,
    ) -> AsyncWriter:
        """Open a streaming writer; it holds the lease until closed (`resume` as in the sync client)."""
        writer = AsyncWriter(self.stub, session_id, writer_id, create_if_missing, max_in_flight)
        await writer._connect(takeover, resume)
        return writer

    async def report_header(self, session_id: str, lease: convert.LeaseInfo, header: dict[str, Any]) -> HeaderReport:
        """Report the request header about to be used; the service decides whether to log it."""
        response = await _call(self.stub.ReportRequestHeader, header_request(session_id, lease, header), self.timeout)
        return header_report_from_pb(response)

    async def resume(
        self, session_id: str, *, writer_id: str | None = None, takeover: bool = False, lease_token: str = ""
    ) -> ResumeInfo:
        """Resume a session for unary appends: lease, repair, seed boundary (SPEC §8)."""
        request = resume_request(session_id, writer_id, takeover, lease_token)
        return resume_from_pb(await _call(self.stub.ResumeSession, request, self.timeout))

    async def fork(self, session_id: str, at_seq: int, new_session_id: str | None = None) -> convert.SessionInfo:
        """Fork `session_id` after `at_seq` (inclusive); the prefix is shared, not copied."""
        request = pb.ForkSessionRequest(session_id=session_id, at_seq=at_seq, new_session_id=new_session_id or "")
        return convert.session_from_pb((await _call(self.stub.ForkSession, request, self.timeout)).session)

    async def model_history(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The messages the model sees, in order, at the head or at `at_seq` (all pages)."""
        messages: list[dict[str, Any]] = []
        token = ""
        while True:
            response = await _call(
                self.stub.GetModelHistory, history_request(session_id, at_seq, with_repair, token), self.timeout
            )
            messages.extend(jsonvalue.loads(response.messages_json, what="messages"))
            token = response.next_page_token
            if not token:
                return messages

    async def transcript(
        self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False
    ) -> list[dict[str, Any]]:
        """The transcript rows for people (replaced events stay, marked), all pages."""
        rows: list[dict[str, Any]] = []
        token = ""
        while True:
            response = await _call(
                self.stub.GetTranscript, transcript_request(session_id, at_seq, with_repair, token), self.timeout
            )
            rows.extend(jsonvalue.loads(response.rows_json, what="rows"))
            token = response.next_page_token
            if not token:
                return rows

    async def request(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"request", "sha256", "headerSeq"}`: the exact request of that prefix."""
        request = pb.GetRequestRequest(scope=scope(session_id, at_seq, with_repair))
        return request_view_from_pb(await _call(self.stub.GetRequest, request, self.timeout))

    async def stats(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """Counts, tokens and cost over every event carrying usage."""
        request = pb.GetStatsRequest(scope=scope(session_id, at_seq, with_repair))
        response = await _call(self.stub.GetStats, request, self.timeout)
        return dict(jsonvalue.loads(response.stats_json, what="stats"))

    async def surface(self, session_id: str, *, at_seq: int | None = None, with_repair: bool = False) -> dict[str, Any]:
        """`{"nodes", "replaceGeneration"}` (for debugging)."""
        request = pb.GetSurfaceRequest(scope=scope(session_id, at_seq, with_repair))
        return surface_from_pb(await _call(self.stub.GetSurface, request, self.timeout))

    async def read_events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None, page_size: int = 500
    ) -> AsyncIterator[Event]:
        try:
            async for response in self.stub.ReadEvents(read_request(session_id, from_seq, to_seq, page_size)):
                for message in response.events:
                    yield convert.event_from_pb(message)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def subscribe(self, session_id: str, *, from_seq: int = 0) -> AsyncIterator[Event | CaughtUp]:
        """Replay, a CaughtUp marker, then live events (until the caller stops iterating).

        Cut off for falling behind (SUBSCRIBER_TOO_SLOW), it resumes on its own from the first
        seq it has not delivered, as the sync client does.
        """
        cursor = SubscriptionCursor(session_id, from_seq)
        while True:
            call = self.stub.SubscribeEvents(cursor.request())
            try:
                async for response in call:
                    for item in cursor.items(response):
                        yield item
                return
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.CANCELLED:
                    return
                error = from_rpc_error(exc)
                if not cursor.should_resume(error):
                    raise error from None
            finally:
                call.cancel()


@dataclass(slots=True)
class _Pending:
    batch_id: int
    events: list[NewEvent]
    expected_next_seq: int | None
    future: asyncio.Future[Any]


class AsyncWriter:
    """An asyncio streaming writer: holds the lease while open and pipelines batches."""

    def __init__(
        self, stub: SessionServiceStub, session_id: str, writer_id: str | None, create: bool, max_in_flight: int
    ) -> None:
        self._stub = stub
        self.session_id = session_id
        self._writer_id = writer_id
        self._create = create
        self._ids = itertools.count(1)
        self._pending: deque[_Pending] = deque()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._failure: SessionLogError | None = None
        self._reader: asyncio.Task[None] | None = None
        self.lease: convert.LeaseInfo
        self.next_seq = 0
        self.resumed: ResumeInfo | None = None
        self._outbox: list[pb.WriteRequest] = []
        self._outbox_ready = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None

    async def _connect(self, takeover: bool, resume: bool = False) -> None:
        self._call = self._stub.Write()
        try:
            await self._call.write(open_request(self.session_id, self._writer_id, takeover, self._create, resume))
            first = await self._call.read()
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        if first is grpc.aio.EOF:
            raise Unavailable("STREAM_ENDED", "the server closed the writer stream while opening")
        self.lease = convert.lease_from_pb(first.opened.lease, first.opened.lease_token)
        self.next_seq = first.opened.next_seq
        if first.opened.HasField("resumed"):
            self.resumed = resume_from_pb(first.opened.resumed)
        self._reader = asyncio.ensure_future(self._read())
        self._sender = asyncio.ensure_future(self._send_loop())

    def _post(self, request: pb.WriteRequest) -> None:
        self._outbox.append(request)
        self._outbox_ready.set()

    async def _send_loop(self) -> None:
        """Write queued requests; what queued up during a write goes as one message next."""
        try:
            while True:
                await self._outbox_ready.wait()
                self._outbox_ready.clear()
                queued, self._outbox = self._outbox, []
                for request in coalesce(queued):
                    await self._call.write(request)
        except grpc.RpcError as exc:
            self._fail(from_rpc_error(exc))

    async def append(self, events: Iterable[EventLike], *, expected_next_seq: int | None = None) -> AppendResult:
        """Send a batch and wait for its acknowledgement."""
        return await (await self.send(events, expected_next_seq=expected_next_seq))

    async def send(
        self, events: Iterable[EventLike], *, expected_next_seq: int | None = None
    ) -> asyncio.Future[AppendResult]:
        """Send a batch without waiting: the future resolves when it is durable (pipelining)."""
        if self._failure is not None:
            raise self._failure
        await self._slots.acquire()
        pending = _Pending(
            next(self._ids), with_event_ids(events), expected_next_seq, asyncio.get_running_loop().create_future()
        )
        self._pending.append(pending)
        self._post(batch_request(pending.batch_id, pending.events, expected_next_seq))
        return pending.future

    async def report_header(self, header: dict[str, Any]) -> HeaderReport:
        """Report the request header about to be used, in order with the batches sent so far."""
        if self._failure is not None:
            raise self._failure
        await self._slots.acquire()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending = _Pending(next(self._ids), [], None, future)
        self._pending.append(pending)
        self._post(header_write_request(pending.batch_id, header))
        result: HeaderReport = await future
        return result

    async def _read(self) -> None:
        try:
            while True:
                response = await self._call.read()  # read(), as open used it: the two styles cannot mix
                if response is grpc.aio.EOF:
                    break
                kind = response.WhichOneof("kind")
                if kind == "header_ack":
                    header = response.header_ack
                    self._acknowledge(header.batch_id, header_report_from_pb(header.result))
                    continue
                for ack in response.acks.acks if kind == "acks" else [response.ack]:
                    self.next_seq = ack.next_seq
                    self._acknowledge(ack.batch_id, AppendResult(list(ack.seqs), ack.next_seq))
            if self._pending:
                self._fail(Unavailable("STREAM_ENDED", "the server ended the stream before acknowledging every batch"))
        except grpc.RpcError as exc:
            self._fail(from_rpc_error(exc))

    def _acknowledge(self, batch_id: int, result: Any) -> None:
        while self._pending and self._pending[0].batch_id != batch_id:
            self._pending.popleft()
        if self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                pending.future.set_result(result)
            self._slots.release()

    def _fail(self, error: SessionLogError) -> None:
        self._failure = error
        while self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                pending.future.set_exception(error)
            self._slots.release()

    async def flush(self) -> None:
        for pending in list(self._pending):
            await pending.future

    async def close(self) -> None:
        """Flush, end the stream and give the lease back."""
        try:
            if self._failure is None:
                await self.flush()
        finally:
            if self._sender is not None:
                self._sender.cancel()
            if self._failure is None:
                with contextlib.suppress(grpc.RpcError):  # the service may have ended the call
                    await self._call.write(CLOSE_REQUEST)  # on purpose: the lease is released
            await self._call.done_writing()
            if self._reader is not None:
                await self._reader

    async def __aenter__(self) -> AsyncWriter:
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            await self.close()
        else:  # end on purpose (the lease is released), without waiting for what is in flight
            if self._sender is not None:
                self._sender.cancel()
            with contextlib.suppress(grpc.RpcError):
                await self._call.write(CLOSE_REQUEST)
                await self._call.done_writing()
            if self._reader is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(self._reader), timeout=5)
            self._call.cancel()
