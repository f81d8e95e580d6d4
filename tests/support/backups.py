"""Databases backed up while their service runs and restored later, as deploy/CONFIGURATION.md
(Backup and restore) tells operators to: SQLite's online backup put back in place of the file,
or `pg_dump` of the live PostgreSQL database restored into a new one (`pg_restore`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sessionlog_server.storage.migrate import upgrade
from tests.conftest import scratch_pg


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


class Restorable:
    """A migrated database of its own (`url`), backed up while its service runs (`backup`) and
    restored once the service is stopped (`restore`, which says where the restored copy is)."""

    def __init__(self, url: str, work: Path, scratch: contextlib.ExitStack) -> None:
        self.url = url
        self._dump = work / "backup"
        self._scratch = scratch

    def backup(self) -> None:
        if self.url.startswith("sqlite"):
            online_backup(Path(self.url.removeprefix("sqlite:///")), self._dump)
        else:
            subprocess.run(["pg_dump", "--format=custom", f"--file={self._dump}", self.url], check=True)

    def restore(self) -> str:
        """The restored database's URL: the same SQLite file, or a new PostgreSQL database."""
        if self.url.startswith("sqlite"):
            restore_over(self._dump, Path(self.url.removeprefix("sqlite:///")))
            return self.url
        restored = self._scratch.enter_context(scratch_pg("sessionlog_restored"))
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={restored}", str(self._dump)], check=True)
        return restored


@contextlib.contextmanager
def restorable(backend: str, work: Path) -> Iterator[Restorable]:
    """A `Restorable` on `backend` ("sqlite" or "postgresql"); PostgreSQL databases it made are
    dropped when the block ends."""
    with contextlib.ExitStack() as scratch:
        if backend == "sqlite":
            url = f"sqlite:///{work / 'sessionlog.db'}"
        else:
            url = scratch.enter_context(scratch_pg("sessionlog_backedup"))
        upgrade(url)
        yield Restorable(url, work, scratch)
