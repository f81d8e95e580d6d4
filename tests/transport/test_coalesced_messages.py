"""Writer messages and gRPC's message size: batches appended back to back share messages
(`sessionlog.requests.coalesce`), and each message must still fit the server's limit when every
batch alone does; a batch that fits no message is refused before it is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import WriterCore
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import LimitExceeded
from sessionlog.core.events import NewEvent
from sessionlog.requests import MAX_MESSAGE_BYTES
from tests.support.servers import ServerThread

LIMIT = 4 * 1024 * 1024
"""The server's message limit here; each batch below takes a quarter of it."""
BATCHES = 10


@pytest.fixture
def small_limit_server(db_url: str) -> Iterator[ServerThread]:
    with ServerThread(db_url, max_message_bytes=LIMIT) as server:
        yield server


def _batch(n: int) -> list[NewEvent]:
    return [NewEvent(type="x/blob", ignorable=True, data={"n": n, "blob": "b" * (LIMIT // 4)})]


def test_a_sync_writers_batches_each_within_the_limit_all_land(small_limit_server: ServerThread, sid: str) -> None:
    # Merged without a bound, most of them were refused: "Received message larger than max".
    with SessionLogClient(small_limit_server.target) as client, client.writer(sid, create_if_missing=True) as writer:
        futures = [writer.append(_batch(n)) for n in range(BATCHES)]
        assert [f.result(timeout=60).seqs for f in futures] == [[n] for n in range(BATCHES)]


def test_an_async_writers_batches_each_within_the_limit_all_land(small_limit_server: ServerThread, sid: str) -> None:
    async def scenario() -> list[list[int]]:
        async with AsyncSessionLogClient(small_limit_server.target) as client:
            writer = await client.writer(sid, create_if_missing=True)
            acks = [await writer.append(_batch(n)) for n in range(BATCHES)]
            seqs = [list((await asyncio.wait_for(ack, 60)).seqs) for ack in acks]
            await writer.close()
            return seqs

    assert asyncio.run(scenario()) == [[n] for n in range(BATCHES)]


def test_a_batch_over_the_message_size_is_refused_unsent_and_the_writer_goes_on() -> None:
    """Sent, grpc.aio reported it as an internal error, like a stream whose server died: the
    asyncio writer reconnected and sent it again, without end, and its future never resolved.
    (A limit of 4 KiB here: a batch past the real one, 256 MiB, took seconds and a GiB to build.)"""
    core = WriterCore("s", "w", create_if_missing=False, max_message_bytes=4096)
    with pytest.raises(LimitExceeded) as refused:
        core.add_batch([NewEvent(type="x/blob", ignorable=True, data={"blob": "b" * 5000})], None, Future())
    assert refused.value.reason == "MESSAGE_TOO_LARGE" and "smaller batches" in refused.value.message
    assert not core.pending
    kept = core.add_batch([NewEvent(type="x/blob", ignorable=True, data={"blob": "b" * 1000})], None, Future())
    assert list(core.pending) == [kept]
    assert WriterCore("s", "w", create_if_missing=False).max_message_bytes == MAX_MESSAGE_BYTES
