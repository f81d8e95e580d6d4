"""What follows a commit (publishing to subscribers and commit taps) cannot keep a durable batch
from being acknowledged, or the rest of its group from being settled.

A commit tap that raises stands for a bug in a follow-up: the writer is still answered with
the batch's seqs (it is durable), the log holds it, and later appends work.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.events import Event
from tests.support.events import note
from tests.support.servers import ServerThread


@pytest.fixture
def broken_tap_server(fresh_db: str) -> Iterator[ServerThread]:
    """A server of its own whose commit tap raises after every commit.

    On PostgreSQL the database is shared with other tests, so the server's start-up repair may
    commit to their abandoned sessions too: the tap records which session each commit was of."""
    server = ServerThread(fresh_db)
    tapped: list[tuple[str, int]] = []

    def broken_tap(session_id: str, events: Sequence[Event]) -> None:
        tapped.append((session_id, len(events)))
        raise RuntimeError("a follow-up of the commit failed")

    server.service.appends.commit_taps.append(broken_tap)
    server.tapped = tapped  # type: ignore[attr-defined]  # what the tap saw, for the tests
    try:
        yield server
    finally:
        server.stop()


def test_a_unary_append_is_acknowledged_when_a_follow_up_fails(broken_tap_server: ServerThread, sid: str) -> None:
    with SessionLogClient(broken_tap_server.target, timeout=10) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        first = client.append(sid, lease, [note(1), note(2)])
        second = client.append(sid, lease, [note(3)])
        assert (first.seqs, second.seqs) == ([0, 1], [2])
        assert [e.data["n"] for e in client.read_events(sid)] == [1, 2, 3]
    tapped = broken_tap_server.tapped  # type: ignore[attr-defined]
    assert [count for session_id, count in tapped if session_id == sid] == [2, 1]


def test_a_streamed_batch_is_acknowledged_when_a_follow_up_fails(broken_tap_server: ServerThread, sid: str) -> None:
    with SessionLogClient(broken_tap_server.target, timeout=10) as client:
        with client.writer(sid, create_if_missing=True) as writer:
            futures = [writer.append([note(n)]) for n in range(5)]
            assert [f.result(timeout=10).seqs for f in futures] == [[0], [1], [2], [3], [4]]
        assert [e.data["n"] for e in client.read_events(sid)] == [0, 1, 2, 3, 4]
