"""A SQLite file whose turn to write is held too long (a worker stopped while holding it): an
append fails with STORAGE_UNAVAILABLE after `sqlite_busy_timeout_ms`, writes nothing, and the
same batch retried once the turn is free lands at the seqs it would have had. A group of
batches committed meanwhile fails together after one bound, not one bound per batch."""

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
from sessionlog.core.events import Event
from sessionlog_server.storage.migrate import upgrade
from sessionlog_server.storage.sqlite import SQLiteEventRecorder
from tests.support.events import note
from tests.support.records import new_session, pending_batch
from tests.support.servers import ServerThread

WAIT_MS = 400
NOW = 1_000_000


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


def test_a_group_against_a_held_turn_fails_together_after_one_bound(tmp_path: Path) -> None:
    # A group of batches from five sessions, committed while the turn is held elsewhere: every
    # batch gets STORAGE_UNAVAILABLE after one bound. Retried batch by batch, the group would
    # have waited a bound more per batch (six bounds here) for the same answer.
    database = tmp_path / "turn.db"
    url = f"sqlite:///{database}"
    upgrade(url)
    recorder = SQLiteEventRecorder(url, busy_timeout_ms=WAIT_MS)
    try:
        batches = []
        for index in range(5):
            sid = f"s-group-{index}"
            recorder.create_session(new_session(sid))
            lease = recorder.acquire_lease(sid, "w", takeover=False, now=NOW, ttl_ms=10**9, token_hash="h")
            event = Event(0, NOW, "test/note", {}, ignorable=True)
            batches.append(pending_batch(lease, [event], lease_expires_at=NOW + 10**9))
        with turn_held_elsewhere(database):
            asked = time.monotonic()
            outcomes = recorder.commit_batches(batches)
            waited = time.monotonic() - asked
        assert [getattr(outcome, "reason", None) for outcome in outcomes] == ["STORAGE_UNAVAILABLE"] * 5
        assert WAIT_MS / 1000 <= waited < 3 * WAIT_MS / 1000
        assert [recorder.get_session(b.session_id).next_seq for b in batches] == [0] * 5  # nothing written
        assert recorder.commit_batches(batches) == [None] * 5  # and once the turn is free, all go in
    finally:
        recorder.close()
