"""Projections (SPEC §5) of a session's log, at its head or at any `at_seq`.

At the head, the live fold answers (model history and stats were maintained incrementally
as events were appended), after waiting for the session's in-flight batches, so a reader
never sees an event that is not yet durable. An older prefix, or a view with crash repair
shown in memory, is folded from the log itself (trusted: it was validated at append).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sessionlog.core.errors import NotFound
from sessionlog.core.events import Event
from sessionlog.core.fold import SessionFold
from sessionlog.core.projections.transcript import TranscriptRow, transcript
from sessionlog.core.repair import commit_closers
from sessionlog_server.service.clock import now_ms

if TYPE_CHECKING:
    from sessionlog_server.service.app import SessionLogService


@dataclass(frozen=True, slots=True)
class Scope:
    """Which prefix to project: up to `at_seq` (None: the head), with repair shown or not."""

    session_id: str
    at_seq: int | None = None
    with_repair: bool = False


@dataclass(slots=True)
class Folded:
    """A fold of the scoped prefix; `events` is filled when the prefix had to be read."""

    fold: SessionFold
    at_seq: int
    events: list[Event] | None


async def fold_scope(service: SessionLogService, scope: Scope, *, need_events: bool = False) -> Folded:
    """The fold of the scoped prefix (the live one when possible)."""
    record = await service.get_session(scope.session_id)
    if record.next_seq == 0:
        if scope.at_seq is not None:
            raise _no_seq(scope, record.next_seq)
        return Folded(SessionFold(), -1, [])
    head = record.next_seq - 1
    if scope.at_seq is not None and scope.at_seq > head:
        raise _no_seq(scope, record.next_seq)
    at_seq = head if scope.at_seq is None else scope.at_seq
    repair = scope.with_repair and not record.lease_live(now_ms())
    if at_seq == head and not need_events and not repair:
        live = await service.live.get(scope.session_id)
        async with live.lock:
            await live.wait_idle()
            if live.valid and live.fold.next_seq - 1 == head:
                return Folded(live.fold, head, None)
    events = await service.reader.read_all(record, at_seq)
    fold = await asyncio.get_running_loop().run_in_executor(None, _replay, events)
    if repair and at_seq == head:
        closers = commit_closers(fold.closers("interrupted"), fold.next_seq, fold.repair_time)
        for event in closers:
            fold.apply(event)
        events = events + closers
    return Folded(fold, at_seq, events)


async def transcript_rows(service: SessionLogService, scope: Scope) -> tuple[list[TranscriptRow], int]:
    """The transcript of the scoped prefix, and the last seq it covers."""
    folded = await fold_scope(service, scope, need_events=True)
    assert folded.events is not None
    return transcript(folded.events), folded.at_seq


def _replay(events: list[Event]) -> SessionFold:
    return SessionFold.replay(events, validate=False)


def _no_seq(scope: Scope, next_seq: int) -> NotFound:
    return NotFound(
        "SEQ_NOT_FOUND",
        f"session {scope.session_id!r} has no seq {scope.at_seq} (next seq is {next_seq})",
        session_id=scope.session_id,
        seq=scope.at_seq,
    )
