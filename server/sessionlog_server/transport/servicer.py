"""The gRPC servicer of sessionlog.v1.SessionService: convert, delegate, convert back.

No SQL and no error mapping here: requests become core values (`sessionlog.convert`), the use
case runs in `SessionLogService`, and the `status` decorators turn exceptions into rich
statuses. The only checks are of a request's own shape (a seq range, `open` as the first
writer message), which need no session state.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from sessionlog import convert
from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event
from sessionlog.core.limits import Limits
from sessionlog.v1 import event_pb2, session_pb2, session_service_pb2_grpc
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service import access, lifecycle
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.service.appends import AppendResult
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.headers import HeaderReport, report_header
from sessionlog_server.service.projections import Scope, fold_scope, history_page, request_of, transcript_page
from sessionlog_server.service.writer_stream import HeaderAcked, OpenRequest, WriterStream
from sessionlog_server.storage.records import SessionRecord
from sessionlog_server.transport import status
from sessionlog_server.transport.decoding import read_request
from sessionlog_server.transport.status import note


def session_to_pb(record: SessionRecord, now: int | None = None) -> session_pb2.Session:
    """A session row as the API's Session message."""
    msg = session_pb2.Session(
        id=access.public_id(record.id),
        create_time_unix_ms=record.create_time,
        cwd=record.cwd or "",
        metadata_json=record.stored_metadata.encode("utf-8") if record.metadata else b"",
        next_seq=record.next_seq,
        open_turn=record.open_turn,
        trace_id=access.trace_id(record.id),
        namespace=access.namespace_of(record.id),
    )
    if record.parent_id is not None and record.fork_seq is not None:
        msg.parent.session_id = access.public_id(record.parent_id)
        msg.parent.fork_seq = record.fork_seq
    if record.lease_live(now if now is not None else now_ms()):
        msg.lease.CopyFrom(lease_to_pb(record))
    return msg


def lease_to_pb(record: SessionRecord) -> session_pb2.Lease:
    return session_pb2.Lease(
        session_id=access.public_id(record.id),
        writer_id=record.writer_id or "",
        epoch=record.epoch,
        expire_time_unix_ms=record.lease_expires_at or 0,
    )


HEADER_REASONS = {
    None: pb.HEADER_REASON_UNSPECIFIED,
    "initial": pb.HEADER_REASON_INITIAL,
    "resume": pb.HEADER_REASON_RESUME,
    "change": pb.HEADER_REASON_CHANGE,
    "series": pb.HEADER_REASON_SERIES,
}


def header_report_to_pb(report: HeaderReport) -> pb.ReportRequestHeaderResponse:
    """A header report's answer. `changed_fields` names config keys, which JSON lets hold a lone
    surrogate and protobuf strings (UTF-8) cannot: such a name is sent as JSON writes it, its
    `\\uXXXX` escape, where it failed the answer of a header already logged (INTERNAL)."""
    msg = pb.ReportRequestHeaderResponse(
        reason=HEADER_REASONS[report.reason],
        starts_series=report.starts_series,
        appended=report.appended,
        changed_fields=[jsonvalue.escape_lone_surrogates(name) for name in report.changed_fields],
    )
    if report.header_seq is not None:
        msg.header_seq = report.header_seq
    return msg


def resume_to_pb(result: lifecycle.ResumeResult) -> pb.ResumeSessionResponse:
    msg = pb.ResumeSessionResponse(
        lease=lease_to_pb(result.record),
        next_seq=result.next_seq,
        latest_header_json=jsonvalue.dumps_bytes(result.latest_header) if result.latest_header is not None else b"",
        replace_generation=result.replace_generation,
        repair_seqs=result.repair_seqs,
        end_seed_seq=result.end_seed_seq,
        lease_token=result.lease_token,
        last_turn=result.last_turn,
    )
    if result.latest_header_seq is not None:
        msg.latest_header_seq = result.latest_header_seq
    return msg


def covered(at_seq: int) -> int | None:
    """A projection response's `at_seq`: the last seq the projection covers, or None (left
    unset) for a session without events (-1), where there is no seq to read it at again."""
    return at_seq if at_seq >= 0 else None


def scope_from_pb(scope: pb.ProjectionScope) -> Scope:
    return Scope(scope.session_id, scope.at_seq if scope.HasField("at_seq") else None, scope.with_repair)


def decode_events(messages: Sequence[event_pb2.NewEvent], limits: Limits) -> list[convert.DecodedEvent]:
    """Parse a batch's payloads, after checking their sizes (an oversized batch costs no parse)."""
    listed = messages[:]  # a list, looped over twice (a repeated field's loop ends on an IndexError: convert.py)
    validate.check_batch_sizes([len(m.data_json) for m in listed], limits)
    return [convert.new_event_from_pb(m, i, limits) for i, m in enumerate(listed)]


