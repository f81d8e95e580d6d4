"""The gRPC servicer of sessionlog.v1.SessionService: convert, delegate, convert back.

No SQL and no error mapping here: requests become core values (`sessionlog.convert`), the use
case runs in `SessionLogService`, and the `status` decorators turn exceptions into rich
statuses. The only checks are of a request's own shape (a seq range), which need no session
state. The writer stream's call (`Write`) is `writer_rpc.py`; messages are built in
`replies.py` and read in `request_fields.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from sessionlog import convert
from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import Event
from sessionlog.v1 import session_pb2, session_service_pb2_grpc
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service import access, lifecycle
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.service.appends import AppendResult
from sessionlog_server.service.headers import report_header
from sessionlog_server.service.projections import fold_scope, history_page, request_of, transcript_page
from sessionlog_server.transport import status
from sessionlog_server.transport.calls import RunningCalls
from sessionlog_server.transport.replies import (
    covered,
    header_report_to_pb,
    lease_to_pb,
    pages,
    resume_to_pb,
    session_to_pb,
)
from sessionlog_server.transport.request_fields import decode_events, decode_header, optional_field, scope_from_pb
from sessionlog_server.transport.status import note
from sessionlog_server.transport.writer_rpc import serve_writer


class SessionServicer(session_service_pb2_grpc.SessionServiceServicer):
    """sessionlog.v1.SessionService over a SessionLogService."""

    def __init__(self, service: SessionLogService) -> None:
        self.service = service
        self.calls = RunningCalls()
        """Its calls while they run (`status` counts them), for the server's stop."""

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
        # Each send is counted (`calls.sends`): the stop cuts a subscription whose send waits on
        # a subscriber that stopped reading, where it held the stop for its whole grace period.
        max_bytes = self.service.settings.read_page_bytes
        namespace = self.service.open_stream()
        try:
            async for item in self.service.subscribe(request.session_id, request.from_seq):
                if isinstance(item, int):
                    await self._send(context, pb.SubscribeEventsResponse(caught_up=pb.CaughtUp(next_seq=item)))
                else:
                    await self._send_events(context, item, max_bytes)
                del item
        finally:
            self.service.close_stream(namespace)

    async def _send_events(self, context: grpc.aio.ServicerContext, events: list[Event], max_bytes: int) -> None:
        """A subscription's batch of events, in responses of about `max_bytes` each."""
        for page in pages(events, max_bytes):
            await self._send(context, pb.SubscribeEventsResponse(events=pb.EventBatch(events=page)))

    async def _send(self, context: grpc.aio.ServicerContext, response: pb.SubscribeEventsResponse) -> None:
        """One response of a subscription, its wait on the subscriber counted (`calls.sends`)."""
        with self.calls.sends:
            await context.write(response)

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

    @status.written
    async def Write(  # type: ignore[override]  # the stubs know only the yielding form
        self, request_iterator: AsyncIterator[pb.WriteRequest], context: grpc.aio.ServicerContext
    ) -> None:
        # The requests are read with `read_request`, never through `request_iterator` (see there);
        # the answers are written with `context.write` (writer_rpc.py says why).
        await serve_writer(self.service, context)


def _seq_range(result: AppendResult) -> list[int] | None:
    return [result.seqs[0], result.seqs[-1]] if result.seqs else None
