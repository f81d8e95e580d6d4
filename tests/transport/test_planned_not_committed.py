"""A batch planned into the live fold but never handed to the commit leaves nothing behind.

Planning changes the cached fold and remembers the batch's eventIds before the batch is queued
for commit; a failure between the two (here: taking the fold snapshot that rides with the batch)
must drop the cached session. Otherwise a retry of the same eventIds would be answered from
memory with seqs that were never committed: an acknowledged event that is not in the log.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import SessionLogError, Unavailable
from sessionlog.core.fold import SessionFold
from sessionlog_server.service.loader import SnapshotPolicy
from sessionlog_server.storage.records import StoredSnapshot
from tests.support.events import note
from tests.support.servers import ROOT, ServerThread


@dataclass(frozen=True, slots=True)
class _FailingOnce(SnapshotPolicy):
    """Due after every batch; the first snapshot of the session's fold at `fail_at` events
    fails (a bug in encoding it). Other sessions' snapshots never fail: on PostgreSQL the
    database is shared, and this server's repair sweep may write to other tests' sessions."""

    fail_at: int
    session_id: str
    failures: list[int]

    def stored(self, session_id: str, fold: SessionFold) -> StoredSnapshot:  # type: ignore[override]
        if session_id == self.session_id and fold.next_seq == self.fail_at and not self.failures:
            self.failures.append(fold.next_seq)
            raise RuntimeError("taking the snapshot failed")
        return SnapshotPolicy.stored(session_id, fold)


@pytest.fixture
def failing_snapshot_server(fresh_db: str, sid: str) -> Iterator[ServerThread]:
    with ServerThread(fresh_db) as server:
        server.service.appends.snapshots = _FailingOnce(
            every_events=1, every_bytes=1 << 30, fail_at=2, session_id=sid, failures=[]
        )
        yield server


def test_a_retry_after_a_failure_between_planning_and_commit_is_committed(
    failing_snapshot_server: ServerThread, sid: str
) -> None:
    with SessionLogClient(failing_snapshot_server.target, timeout=10) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        first = {**note(1), "eventId": "first"}
        second = {**note(2), "eventId": "second"}
        assert client.append(sid, lease, [first]).seqs == [0]
        with pytest.raises(SessionLogError):
            client.append(sid, lease, [second])
        assert [e.event_id for e in client.read_events(sid)] == ["first"]
        assert client.append(sid, lease, [second]).seqs == [1]
        assert [(e.seq, e.event_id) for e in client.read_events(sid)] == [(0, "first"), (1, "second")]
        assert client.stats(sid)["events"] == 2


class _FailingCommits:
    """A recorder whose group commits of `session_id` fail (the database went away), each after
    a pause in which the writer's other batches queue up behind the group."""

    def __init__(self, recorder: Any, session_id: str) -> None:
        self._recorder = recorder
        self._session_id = session_id

    def commit_batches(self, batches: list[Any]) -> Any:
        if any(batch.session_id == self._session_id for batch in batches):
            time.sleep(0.3)
            raise Unavailable("STORAGE_UNAVAILABLE", "the database went away")
        return self._recorder.commit_batches(batches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._recorder, name)


def test_a_failed_commit_is_told_once_not_once_more_per_batch_queued_behind_it(fresh_db: str, sid: str) -> None:
    # The stream ended on the first failed acknowledgement; the batches queued behind it were
    # never awaited, and asyncio logged "Future exception was never retrieved", an ERROR line
    # with a traceback, for each of them (57 for one full disk). It logs that when a future is
    # collected, which may be as late as the interpreter's exit: the scenario runs in its own.
    scenario = f"""
import logging
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from tests.support.events import note
from tests.support.servers import ServerThread
from tests.transport.test_planned_not_committed import _FailingCommits
logging.basicConfig(level=logging.WARNING)
with ServerThread({fresh_db!r}) as server:
    committer = server.service.appends.committer
    committer._recorder = _FailingCommits(committer._recorder, {sid!r})
    with SessionLogClient(server.target) as client:
        writer = client.writer({sid!r}, create_if_missing=True, reconnect_attempts=0)
        pending = [writer.append([note(i)]) for i in range(20)]
        assert all(isinstance(future.exception(timeout=30), Unavailable) for future in pending)
print("ran")
"""
    done = subprocess.run([sys.executable, "-c", scenario], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ran"), done.stderr[-2000:]
    never = done.stderr.count("Future exception was never retrieved")
    assert never == 0, f"{never} futures whose failure nobody took"


def test_a_writer_whose_every_reconnect_breaks_again_gives_up_by_its_policy(fresh_db: str, sid: str) -> None:
    # The service grants each reconnect its lease, then fails the re-sent batch's commit and
    # ends the stream: each open renewed the reconnect budget, so the writer tried again
    # without end and the batch never failed. The attempts now count from its last progress.
    with ServerThread(fresh_db) as server:
        committer = server.service.appends.committer
        with SessionLogClient(server.target) as client:
            writer = client.writer(sid, create_if_missing=True, reconnect_attempts=3)
            assert writer.append([note(0)]).result(timeout=30).seqs == [0]  # progress, then the failures
            committer._recorder = _FailingCommits(committer._recorder, sid)
            failed = writer.append([note(1)]).exception(timeout=60)
            assert isinstance(failed, Unavailable), failed
            assert writer.reconnects == 3  # each attempt opened, and its stream broke again

        async def scenario() -> int:
            async with AsyncSessionLogClient(server.target) as aio:
                writer = await aio.writer(f"{sid}-aio", create_if_missing=True, reconnect_attempts=3)
                pending = await writer.append([note(0)])
                assert isinstance(await asyncio.wait_for(asyncio.gather(pending, return_exceptions=True), 60), list)
                assert isinstance(pending.exception(), Unavailable)
                return writer.reconnects

        committer._recorder = _FailingCommits(committer._recorder, f"{sid}-aio")
        assert asyncio.run(scenario()) == 3