def decode_header(raw: bytes, limits: Limits) -> dict[str, Any]:
    """Parse a reported header, after checking its size: a logged header is one event, bound
    by `max_event_bytes` as a batch's events are (and an oversized one costs no parse)."""
    validate.check_event_bytes(len(raw), limits, what="header")
    return convert.data_from_bytes(raw, what="header", proposed=True, limits=limits)


def optional_field(msg: object, name: str) -> int | None:
    return getattr(msg, name) if msg.HasField(name) else None  # type: ignore[attr-defined]


def pages(events: list[Event], max_bytes: int) -> list[list[event_pb2.Event]]:
    """Split events into response pages of about `max_bytes` (at least one event each)."""
    out: list[list[event_pb2.Event]] = [[]]
    size = 0
    for event in events:
        msg = convert.event_to_pb(event)
        if out[-1] and size + len(msg.data_json) > max_bytes:
            out.append([])
            size = 0
        out[-1].append(msg)
        size += len(msg.data_json)
    return out


class SessionServicer(session_service_pb2_grpc.SessionServiceServicer):
    """sessionlog.v1.SessionService over a SessionLogService."""

    def __init__(self, service: SessionLogService) -> None:
        self.service = service

    @status.unary
    async def CreateSession(
        self, request: pb.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSessionResponse:
        validate.check_session_fields(request.cwd, len(request.metadata_json), self.service.limits)
        metadata = convert.data_from_bytes(
            request.metadata_json, what="metadata", proposed=True, limits=self.service.limits
        )
        text = request.metadata_json.decode("utf-8") if request.metadata_json else None  # parsed: valid UTF-8
        record = await self.service.sessions.create_session(
            request.session_id or None, request.cwd or None, metadata, text
        )
        return pb.CreateSessionResponse(session=session_to_pb(record))

    @status.unary
    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        record = await self.service.sessions.get_session(request.session_id)
        return pb.GetSessionResponse(session=session_to_pb(record))

    @status.unary
    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        records, token = await self.service.sessions.list_sessions(
            request.page_size, request.page_token, request.parent_session_id or None
        )
        return pb.ListSessionsResponse(sessions=[session_to_pb(r) for r in records], next_page_token=token)

    @status.unary
    async def AcquireLease(
        self, request: pb.AcquireLeaseRequest, context: grpc.aio.ServicerContext
    ) -> pb.AcquireLeaseResponse:
        grant = await self.service.leases.grant_for_caller(
            request.session_id,
            request.writer_id or None,
            takeover=request.takeover,
            lease_token=request.lease_token,
            request_id=request.request_id,
        )
        record = grant.record
        return pb.AcquireLeaseResponse(lease=lease_to_pb(record), next_seq=record.next_seq, lease_token=grant.token)

    @status.unary
    async def AppendEvents(
        self, request: pb.AppendEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendEventsResponse:
        holder = await self.service.leases.prove_for_caller(request.session_id, request.lease_token, "appending")
        result = await self.service.append(
            holder,
            optional_field(request, "expected_next_seq"),
            decode_events(request.events, self.service.limits),
            optional_field(request, "acknowledged_next_seq"),
        )
        note(seqs=_seq_range(result), writer_id=holder.writer_id, epoch=holder.epoch)
        lease = session_pb2.Lease(
            session_id=request.session_id,
            writer_id=holder.writer_id,
            epoch=holder.epoch,
            expire_time_unix_ms=result.lease_expires_at,
        )
        return pb.AppendEventsResponse(seqs=result.seqs, next_seq=result.next_seq, lease=lease)

    @status.unary
    async def RenewLease(
        self, request: pb.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> pb.RenewLeaseResponse:
        record = await self.service.leases.renew_for_caller(request.session_id, request.lease_token)
        return pb.RenewLeaseResponse(lease=lease_to_pb(record))

    @status.unary
    async def ReleaseLease(
        self, request: pb.ReleaseLeaseRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseLeaseResponse:
        await self.service.leases.release_for_caller(request.session_id, request.lease_token)
        return pb.ReleaseLeaseResponse()

    @status.streaming
    async def ReadEvents(
        self, request: pb.ReadEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadEventsResponse]:
        to_seq = optional_field(request, "to_seq")
        if to_seq is not None and to_seq < request.from_seq:
            raise ValidationError("BAD_RANGE", f"to_seq {to_seq} is before from_seq {request.from_seq}", field="to_seq")
        max_bytes = self.service.settings.read_page_bytes
        async for events in self.service.read_events(request.session_id, request.from_seq, to_seq, request.page_size):
            for page in pages(events, max_bytes):
                yield pb.ReadEventsResponse(events=page)

    @status.written
    async def SubscribeEvents(  # type: ignore[override]  # the stubs know only the yielding form
        self, request: pb.SubscribeEventsRequest, context: grpc.aio.ServicerContext
    ) -> None:
        # Responses go out with `context.write`, not `yield`: gRPC, and each wrapper around a
        # generator, keeps the response yielded last until the next one, so a quiet
        # subscription would keep its last page of events for as long as it stays quiet.
        max_bytes = self.service.settings.read_page_bytes
        namespace = self.service.open_stream()
        try:
            async for item in self.service.subscribe(request.session_id, request.from_seq):
                if isinstance(item, int):
                    await context.write(pb.SubscribeEventsResponse(caught_up=pb.CaughtUp(next_seq=item)))
                else:
                    await _send_events(context, item, max_bytes)
                del item
        finally:
            self.service.close_stream(namespace)

    @status.unary
    async def ReportRequestHeader(
        self, request: pb.ReportRequestHeaderRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportRequestHeaderResponse:
        holder = await self.service.leases.prove_for_caller(
            request.session_id, request.lease_token, "reporting a request header"
        )
        header = decode_header(request.header_json, self.service.limits)
        report = await report_header(self.service, holder, header)
        note(reason=report.reason, header_seq=report.header_seq)
        return header_report_to_pb(report)

    @status.unary
    async def GetModelHistory(
        self, request: pb.GetModelHistoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetModelHistoryResponse:
        page = await history_page(
            self.service,
            scope_from_pb(request.scope),
            from_index=request.from_index,
            if_generation=request.if_generation if request.HasField("if_generation") else None,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.GetModelHistoryResponse(
            messages_json=page.messages_json,
            at_seq=covered(page.at_seq),
            from_index=page.from_index,
            message_count=page.message_count,
            replace_generation=page.replace_generation,
            next_page_token=page.next_page_token,
        )

    @status.unary
    async def GetTranscript(
        self, request: pb.GetTranscriptRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTranscriptResponse:
        page = await transcript_page(
            self.service, scope_from_pb(request.scope), page_size=request.page_size, page_token=request.page_token
        )
        return pb.GetTranscriptResponse(
            rows_json=jsonvalue.dumps_bytes(page.rows),
            at_seq=covered(page.at_seq),
            next_page_token=page.next_page_token,
        )

    @status.unary
    async def GetRequest(
        self, request: pb.GetRequestRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRequestResponse:
        view, at_seq = await request_of(self.service, scope_from_pb(request.scope))
        response = pb.GetRequestResponse(
            request_json=jsonvalue.canonical(view["request"]), sha256=view["sha256"], at_seq=covered(at_seq)
        )
        if view.get("headerSeq") is not None:
            response.header_seq = view["headerSeq"]
        return response

    @status.unary
    async def GetStats(self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext) -> pb.GetStatsResponse:
        folded = await fold_scope(self.service, scope_from_pb(request.scope))
        return pb.GetStatsResponse(stats_json=jsonvalue.dumps_bytes(folded.fold.stats()), at_seq=covered(folded.at_seq))

    @status.unary
    async def GetSurface(
        self, request: pb.GetSurfaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSurfaceResponse:
        folded = await fold_scope(self.service, scope_from_pb(request.scope))
        view = folded.fold.surface_view()
        return pb.GetSurfaceResponse(
            nodes=view["nodes"], replace_generation=view["replaceGeneration"], at_seq=covered(folded.at_seq)
        )

    @status.unary
    async def ResumeSession(
        self, request: pb.ResumeSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeSessionResponse:
        result = await lifecycle.resume(
            self.service,
            request.session_id,
            request.writer_id or None,
            takeover=request.takeover,
            lease_token=request.lease_token,
            request_id=request.request_id,
        )
        note(next_seq=result.next_seq, repair_seqs=result.repair_seqs)
        return resume_to_pb(result)

    @status.unary
    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkSessionResponse:
        result = await lifecycle.fork(self.service, request.session_id, request.at_seq, request.new_session_id or None)
        note(child=access.public_id(result.record.id), fork_seq=request.at_seq)
        return pb.ForkSessionResponse(session=session_to_pb(result.record), repair_seqs=result.repair_seqs)

    @status.streaming
    async def Write(
        self, request_iterator: AsyncIterator[pb.WriteRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WriteResponse]:
        # The requests are read with `read_request`, never through `request_iterator` (see there).
        # A stream counts against the limit from its first byte, and must open in time: a
        # client that opens streams and sends nothing cannot hold slots for free.
        namespace = self.service.open_stream()
        try:
            timeout = self.service.settings.writer_open_timeout_s
            try:
                # `asyncio.timeout`, not `wait_for`: Python 3.11's `wait_for` returns the result
                # when a cancellation comes with it (`Subscriber.next_batch`), and a stream
                # cancelled as its `open` arrived went on to take the lease.
                async with asyncio.timeout(timeout):
                    first = await read_request(context)
            except TimeoutError:
                raise ValidationError(
                    "WRITER_OPEN_TIMEOUT",
                    f"a writer stream must send `open` within {timeout:g} s of starting",
                    field="open",
                    timeout_s=timeout,
                ) from None
            if first is None or first.WhichOneof("kind") != "open":
                raise ValidationError(
                    "WRITER_NOT_OPENED", "the first message on a writer stream must be `open`", field="open"
                )
            async for response in self._write(first.open, context):
                yield response
        finally:
            self.service.close_stream(namespace)

    async def _write(self, opened: pb.OpenWriter, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WriteResponse]:
        """The writer stream after its `open` message (the protocol is service/writer_stream.py)."""
        stream = WriterStream(self.service)
        granted = await stream.open(
            OpenRequest(
                opened.session_id,
                opened.writer_id or None,
                takeover=opened.takeover,
                resume=opened.resume,
                create_if_missing=opened.create_if_missing,
                lease_token=opened.lease_token,
                acknowledged_next_seq=(
                    opened.acknowledged_next_seq if opened.HasField("acknowledged_next_seq") else None
                ),
                request_id=opened.request_id,
            )
        )
        holder = granted.holder
        note(session_id=access.public_id(holder.session_id), writer_id=holder.writer_id, epoch=holder.epoch)
        pump = asyncio.ensure_future(self._pump(context, stream))
        try:
            welcome = pb.WriterOpened(
                lease=lease_to_pb(granted.record), next_seq=granted.next_seq, lease_token=granted.lease_token
            )
            if granted.resumed is not None:
                welcome.resumed.CopyFrom(resume_to_pb(granted.resumed))
            yield pb.WriteResponse(opened=welcome)
            async for outcome in stream.outcomes():
                if isinstance(outcome, HeaderAcked):
                    ack = pb.HeaderAck(batch_id=outcome.batch_id, result=header_report_to_pb(outcome.report))
                    yield pb.WriteResponse(header_ack=ack)
                    continue
                batch_acks = [pb.BatchAck(batch_id=b, seqs=r.seqs, next_seq=r.next_seq) for b, r in outcome.acks]
                if len(batch_acks) == 1:
                    yield pb.WriteResponse(ack=batch_acks[0])
                else:  # acknowledgements that are ready together travel in one message
                    yield pb.WriteResponse(acks=pb.BatchAcks(acks=batch_acks))
        finally:
            pump.cancel()
            note(seqs=None if stream.first_seq is None else [stream.first_seq, stream.last_seq])
            await stream.finish()

    async def _pump(self, context: grpc.aio.ServicerContext, stream: WriterStream) -> None:
        """Hand requests to the stream as they arrive, without waiting for commits."""
        try:
            while True:
                request = await read_request(context)
                if request is None:
                    # The request stream ended without `close`. gRPC reports a writer process that
                    # died this way too, so it cannot count as a release: the lease is left to lapse.
                    stream.requests_ended()
                    return
                if await self._hand_over(request, stream):
                    return
                # While the stream waits for its next request, nothing of this one (its payload,
                # on the wire and decoded) stays alive: an idle agent's stream costs no memory.
                del request
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            stream.failed(exc)

    async def _hand_over(self, request: pb.WriteRequest, stream: WriterStream) -> bool:
        """Give one request to the stream; True when it was `close`."""
        kind = request.WhichOneof("kind")
        if kind in ("batch", "batches"):
            for batch in [request.batch] if kind == "batch" else request.batches.batches[:]:
                decoded = decode_events(batch.events, self.service.limits)
                await stream.batch(batch.batch_id, optional_field(batch, "expected_next_seq"), decoded)
        elif kind == "header":
            header = decode_header(request.header.header_json, self.service.limits)
            await stream.header(request.header.batch_id, header)
        elif kind == "close":
            stream.close()
            return True
        elif kind == "open":
            raise ValidationError("WRITER_ALREADY_OPEN", "`open` may only be the first message", field="open")
        else:  # None: nothing set, or only a kind of newer protos (an unknown field to this service)
            raise ValidationError(
                "WRITE_REQUEST_EMPTY",
                "a writer message must set one of batch, batches, header or close (this one sets none"
                " this service knows)",
                field="kind",
            )
        return False


async def _send_events(context: grpc.aio.ServicerContext, events: list[Event], max_bytes: int) -> None:
    """A subscription's batch of events, in responses of about `max_bytes` each."""
    for page in pages(events, max_bytes):
        await context.write(pb.SubscribeEventsResponse(events=pb.EventBatch(events=page)))


def _seq_range(result: AppendResult) -> list[int] | None:
    return [result.seqs[0], result.seqs[-1]] if result.seqs else None
