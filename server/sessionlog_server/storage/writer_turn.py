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

The wait is bounded, as SQLite's busy handler is: a worker whose writer hangs while holding
its turn (a stopped process) would otherwise keep every other worker's writes waiting for as
long as it hangs, with no error to their clients. A blocking `flock` cannot be given a
timeout, and asking without blocking every 0.5 ms lost the handover (the process letting go
took the turn again before the poller looked: 2,000 slow writers, two workers, ack p99
315-491 ms against 99-107 ms blocking). So a turn not free at once is waited for by a helper
thread blocked in `flock`, which hands it to the writer; the writer waits for that at most
`wait_s`, then fails with STORAGE_UNAVAILABLE (nothing was written). A turn the helper gets
after its writer gave up is let go at once, or handed to the next writer already waiting.
"""

from __future__ import annotations

import fcntl
import os
import threading

from sessionlog.core.errors import Unavailable


class WriterTurn:
    """An exclusive lock shared by the processes writing one SQLite file (and by the threads
    of one process: a `flock` is held per open file, so a thread lock comes first).

    Held by a `with` block (`held()`: the turn itself), which waits at most `wait_s` for it;
    past that it raises Unavailable. Compiled (setup.py): every write transaction takes it."""

    def __init__(self, database_path: str, wait_s: float) -> None:
        self.path = f"{database_path}-writer.lock"
        self.wait_s = wait_s
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._held_fd = -1
        """The lock file's descriptor while a `with` block holds the turn."""
        self._state_lock = threading.RLock()
        self._state = threading.Condition(self._state_lock)
        """Guards the fields below, shared with the helper thread. A `with` takes the lock
        underneath (`_state_lock`; an RLock, as a Condition's own is), whose enter and exit are
        C, where the Condition's are Python calls."""
        self._asking = False
        """The helper is (to be) blocked in `flock` for the turn."""
        self._waiting = False
        """A writer waits for the helper to hand it the turn."""
        self._granted = False
        """The helper got the turn for the waiting writer."""
        self._closed = False
        self._helper: threading.Thread | None = None

    def held(self) -> WriterTurn:
        """The turn, to hold for a `with` block (a write transaction, from BEGIN to COMMIT)."""
        return self

    def __enter__(self) -> None:
        """Take the turn: this process's thread lock first, then the file's (`_take`)."""
        if not self._threads.acquire(timeout=self.wait_s):
            raise self._timed_out("another thread of this process")
        try:
            fd = self._open()
            self._take(fd)
        except BaseException:
            self._threads.release()
            raise
        self._held_fd = fd

    def __exit__(self, *exc: object) -> None:
        """Let the turn go: the file's, then the thread lock."""
        try:
            fcntl.flock(self._held_fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        """Close the lock file; a helper still blocked in `flock` closes it once it returns."""
        with self._threads, self._state:
            self._closed = True
            self._state.notify_all()
            if self._fd is not None and not self._asking:
                os.close(self._fd)
                self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    def _take(self, fd: int) -> None:
        """Take the file's turn: at once if it is free, else from the helper, within `wait_s`."""
        with self._state_lock:
            if not self._asking:  # with the helper blocked on it, the turn is not free
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    pass
                self._asking = True
                self._start_helper()
                self._state.notify_all()
            self._waiting = True
            try:
                granted = self._state.wait_for(lambda: self._granted, self.wait_s)
            finally:
                self._waiting = False
            if not granted:
                raise self._timed_out("another process writing the file")
            self._granted = False

    def _start_helper(self) -> None:
        if self._helper is None or not self._helper.is_alive():
            self._helper = threading.Thread(target=self._wait_for_turns, name="sessionlog-writer-turn", daemon=True)
            self._helper.start()

    def _wait_for_turns(self) -> None:
        """The helper thread: block in `flock` whenever a writer asks, and hand the turn over."""
        while True:
            with self._state:
                self._state.wait_for(lambda: self._asking or self._closed)
                if not self._asking:
                    return  # closed
                fd = self._fd
            assert fd is not None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # not seen; the waiting writer times out, the next one asks again
                with self._state:
                    self._asking = False
                continue
            with self._state:
                self._asking = False
                if self._waiting:
                    self._granted = True
                    self._state.notify_all()
                else:  # the writer gave up meanwhile
                    fcntl.flock(fd, fcntl.LOCK_UN)
                if self._closed:
                    os.close(fd)
                    self._fd = None
                    return

    def _timed_out(self, holder: str) -> Unavailable:
        return Unavailable(
            "STORAGE_UNAVAILABLE",
            f"waited {self.wait_s:g} s for the turn to write the SQLite file, held by {holder} "
            "(a stopped or hung worker?); nothing was written, retry",
        )


__all__ = ["WriterTurn"]
