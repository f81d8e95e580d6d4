"""Whose turn it is to write a SQLite file: an exclusive `flock` on a file beside the database.

SQLite lets one connection write at a time, and a connection that finds the write lock taken
waits in its busy handler, which sleeps 1, 2, 5, 10, ... up to 100 ms between tries. With
`serve --workers` every worker commits to the same file, so a commit that found the other
worker's transaction in progress slept for longer than that transaction took, and slept
again if the other worker had started its next one meanwhile: with 2,000 slow writers over
two workers, ack p50 was twice one worker's. The kernel wakes a process waiting for a `flock`
as soon as the holder lets go, so the workers hand the file to each other without sleeping.
SQLite's own lock stays the guard: the turn only decides who asks for it first, and a writer
that does not take turns (another program on the file) still gets in through the busy handler.

The wait is not bounded: a worker whose writer hangs while holding its turn (a stopped
process) keeps the others waiting until it goes on or dies (the kernel drops a dead process's
lock, and `serve` starts the worker again), where the busy handler failed their commits after
30 s. Asking without blocking, every 0.5 ms up to a deadline, was measured and lost the
handover: the process letting go took the turn again before the poller looked (2,000 slow
writers, two workers: ack p99 315-491 ms against 99-107 ms blocking).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class WriterTurn:
    """An exclusive lock shared by the processes writing one SQLite file (and by the threads
    of one process: a `flock` is held per open file, so a thread lock comes first)."""

    def __init__(self, database_path: str) -> None:
        self.path = f"{database_path}-writer.lock"
        self._threads = threading.Lock()
        self._fd: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the turn for the block (a write transaction, from BEGIN to COMMIT)."""
        with self._threads:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._threads:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd


__all__ = ["WriterTurn"]
