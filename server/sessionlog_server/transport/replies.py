"""Service values as the API's response messages: a session, a lease, a header report, a
resume, a page of events. Shared by the servicer and the writer stream's transport
(`writer_rpc`); no decisions here, only field-for-field copies and the API's conventions (an
unset `at_seq`, ids in their public form)."""

from __future__ import annotations

from sessionlog import convert
from sessionlog.core import jsonvalue
from sessionlog.core.events import Event
from sessionlog.v1 import event_pb2, session_pb2
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service import access, lifecycle
from sessionlog_server.service.clock import now_ms
from sessionlog_server.service.headers import HeaderReport
from sessionlog_server.storage.records import SessionRecord


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
