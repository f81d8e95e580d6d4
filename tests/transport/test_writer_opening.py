"""What a streaming writer's opening takes and says (sync and asyncio clients): a kept lease's
token opens it under that lease, a token whose lease is gone opens nothing, and a session that
is not there names the way to create it."""

from __future__ import annotations

import asyncio

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, OwnershipLost, WriterHeld
from tests.support.events import note
from tests.support.servers import ServerThread


def test_a_writer_opens_under_a_lease_kept_from_resume(client: SessionLogClient, sid: str) -> None:
    # `resume` (or `acquire_lease`) kept the lease for a writer to come: without its token the
    # writer found the session held by that very lease (WRITER_HELD) until it lapsed.
    client.create_session(sid)
    kept = client.resume(sid).lease
    with pytest.raises(WriterHeld):
        client.writer(sid)
    with client.writer(sid, lease_token=kept.token) as writer:
        assert writer.lease is not None and writer.lease.token == kept.token
        assert writer.lease.epoch == kept.epoch + 1  # taken again: what the old connection sent is fenced
        seq = writer.append([note(0)]).result().seqs[0]
    assert [e.seq for e in client.read_events(sid)][-1] == seq


def test_an_async_writer_opens_under_a_kept_lease(server: ServerThread, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            kept = await client.acquire_lease(sid)
            with pytest.raises(WriterHeld):
                await client.writer(sid)
            writer = await client.writer(sid, lease_token=kept.token)
            assert writer.lease is not None and writer.lease.token == kept.token
            assert (await (await writer.append([note(0)]))).seqs == [0]
            await writer.close()

    asyncio.run(scenario())


def test_a_writer_for_a_missing_session_names_create_if_missing(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as client, pytest.raises(NotFound) as refused:
        client.writer(sid)
    assert refused.value.reason == "SESSION_NOT_FOUND" and refused.value.metadata["session_id"] == sid
    assert "create_if_missing=True" in refused.value.message, refused.value.message

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            with pytest.raises(NotFound) as refused:
                await client.writer(sid)
            assert "create_if_missing=True" in refused.value.message, refused.value.message

    asyncio.run(scenario())


def test_a_token_whose_lease_was_taken_over_opens_nothing(client: SessionLogClient, sid: str) -> None:
    """The old holder of a lease taken over must learn it, not take the lease back quietly:
    once the taker gave it back, the session is held by no one, and the old token was granted a
    fresh lease (the writer appended after the other writer's events as if it had held the
    session throughout). A retry of the open, the unary grants and a resume are refused alike."""
    client.create_session(sid)
    kept = client.resume(sid).lease
    with client.writer(sid, takeover=True) as taker:
        taker.append([note(0)]).result()
    before = [e.seq for e in client.read_events(sid)]
    for attempt in (
        lambda: client.writer(sid, lease_token=kept.token),
        lambda: client.acquire_lease(sid, lease_token=kept.token),
        lambda: client.resume(sid, lease_token=kept.token),
    ):
        with pytest.raises(OwnershipLost) as lost:
            attempt()
        assert lost.value.reason == "OWNERSHIP_LOST" and lost.value.metadata["session_id"] == sid
    assert [e.seq for e in client.read_events(sid)] == before
    assert client.get_session(sid).lease is None  # nothing was granted
    with client.writer(sid) as writer:  # a writer that asks afresh gets it
        assert writer.append([note(1)]).result().seqs == [before[-1] + 1]


def test_a_token_given_back_opens_nothing(server: ServerThread, sid: str) -> None:
    """A lease given back is gone for its token too (the CLI's `append --lease-token` gives it
    back when it ends): a second open under it is refused, in the asyncio client as well."""

    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            kept = await client.acquire_lease(sid)
            writer = await client.writer(sid, lease_token=kept.token)
            await (await writer.append([note(0)]))
            await writer.close()
            with pytest.raises(OwnershipLost):
                await client.writer(sid, lease_token=kept.token)
            assert [e.seq async for e in client.read_events(sid)] == [0]

    asyncio.run(scenario())
