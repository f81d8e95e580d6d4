"""Request-header reports (SPEC §6): the service, not the harness, decides whether and why to log.

The decision is made under the session's lock against the live fold, after every batch the
writer sent before the report, so the reason is decided on exactly the log the header will
follow. A logged header goes through the same plan-and-commit path as any batch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sessionlog.core import jsonvalue
from sessionlog.core.events import NewEvent
from sessionlog.core.headers import changed_fields, check_header
from sessionlog.core.vocabulary import REQUEST_HEADER
from sessionlog_server.service import access

if TYPE_CHECKING:
    from sessionlog_server.service.app import SessionLogService
    from sessionlog_server.service.leases import LeaseHolder
    from sessionlog_server.service.live import LiveSession


@dataclass(frozen=True, slots=True)
class HeaderReport:
    """The outcome of a report: the reason (None: nothing logged) and the header's seq."""

    reason: str | None
    starts_series: bool
    header_seq: int | None
    changed_fields: list[str]

    @property
    def appended(self) -> bool:
        return self.reason is not None


def reported_first_of_lease(live: LiveSession) -> bool:
    """Whether a header reported now is the first of the current writer lease (SPEC §6
    `resume`): none in the log since the lease began. The beginning is kept in the sessions row
    (`lease_since_seq`), and a holder taking its own lease again keeps it, so a writer that
    reconnects, even to a restarted service, goes on in the same lease. A header planned but
    not yet durable counts (the fold has it; a failed commit reloads the session)."""
    latest = live.fold.latest_header
    return latest is None or latest.seq < (live.record.lease_since_seq or 0)


async def report_header(service: SessionLogService, holder: LeaseHolder, header: dict[str, Any]) -> HeaderReport:
    """A unary report (`ReportRequestHeader`), decided on the log as it stands.

    A writer stream's fold is current (its lease was granted here, and a grant anywhere else
    fences it), but a unary writer's calls may reach any instance: where other processes write
    the database, the fold is brought to the session's row first. Decided on a stale fold, a
    header equal to an outdated latest one was answered as unchanged and never logged.
    """
    if service.shares_database:
        await service.leases.refresh(holder)
    return await (await start_header_report(service, holder, header))


async def start_header_report(
    service: SessionLogService, holder: LeaseHolder, header: dict[str, Any]
) -> asyncio.Future[HeaderReport]:
    """Decide now (in order with the writer's batches); the future resolves once durable."""
    access.require_write("reporting a request header")
    access.check_namespace(holder.session_id, holder.namespace)
    writer_id, epoch = holder.writer_id, holder.epoch
    live = await service.live.get(holder.session_id)
    async with live.lock:
        service.appends.check_writer(live, writer_id, epoch)
        decision = live.fold.decide_header(header, first_of_lease=reported_first_of_lease(live))
        done: asyncio.Future[HeaderReport] = asyncio.get_running_loop().create_future()
        if decision.data_to_append is None:
            latest = live.fold.latest_header
            done.set_result(HeaderReport(None, False, latest.seq if latest else None, []))
            return done
        # A logged header is an event the writer appends: it spends the namespace's rate as a
        # batch's events do (a report that logs nothing costs nothing), and gets it back as a
        # batch does when planning refuses it.
        with service.appends.rate_limiter.spending(live.record.namespace, 1) as charge:
            event = NewEvent(type=REQUEST_HEADER, data=decision.data_to_append)
            committed = service.appends.plan_and_commit(live, writer_id, epoch, [event], charge=charge)

    async def finish() -> HeaderReport:
        result = await committed
        return HeaderReport(decision.reason, decision.starts_series, result.seqs[0], decision.changed_fields)

    return asyncio.ensure_future(finish())


async def replayed_header_report(
    service: SessionLogService, holder: LeaseHolder, header: dict[str, Any], seq: int
) -> tuple[HeaderReport, bool]:
    """A report re-sent after a reconnect, answered from the log where its first sending was
    decided: the event at `seq` (the first one the writer did not see acknowledged, followed by
    more of its own) is this header logged, or the report logged nothing. True when it was
    logged there (the next re-sent request then stands after it). The answer is the lost one:
    its `changed_fields` are what the header changed from the one logged before it.

    Decided again instead, a report that was a change when it was sent is decided against the
    header the later reports left: with A -> B -> A pending, B and A were logged a second time,
    and the request at those seqs named a model no call used there.
    """
    check_header(header)
    record = await service.reader.session(holder.session_id)
    events = await service.reader.read(record, seq, seq, 1)
    event = events[0] if events else None
    before = (await service.loader.fold_at(record, seq - 1)).fold.latest_header if seq > 0 else None
    if event is not None and event.type == REQUEST_HEADER:
        logged = event.data.get("header")
        if jsonvalue.canonical(logged) == jsonvalue.canonical(header):
            reason = event.data.get("reason")
            fields = changed_fields(before.header, header) if before is not None else []
            report = HeaderReport(
                reason if isinstance(reason, str) else None, event.data.get("startsSeries") is True, seq, fields
            )
            return report, True
    return HeaderReport(None, False, before.seq if before else None, []), False
