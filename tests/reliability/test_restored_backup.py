"""A database restored from a backup, its service started on it, while writers of the original
reconnect to it (deploy/CONFIGURATION.md, Backup and restore).

A backup taken while a writer streams keeps that writer's lease (its token's hash), so once the
service runs on the restored database the writer's reconnect takes its lease again. But the
writer saw events acknowledged after the backup, which the restored log does not hold: going on
from the restored log's next seq would give seqs the writer was told were its events to other
events. The reconnect is refused instead (ACKNOWLEDGED_PAST_LOG), and nothing is appended.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import ExpectedSeqMismatch
from sessionlog_server.storage.migrate import upgrade
from tests.support.events import note
from tests.support.servers import ServerProcess


def online_backup(source: Path, target: Path) -> None:
    """SQLite's online backup of a file the service is writing (what the docs tell operators)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


def restore_over(backup: Path, database: Path) -> None:
    """Put the backup in place of the (stopped) service's file, its old WAL and shm removed."""
    for suffix in ("-wal", "-shm"):
        with_suffix = Path(f"{database}{suffix}")
        if with_suffix.exists():
            os.remove(with_suffix)
    shutil.copyfile(backup, database)


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
