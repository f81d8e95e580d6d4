"""The SQLite WAL stays bounded under a steady stream of commits (storage/sqlite.py).

A passive checkpoint never restarts the WAL while commits keep landing, so the file grew by
every commit's pages for as long as the load lasted; the checkpointer now restarts a long WAL
while it holds the writers' turn."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from sessionlog.core.events import APPEND, Event
from sessionlog_server.storage import sqlite as sqlite_storage
from sessionlog_server.storage.migrate import upgrade
from tests.support.records import new_session, pending_batch

DATA = {"message": {"role": "user", "content": "y" * 2000}}


def test_the_wal_is_restarted_while_commits_keep_coming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_storage, "WAL_RESTART_FRAMES", 64)  # 256 KB instead of 16 MB
    path = tmp_path / "wal.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    recorder = sqlite_storage.SQLiteEventRecorder(url)
    now = int(time.time() * 1000)
    recorder.create_session(new_session("s"))
    lease = recorder.acquire_lease("s", "w", takeover=False, now=now, ttl_ms=10**9, token_hash="h")
    commits = 1500  # ~7 pages each: ~40 MB through the WAL
    writing = threading.Event()
    largest = 0
    restarted = 0
    outcomes: list[object] = []

    def write() -> None:
        writing.set()
        for seq in range(commits):
            event = Event(seq, now, "user/message", DATA, surface_op=APPEND)
            outcomes.extend(recorder.commit_batches([pending_batch(lease, [event], lease_expires_at=now + 10**9)]))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        writing.wait(5)
        while writer.is_alive():
            restarted += recorder.checkpoint()
            largest = max(largest, os.path.getsize(f"{path}-wal"))
            time.sleep(0.02)
        writer.join()
        assert outcomes == [None] * commits  # every commit went in, restarts or not
        assert len(recorder.read_events("s", 0, None, commits + 1)) == commits
    finally:
        recorder.close()
    assert restarted > 0
    assert largest < 10_000_000, f"the WAL grew to {largest / 1e6:.1f} MB"
