"""The embedded SQLite backend: WAL, `synchronous=FULL`, one writer connection.

SQLite allows one writer at a time, so the service funnels every write through one
connection (the group committer's) and takes the write lock up front with
`BEGIN IMMEDIATE`: a transaction that would upgrade from a read lock later could fail with
SQLITE_BUSY halfway. Readers use their own pooled connections; WAL lets them read while the
writer commits.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import structlog
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import QueuePool

from sessionlog.core import jsonvalue
from sessionlog_server.storage.changes import ChangeFeed, SQLiteChangeFeed
from sessionlog_server.storage.database_file import DatabaseFile
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.rows import EVENT_COLUMNS
from sessionlog_server.storage.sqlite_params import bind_common_types_directly
from sessionlog_server.storage.sqlite_settings import BUSY_TIMEOUT_MS, SYNCHRONOUS_MODES
from sessionlog_server.storage.writer_turn import WriterTurn

log = structlog.get_logger("sessionlog.sqlite")


CHECKPOINT_EVERY_S = 0.5
"""How often the checkpointer copies the WAL into the database file (off the commit path)."""

WAL_RESTART_FRAMES = 4096
"""A WAL this long (16 MB of 4 KB pages) after a passive checkpoint is restarted: the next
commit writes it again from its start. A passive checkpoint never restarts the WAL while
commits keep coming (one always lands before the copy is complete), so under a steady load
the file grew without bound, 217 MB in 15 s of 16 streaming writers, and each commit's fsync
paid for extending it."""

RESTART_WAIT_MS = 50
"""How long the restart waits for readers still reading frames of the WAL: it holds the
writers' turn meanwhile, so a long read (a whole history) makes it give up until the next
round instead of holding up commits."""


def _sqlite_engine(url: str, *, synchronous: str, busy_timeout_ms: int, immediate: bool, pool_size: int) -> Engine:
    bind_common_types_directly()
    engine = create_engine(
        url,
        poolclass=QueuePool,
        pool_size=pool_size,
        max_overflow=0 if immediate else pool_size,
        connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000},
        json_serializer=jsonvalue.dumps,
        json_deserializer=jsonvalue.loads,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN is ours (IMMEDIATE for the writer).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        if immediate:
            # A commit that crosses the WAL's auto-checkpoint size would copy the WAL into the
            # database (and fsync it) before it returns: a latency spike every ~1000 pages.
            # The checkpointer thread does that work instead (SQLiteEventRecorder).
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(SQLiteEventRecorder.begin_write_sql if immediate else "BEGIN")

    return engine


class SQLiteEventRecorder(EventRecorder):
    """EventRecorder on a SQLite file."""

    advance_sql = (
        "UPDATE sessions SET next_seq = ?, last_time = ?, open_turn = ?, lease_expires_at = ? "
        "WHERE id = ? AND writer_id = ? AND epoch = ? AND next_seq = ?"
    )
    # `?N` is the Nth of the same parameters (`advance_params`): open_turn, the third, is compared.
    advance_keeping_turn_sql = (
        "UPDATE sessions SET next_seq = ?1, last_time = ?2, lease_expires_at = ?4 "
        "WHERE id = ?5 AND writer_id = ?6 AND epoch = ?7 AND next_seq = ?8 AND open_turn = ?3"
    )
    placeholder = "?"
    begin_write_sql = "BEGIN IMMEDIATE"
    # data arrives as UTF-8 bytes (storage/records.py StoredData): the CAST stores them as TEXT.
    insert_events_sql = (
        f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, CAST(? AS TEXT), ?, ?, ?, ?, ?, ?, ?)"
    )

    def __init__(self, url: str, *, synchronous: str = "FULL", busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        if synchronous.upper() not in SYNCHRONOUS_MODES:
            raise ValueError(f"unknown SQLite synchronous mode {synchronous!r}")
        if busy_timeout_ms <= 0:
            raise ValueError(f"the SQLite busy timeout must be positive, not {busy_timeout_ms} ms")
        self.busy_timeout_ms = busy_timeout_ms
        # Two writer connections: the group committer keeps one (storage/driver.py), other writes
        # (leases, session creation) take the other; BEGIN IMMEDIATE serialises them.
        mode = synchronous.upper()
        write = _sqlite_engine(url, synchronous=mode, busy_timeout_ms=busy_timeout_ms, immediate=True, pool_size=2)
        read = _sqlite_engine(url, synchronous=mode, busy_timeout_ms=busy_timeout_ms, immediate=False, pool_size=4)
        path = write.url.database
        on_disk = bool(path) and path != ":memory:"
        self._writer_turn = WriterTurn(path, busy_timeout_ms / 1000) if on_disk and path else None
        self._file = DatabaseFile(path) if on_disk and path else None
        super().__init__(write, read)
        self._checkpoints = threading.Event()
        threading.Thread(target=self._checkpoint_loop, daemon=True, name="sessionlog-checkpoint").start()

    def _checkpoint_loop(self) -> None:
        """Checkpoint every CHECKPOINT_EVERY_S, on a connection of its own (`checkpoint`)."""
        while not self._checkpoints.wait(CHECKPOINT_EVERY_S):
            try:
                self.checkpoint()
            except Exception as exc:
                log.debug("checkpoint skipped", error=str(exc))

    def checkpoint(self) -> bool:
        """Copy the WAL into the database file, and restart a WAL that has grown long; True if
        it was restarted (the next commit writes the WAL from its start).

        The PASSIVE checkpoint takes no lock writers wait for and copies nearly everything. A
        WAL of WAL_RESTART_FRAMES or more is then restarted (a RESTART checkpoint) while this
        process holds the writers' turn: what is left to copy is what committed during the
        passive pass, and no writer of any worker is in a transaction meanwhile, so commits
        wait for that short copy and the database file's fsync, not for SQLite's busy handler.
        """
        raw = self.read_engine.raw_connection()  # autocommit: no read transaction of our own
        try:
            cursor = raw.cursor()
            _busy, frames, _copied = cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if frames < WAL_RESTART_FRAMES or self._checkpoints.is_set():  # closing: leave the turn alone
                return False
            with self._turn():
                cursor.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")
                try:
                    busy, _frames, _copied = cursor.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                finally:
                    cursor.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            return not busy
        finally:
            raw.close()

    def close(self) -> None:
        self._checkpoints.set()
        super().close()
        if self._writer_turn is not None:
            self._writer_turn.close()

    def storage_lost(self) -> str | None:
        """Why this process can write no more until it is restarted (`DatabaseFile`), or None."""
        return self._file.problem() if self._file is not None else None

    def _turn(self) -> AbstractContextManager[None]:
        """The processes' turn to write this file (storage/writer_turn.py), once the file is
        known to be the one the service opened (`DatabaseFile`)."""
        if self._file is not None:
            self._file.check()
        return self._writer_turn.held() if self._writer_turn is not None else nullcontext()

    def shares_database(self, workers: int) -> bool:
        """Only with `serve --workers`: an embedded file has one service otherwise."""
        return workers != 1

    def change_feed(self) -> ChangeFeed:
        return SQLiteChangeFeed(self.read_engine)
