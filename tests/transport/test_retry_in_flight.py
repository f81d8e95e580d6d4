"""A retry of a batch that is still committing is answered once that batch is settled.

A unary append whose deadline runs out while its commit is slow (a SQLite file whose turn to
write is held elsewhere, a slow disk) is retried by the client with the same eventIds: that is
what eventIds are for. The service remembers the ids from planning, before the commit; answered
from memory at once, the retry was acknowledged while the events were not durable, and if the
commit then failed, the acknowledged events were not in the log. Now the retry waits for the
first batch: acknowledged with its seqs once it is durable, or planned again (from the log) and
committed if it failed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sessionlog import session_info
from sessionlog.client import SessionLogClient
from sessionlog.errors import from_rpc_error
from sessionlog.requests import append_request, with_event_ids
from tests.support.events import note
from tests.support.servers import ServerThread, hold_writer, planned_next_seq
from tests.support.waiting import eventually
from tests.transport.test_sqlite_writer_turn import turn_held_elsewhere

WAIT_MS = 400


def _send(client: SessionLogClient, sid: str, lease: session_info.LeaseInfo, event: dict[str, Any]) -> Any:
    """AppendEvents sent without waiting: a future of its response (the client's own retries
    left out, so each call here is one try)."""
    request = append_request(sid, lease, with_event_ids([event]), None)
    return client.stub.AppendEvents.future(request, timeout=30)


@pytest.fixture
def own_server(fresh_db: str) -> Iterator[ServerThread]:
    with ServerThread(fresh_db) as server:
        yield server


def test_a_retry_waits_for_the_batch_still_committing(own_server: ServerThread, sid: str) -> None:
    server = own_server
    with SessionLogClient(server.target, timeout=30) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        gate = hold_writer(server)
        try:
            first = _send(client, sid, lease, note(0, eventId="x"))
            eventually(lambda: planned_next_seq(server, sid), lambda planned: planned == 1, timeout=10)
            retry = _send(client, sid, lease, note(0, eventId="x"))
            time.sleep(0.3)
            assert not retry.done(), "the retry was acknowledged while its batch was not durable"
        finally:
            gate.set()
        assert list(first.result().seqs) == list(retry.result().seqs) == [0]
        assert [e.event_id for e in client.read_events(sid)] == ["x"]


def test_a_retry_of_a_batch_whose_commit_fails_is_committed_not_lost(tmp_path: Path, sid: str) -> None:
    database = tmp_path / "retry.db"
    with (
        ServerThread(f"sqlite:///{database}", sqlite_busy_timeout_ms=WAIT_MS) as server,
        SessionLogClient(server.target, timeout=30) as client,
    ):
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        with turn_held_elsewhere(database):
            first = _send(client, sid, lease, note(0, eventId="x"))
            eventually(lambda: planned_next_seq(server, sid), lambda planned: planned == 1, timeout=10)
            retry = _send(client, sid, lease, note(0, eventId="x"))
            with pytest.raises(grpc.RpcError) as failed:
                first.result()  # the turn stayed held past the bound
            assert from_rpc_error(failed.value).reason == "STORAGE_UNAVAILABLE"
        acknowledged = retry.result()  # planned again once the first failed, now committed
        assert list(acknowledged.seqs) == [0]
        assert [e.event_id for e in client.read_events(sid)] == ["x"]
