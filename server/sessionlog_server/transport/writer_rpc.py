"""The `Write` RPC: one writer stream (service/writer_stream.py) over a gRPC call.

The call's first message must be `open`, in time; then the requests are read off the call as
they come (`_pump`, a task of its own, so batches are planned without waiting for commits) and
the stream's acknowledgements are written back as they become durable (`_answer`).

Coroutines only, and responses sent with `context.write`: every streamed event passes through
here, and mypyc compiles coroutines but not async generators (docs/architecture/compiled-build.md).
Yielded, each acknowledgement also went up through a generator per layer (the stream's, this
RPC's, the error mapping's, the authentication's) before gRPC sent it, and gRPC kept the last
one until the next.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from sessionlog.core.errors import ValidationError
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service import access
from sessionlog_server.service.app import SessionLogService
from sessionlog_server.service.writer_stream import HeaderAcked, Opened, OpenRequest, Outcome, WriterStream
from sessionlog_server.transport.decoding import read_request
from sessionlog_server.transport.replies import header_report_to_pb, lease_to_pb, resume_to_pb
from sessionlog_server.transport.request_fields import decode_events, decode_header, optional_field
from sessionlog_server.transport.status import note


async def serve_writer(service: SessionLogService, context: grpc.aio.ServicerContext) -> None:
    """Serve one `Write` call to its end; errors are raised for the caller to map to a status.

    A stream counts against the limit from its first byte, and must open in time: a client that
    opens streams and sends nothing cannot hold slots for free."""
    namespace = service.open_stream()
    try:
        opened = await _first_request(service, context)
        await _serve_opened(service, opened, context)
    finally:
        service.close_stream(namespace)


async def _first_request(service: SessionLogService, context: grpc.aio.ServicerContext) -> pb.OpenWriter:
    """The call's `open`, which must come first and within `writer_open_timeout_s`."""
    timeout = service.settings.writer_open_timeout_s
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
        raise ValidationError("WRITER_NOT_OPENED", "the first message on a writer stream must be `open`", field="open")
    opened: pb.OpenWriter = first.open
    return opened


def _open_request(opened: pb.OpenWriter) -> OpenRequest:
    return OpenRequest(
        opened.session_id,
        opened.writer_id or None,
        takeover=opened.takeover,
        resume=opened.resume,
        create_if_missing=opened.create_if_missing,
        lease_token=opened.lease_token,
        acknowledged_next_seq=optional_field(opened, "acknowledged_next_seq"),
        request_id=opened.request_id,
    )


async def _serve_opened(service: SessionLogService, opened: pb.OpenWriter, context: grpc.aio.ServicerContext) -> None:
    """The stream after its `open`: take the lease, answer until the stream ends, settle the lease."""
    stream = WriterStream(service)
    granted = await _open_unless_abandoned(stream, _open_request(opened), context)
    holder = granted.holder
    note(session_id=access.public_id(holder.session_id), writer_id=holder.writer_id, epoch=holder.epoch)
    pump = asyncio.ensure_future(_pump(service, context, stream))
    # However the answers end (the stream's end, its error, the call cancelled), the pump stops
    # and the lease is given back or left to lapse; the exception is kept by name and raised
    # after that await (no await while handling an exception: compiled-build.md).
    failure: BaseException | None = None
    try:
        await _answer(stream, granted, context)
    except BaseException as exc:
        failure = exc
    pump.cancel()
    note(seqs=None if stream.first_seq is None else [stream.first_seq, stream.last_seq])
    await stream.finish()
    if failure is not None:
        raise failure


async def _open_unless_abandoned(
    stream: WriterStream, request: OpenRequest, context: grpc.aio.ServicerContext
) -> Opened:
    """`stream.open`, unless the writer gave the call up first; its lease given back if it gave
    it up while the lease was being granted.

    A writer gives an open up at its client's timeout, and while the service hangs (stopped,
    or starved) its `open` and its cancel reach the service together. Taken, that lease held
    the session for a TTL under a token nobody learnt, and the writer's next open (once the
    service was back) was refused WRITER_HELD by its own abandoned try. The grant runs on
    when the call is cancelled meanwhile (its commit is in the writer thread), so it is let
    finish and then released: its `opened` was never written, so no writer holds its token.
    """
    if context.cancelled():
        raise asyncio.CancelledError
    opening = asyncio.ensure_future(stream.open(request))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        pass  # awaited below, outside the handler (compiled-build.md)
    with contextlib.suppress(Exception):
        await opening  # a refusal has nobody to go to
    await stream.withdraw()
    raise asyncio.CancelledError


async def _answer(stream: WriterStream, granted: Opened, context: grpc.aio.ServicerContext) -> None:
    """Write `opened`, then each acknowledgement as the stream has it, until the stream ends."""
    welcome = pb.WriterOpened(
        lease=lease_to_pb(granted.record), next_seq=granted.next_seq, lease_token=granted.lease_token
    )
    if granted.resumed is not None:
        welcome.resumed.CopyFrom(resume_to_pb(granted.resumed))
    await context.write(pb.WriteResponse(opened=welcome))
    while True:
        outcome = await stream.next_outcome()
        if outcome is None:
            return
        await context.write(_response(outcome))
        del outcome  # a quiet stream keeps nothing of its last answer


def _response(outcome: Outcome) -> pb.WriteResponse:
    if isinstance(outcome, HeaderAcked):
        return pb.WriteResponse(
            header_ack=pb.HeaderAck(batch_id=outcome.batch_id, result=header_report_to_pb(outcome.report))
        )
    batch_acks = [pb.BatchAck(batch_id=b, seqs=r.seqs, next_seq=r.next_seq) for b, r in outcome.acks]
    if len(batch_acks) == 1:
        return pb.WriteResponse(ack=batch_acks[0])
    return pb.WriteResponse(acks=pb.BatchAcks(acks=batch_acks))  # ready together: one message


async def _pump(service: SessionLogService, context: grpc.aio.ServicerContext, stream: WriterStream) -> None:
    """Hand requests to the stream as they arrive, without waiting for commits."""
    try:
        while True:
            request = await read_request(context)
            if request is None:
                # The request stream ended without `close`. gRPC reports a writer process that
                # died this way too, so it cannot count as a release: the lease is left to lapse.
                stream.requests_ended()
                return
            if await _hand_over(service, request, stream):
                return
            # While the stream waits for its next request, nothing of this one (its payload,
            # on the wire and decoded) stays alive: an idle agent's stream costs no memory.
            del request
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        stream.failed(exc)


async def _hand_over(service: SessionLogService, request: pb.WriteRequest, stream: WriterStream) -> bool:
    """Give one request to the stream; True when it was `close`."""
    kind = request.WhichOneof("kind")
    if kind == "batch" or kind == "batches":
        for batch in [request.batch] if kind == "batch" else request.batches.batches[:]:
            decoded = decode_events(batch.events, service.limits)
            await stream.batch(batch.batch_id, optional_field(batch, "expected_next_seq"), decoded)
    elif kind == "header":
        header = decode_header(request.header.header_json, service.limits)
        await stream.header(request.header.batch_id, header)
    elif kind == "close":
        stream.close()
        return True
    elif kind == "open":
        raise ValidationError("WRITER_ALREADY_OPEN", "`open` may only be the first message", field="open")
    else:  # None: nothing set, or only a kind of newer protos (an unknown field to this service)
        raise ValidationError(
            "WRITE_REQUEST_EMPTY",
            "a writer message must set one of batch, batches, header or close (this one sets none this service knows)",
            field="kind",
        )
    return False
