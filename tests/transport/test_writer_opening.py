"""What a streaming writer's opening takes and says (sync and asyncio clients): a kept lease's
token opens it under that lease, and a session that is not there names the way to create it."""

from __future__ import annotations

import asyncio

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, WriterHeld
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
