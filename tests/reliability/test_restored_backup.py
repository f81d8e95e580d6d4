"""A database restored from a backup, its service started on it, while writers of the original
reconnect to it (deploy/CONFIGURATION.md, Backup and restore).

A backup taken while a writer writes keeps that writer's lease (its token's hash), so once the
service runs on the restored database the writer's token holds its lease again. But the writer
saw events acknowledged after the backup, which the restored log does not hold: going on from
the restored log's next seq would give seqs the writer was told were its events to other
events. The writer says where its acknowledgements end (a stream's reconnect in its `open`, a
unary writer in each append), and is refused instead (ACKNOWLEDGED_PAST_LOG): nothing is
appended, and its lease is released.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.procs import free_port
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import ExpectedSeqMismatch, OwnershipLost, SessionLogError
from sessionlog_server.storage.migrate import upgrade
from tests.conftest import BACKENDS
from tests.support.backups import Restorable, online_backup, restorable, restore_over
from tests.support.events import note
from tests.support.servers import ServerProcess, ServerThread

LEASE_TTL_MS = 60_000
"""Long enough that the writer's lease in the backup is still live once it is restored."""


def test_a_writer_that_saw_acks_past_the_restored_log_is_refused(tmp_path: Path, sid: str) -> None:
    database, backup = tmp_path / "sessionlog.db", tmp_path / "backup.db"
    upgrade(f"sqlite:///{database}")
    server = ServerProcess(f"sqlite:///{database}").start()
    try:
        with SessionLogClient(server.target) as client:
            writer = client.writer(sid, create_if_missing=True)
            writer.append([note(1), note(2)]).result()
            online_backup(database, backup)
            acknowledged = writer.append([note(3), note(4)]).result()  # not in the backup
            server.terminate()  # the writer's stream ends SHUTTING_DOWN, its lease kept
            restore_over(backup, database)
            server.start()
            restored_next_seq = client.get_session(sid).next_seq
            assert restored_next_seq < acknowledged.next_seq

            with pytest.raises(ExpectedSeqMismatch) as refused:
                writer.append([note(5)]).result()
            # The writer reconnects on its own once its stream ended, so the refusal may have
            # come before this append: then it is raised as the writer's earlier failure.
            failure = refused.value.__cause__ or refused.value
            assert isinstance(failure, ExpectedSeqMismatch)
            assert failure.reason == "ACKNOWLEDGED_PAST_LOG"
            assert failure.metadata["next_seq"] == str(restored_next_seq)
            assert failure.metadata["acknowledged_next_seq"] == str(acknowledged.next_seq)
            assert [e.data for e in client.read_events(sid) if e.type == "test/note"] == [{"n": 1}, {"n": 2}]
            writer.close()

            # The refused writer's lease was given back: a deliberate resume goes on at once.
            with client.writer(sid, resume=True) as again:
                again.append([note(6)]).result()
    finally:
        server.kill()


# --- unary writers (AcquireLease, then AppendEvents) ----------------------------------------


class Service:
    """A service on a `Restorable` database, restarted on its restored copy at the same address
    (so the writers' clients reconnect to it as to the original)."""

    def __init__(self, db: Restorable) -> None:
        self.db = db
        self.target = f"127.0.0.1:{free_port()}"  # the restored copy's server binds it again
        self.server = ServerThread(db.url, listen_override=self.target, lease_ttl_ms=LEASE_TTL_MS)

    def restore(self) -> None:
        """Stop the service, restore the backup, and start the service on the restored copy."""
        self.server.stop()
        restored = self.db.restore()
        self.server = ServerThread(restored, listen_override=self.target, lease_ttl_ms=LEASE_TTL_MS)

    def stop(self) -> None:
        self.server.stop()


def notes(client: SessionLogClient, sid: str) -> list[int]:
    return [e.data["n"] for e in client.read_events(sid) if e.type == "test/note"]


def refusal(error: SessionLogError, *, acknowledged_next_seq: int, next_seq: int) -> None:
    """`error` is the restored database's refusal, naming where the writer's acknowledgements
    end and where the log does."""
    assert isinstance(error, ExpectedSeqMismatch)
    assert error.reason == "ACKNOWLEDGED_PAST_LOG"
    assert error.metadata["acknowledged_next_seq"] == str(acknowledged_next_seq)
    assert error.metadata["next_seq"] == str(next_seq)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_unary_writer_that_saw_acks_past_the_restored_log_is_refused(backend: str, tmp_path: Path, sid: str) -> None:
    """The writer's next append, under the lease the restored database still holds, is refused:
    nothing is appended, the writer is done (its close quiet), and its lease was given back."""
    with restorable(backend, tmp_path) as db:
        service = Service(db)
        try:
            with SessionLogClient(service.target) as client:
                client.create_session(sid)
                writer = client.lease_writer(sid)
                writer.append([note(1), note(2)])
                db.backup()
                acknowledged = writer.append([note(3), note(4)])  # not in the backup
                service.restore()
                restored_next_seq = client.get_session(sid).next_seq
                assert restored_next_seq < acknowledged.next_seq

                with pytest.raises(ExpectedSeqMismatch) as refused:
                    writer.append([note(5)])
                refusal(refused.value, acknowledged_next_seq=acknowledged.next_seq, next_seq=restored_next_seq)
                assert notes(client, sid) == [1, 2]
                with pytest.raises(ExpectedSeqMismatch):  # the writer is done: told again, not sent
                    writer.append([note(6)])
                writer.close()  # quiet: there is no lease of its own left to give back

                # The lease was given back: another writer takes it at once, without takeover.
                with client.lease_writer(sid) as again:
                    again.append([note(7)])
                assert notes(client, sid) == [1, 2, 7]
        finally:
            service.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_older_unary_writer_goes_on_where_the_restored_log_ends(backend: str, tmp_path: Path, sid: str) -> None:
    """A writer that says nothing of its acknowledgements (an older client, or one that never
    saw an append of this lease acknowledged) appends at the restored log's next seq, as before;
    the asyncio client that saw acknowledgements past the log is refused."""

    async def scenario(service: Service) -> None:
        async with AsyncSessionLogClient(service.target) as client:
            await client.create_session(sid)
            lease = await client.acquire_lease(sid)
            await client.append(sid, lease, [note(1)])
            service.db.backup()
            acknowledged = await client.append(sid, lease, [note(2), note(3)])  # not in the backup
            service.restore()
            restored_next_seq = (await client.get_session(sid)).next_seq

            with SessionLogClient(service.target) as older:  # knows nothing of the lease's appends
                landed = older.append(sid, lease, [note(4)])
                assert landed.seqs == [restored_next_seq]
                with pytest.raises(ExpectedSeqMismatch) as refused:
                    await client.append(sid, lease, [note(5)])
                refusal(refused.value, acknowledged_next_seq=acknowledged.next_seq, next_seq=landed.next_seq)
                assert notes(older, sid) == [1, 4]
                with pytest.raises(OwnershipLost):  # the refusal released the lease
                    older.append(sid, lease, [note(6)])

    with restorable(backend, tmp_path) as db:
        service = Service(db)
        try:
            asyncio.run(scenario(service))
        finally:
            service.stop()
