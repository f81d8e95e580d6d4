"""Unary lease writers (sync `LeaseWriter`, asyncio `AsyncLeaseWriter`): heartbeats keep the
lease alive, a takeover is OwnershipLost for good (nothing re-acquires), close releases."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OwnershipLost, WriterHeld
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note
from tests.support.servers import ServerThread, hold_writer, planned_next_seq
from tests.support.waiting import eventually


def test_sync_lease_writer_heartbeats_and_never_reacquires(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.lease_writer(sid, writer_id="unary", heartbeat=0.05) as writer:
        assert writer.append([note(1)]).seqs == [0]
        before = writer.lease.expire_time
        deadline = time.monotonic() + 5
        while writer.lease.expire_time == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert writer.lease.expire_time > before, "heartbeats renewed the lease"
        thief = client.lease_writer(sid, writer_id="thief", takeover=True)
        for n in (2, 3):  # lost for good: the second append does not try to take the lease back
            with pytest.raises(OwnershipLost):
                writer.append([note(n)])
        assert thief.append([note(4)]).seqs == [1]
        thief.close()
    assert client.get_session(sid).lease is None, "the thief's close released the lease"
    assert [e.data["n"] for e in client.read_events(sid)] == [1, 4]


def test_async_lease_writer_heartbeats_and_never_reacquires(server: ServerThread, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            writer = await client.lease_writer(sid, writer_id="unary", heartbeat=0.05)
            assert (await writer.append([note(1)])).seqs == [0]
            before = writer.lease.expire_time
            for _ in range(100):
                if writer.lease.expire_time > before:
                    break
                await asyncio.sleep(0.05)
            assert writer.lease.expire_time > before, "heartbeats renewed the lease"
            async with await client.lease_writer(sid, writer_id="thief", takeover=True) as thief:
                for n in (2, 3):
                    with pytest.raises(OwnershipLost):
                        await writer.append([note(n)])
                assert (await thief.append([note(4)])).seqs == [1]
            await writer.close()  # lost: nothing to release
            assert [e.data["n"] async for e in client.read_events(sid)] == [1, 4]

    asyncio.run(scenario())


def test_closing_a_lease_writer_twice_gives_the_lease_back_once(server: ServerThread, sid: str) -> None:
    """A `with` block around a writer closed inside it closes it again: the second close does
    nothing, where it released the lease again and raised OwnershipLost ("reopen the writer")."""
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        with client.lease_writer(sid) as writer:
            writer.append([note(1)])
            writer.close()
        assert client.get_session(sid).lease is None

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            async with await client.lease_writer(sid) as writer:
                await writer.append([note(2)])
                await writer.close()
            assert (await client.get_session(sid)).lease is None

    asyncio.run(scenario())


def test_a_held_session_says_when_its_lease_lapses_and_how_to_take_it_over(client: SessionLogClient, sid: str) -> None:
    # The message said who held the lease until when, and no way on: a harness author read
    # "held by writer 'w' until 1796476273604 (epoch 2)" and had to find `takeover` in the docs.
    client.create_session(sid)
    with client.lease_writer(sid, writer_id="first"):
        with pytest.raises(WriterHeld) as held:
            client.writer(sid, writer_id="second")
        expires_at = int(held.value.metadata["expires_at"])
        # The time as a time (it said "until 1796667457322 (Unix ms, ...)"), and why waiting for
        # it is no use while the holder lives: a connected writer's lease is renewed.
        stamp = datetime.fromtimestamp(expires_at / 1000, UTC).isoformat(timespec="milliseconds")
        assert f"is held by writer 'first' (epoch 1) until {stamp.replace('+00:00', 'Z')}: " in held.value.message
        assert "a writer that is connected renews its lease" in held.value.message
        assert held.value.message.endswith("take the session over (takeover), which fences it out")


def test_a_retry_answered_while_another_batch_commits_says_where_the_durable_log_ends(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """A batch of events all stored already is answered at once; its `next_seq` is where the
    durable log ends, not past the batches still committing. A client takes it as acknowledged
    (`acknowledged_next_seq`), so had one of those commits failed, its next append would have
    been refused as if the database were restored (ACKNOWLEDGED_PAST_LOG), its lease released."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    first = client.append(sid, lease, [note(0, eventId="e0")])
    gate = hold_writer(server)  # nothing commits until the gate opens
    with ThreadPoolExecutor(1) as pool:
        try:
            in_flight = pool.submit(client.append, sid, lease, [note(1)])
            eventually(lambda: planned_next_seq(server, sid), lambda seq: seq == first.next_seq + 1)
            again = client.append(sid, lease, [note(0, eventId="e0")])
            assert (again.seqs, again.next_seq) == (first.seqs, first.next_seq)
        finally:
            gate.set()
        assert in_flight.result().next_seq == first.next_seq + 1


def test_unary_appends_in_flight_under_one_lease_are_not_refused(
    server: ServerThread, client: SessionLogClient, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends sent together under one lease each say where the acknowledgements end as they
    were sent (`acknowledged_next_seq`), behind the batches still in flight: none is refused
    for it (as it would be on `expected_next_seq`), and the next one says where they all end."""
    sent: list[pb.AppendEventsRequest] = []
    append = client.stub.AppendEvents

    def recorded(request: pb.AppendEventsRequest, **options: Any) -> Any:
        sent.append(request)
        return append(request, **options)

    monkeypatch.setattr(client.stub, "AppendEvents", recorded)
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    first = client.append(sid, lease, [note(0)])
    gate = hold_writer(server)  # nothing commits until the gate opens: every batch is in flight
    try:
        with ThreadPoolExecutor(4) as pool:
            in_flight = [pool.submit(client.append, sid, lease, [note(n)]) for n in range(1, 5)]
            eventually(lambda: planned_next_seq(server, sid), lambda seq: seq == first.next_seq + 4)
            gate.set()
            results = [future.result() for future in in_flight]
    finally:
        gate.set()
    last = client.append(sid, lease, [note(5)])
    assert sorted(e.data["n"] for e in client.read_events(sid)) == [0, 1, 2, 3, 4, 5]  # 1-4 in any order
    assert not sent[0].HasField("acknowledged_next_seq")  # nothing acknowledged yet
    assert [r.acknowledged_next_seq for r in sent[1:5]] == [first.next_seq] * 4
    assert sent[5].acknowledged_next_seq == max(r.next_seq for r in results) == last.seqs[0]
