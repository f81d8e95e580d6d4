"""A SQLite file whose turn to write is held too long (a worker stopped while holding it): an
append fails with STORAGE_UNAVAILABLE after `sqlite_busy_timeout_ms`, writes nothing, and the
same batch retried once the turn is free lands at the seqs it would have had."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import SessionLogError
from tests.support.events import note
from tests.support.servers import ServerThread

WAIT_MS = 400


@contextmanager
def turn_held_elsewhere(database: Path) -> Iterator[None]:
    """Hold the file's turn as another worker would: its own open file, an exclusive flock."""
    fd = os.open(f"{database}-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets the lock go


def test_an_append_waits_for_the_turn_a_bounded_time_and_writes_nothing(tmp_path: Path) -> None:
    database = tmp_path / "turn.db"
    server = ServerThread(f"sqlite:///{database}", sqlite_busy_timeout_ms=WAIT_MS)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session("s-turn")
            lease = client.acquire_lease("s-turn")
            assert client.append("s-turn", lease, [note(0, eventId="e0")]).seqs == [0]
            with turn_held_elsewhere(database):
                asked = time.monotonic()
                with pytest.raises(SessionLogError) as refused:
                    client.append("s-turn", lease, [note(1, eventId="e1"), note(2, eventId="e2")])
                waited = time.monotonic() - asked
            assert refused.value.reason == "STORAGE_UNAVAILABLE", refused.value
            assert "turn to write the SQLite file" in str(refused.value)
            assert WAIT_MS / 1000 <= waited < 10
            assert [e.seq for e in client.read_events("s-turn")] == [0]  # nothing was written
            retried = client.append("s-turn", lease, [note(1, eventId="e1"), note(2, eventId="e2")])
            assert retried.seqs == [1, 2]
            assert [e.data["n"] for e in client.read_events("s-turn")] == [0, 1, 2]
    finally:
        server.stop()
