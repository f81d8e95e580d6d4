"""Whether a SQLite database's path still names the file the service opened (`DatabaseFile`).

Compiled (setup.py): every write transaction on SQLite asks it first.
"""

from __future__ import annotations

import os

import structlog

from sessionlog.core.errors import Unavailable

log = structlog.get_logger("sessionlog.sqlite")


class DatabaseFile:
    """Whether the database path still names the file the service has open.

    SQLite goes on writing to the file it opened whatever becomes of its name: deleted (`rm`
    of the database, a clean-up job) or replaced (a backup copied over it), its commits
    succeed into a file no one will open again, and the next start finds none of them. Every
    write transaction asks first (one `stat`, a few microseconds against a commit's fsync) and
    is refused with STORAGE_UNAVAILABLE, writing nothing, once the name points elsewhere.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity = self._stat()
        """(device, inode) of the file when the service opened it (None: not created yet; then
        of the file the first write finds)."""
        self._lost = False

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino

    def problem(self) -> str | None:
        """Why writes are refused for good (the path no longer names the file the service
        opened), or None."""
        identity = self._stat()
        if self._identity is None and not self._lost:
            self._identity = identity
            return None
        if identity == self._identity and not self._lost:
            return None
        if not self._lost:
            self._lost = True  # for good: a file put back at the path is not the one opened
            log.error("the database file was deleted or replaced; writes are refused", path=self.path)
        return (
            f"the database file {self.path} was deleted or replaced while the service ran; nothing "
            "was written: restart the service to open the file its path names now"
        )

    def check(self) -> None:
        """Raise Unavailable if the path no longer names the file the service opened."""
        problem = self.problem()
        if problem is not None:
            raise Unavailable("STORAGE_UNAVAILABLE", problem)


__all__ = ["DatabaseFile"]
