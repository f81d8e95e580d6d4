"""A writer stream the service ends while its writer is idle (the service is stopping, or an
older server ending it without an error): the writer goes on through a new stream, with both
clients, on SQLite and PostgreSQL. An append after the end used to hang: the writers reconnected
only when batches were unacknowledged.

Across a real restart: tests/transport/test_restart.py.
"""

from __future__ import annotations

import asyncio

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OwnershipLost, WriterHeld
from tests.support.events import note
from tests.support.servers import ServerThread

HEADER = {"config": {"provider": "acme", "model": "m-1"}}
ANSWER_WITHIN_S = 30.0  # an answer never comes if the writer is stuck: fail instead of hanging


def end_stream_of(server: ServerThread, sid: str, *, shutdown: bool) -> None:
    """End the open writer stream of `sid` from the service's side: as at shutdown (UNAVAILABLE
    `SHUTTING_DOWN`, the lease kept), or as a server that ends it without an error and gives
    the lease back (what shutdown did before)."""

    async def end() -> None:
        ended = 0
        for stream in list(server.service.writer_streams):
            if stream.opened is not None and stream.opened.holder.session_id == sid:
                stream.end_for_shutdown() if shutdown else stream.close()
                ended += 1
        assert ended == 1

    server.call(end())


def test_an_idle_writer_goes_on_after_the_service_ends_its_stream(
    client: SessionLogClient, server: ServerThread, sid: str
) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        assert writer.append([note(0)]).result(ANSWER_WITHIN_S).seqs == [0]
        end_stream_of(server, sid, shutdown=True)
        assert writer.append([note(1)]).result(ANSWER_WITHIN_S).seqs == [1]
        assert writer.reconnects == 1
    assert [e.data["n"] for e in client.read_events(sid)] == [0, 1]
    assert client.get_session(sid).lease is None  # closed: given back


def test_an_idle_writer_whose_stream_ended_without_an_error_fails_instead_of_hanging(
    client: SessionLogClient, server: ServerThread, sid: str
) -> None:
    # The stream ends as a closed one does, and its lease is given back: the writer reconnects,
    # gets a lease that is no longer the one it held (anyone could have written meanwhile), and
    # fails for good, as after any lost lease, rather than leaving the append unanswered.
    client.create_session(sid)
    writer = client.writer(sid)
    assert writer.append([note(0)]).result(ANSWER_WITHIN_S).seqs == [0]
    end_stream_of(server, sid, shutdown=False)
    with pytest.raises(OwnershipLost):
        writer.append([note(1)]).result(ANSWER_WITHIN_S)
    with pytest.raises(OwnershipLost):
        writer.append([note(2)])
    assert [e.data["n"] for e in client.read_events(sid)] == [0]


def test_a_stream_ended_at_shutdown_keeps_its_lease_and_its_header(
    client: SessionLogClient, server: ServerThread, sid: str
) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        assert writer.report_header(HEADER).result(ANSWER_WITHIN_S).reason == "initial"
        end_stream_of(server, sid, shutdown=True)
        # Not a new lease: the same header is not logged again (no `resume`).
        report = writer.report_header(HEADER).result(ANSWER_WITHIN_S)
        assert (report.reason, report.header_seq) == (None, 0)
        assert writer.reconnects == 1
        with pytest.raises(WriterHeld):  # the lease stayed with the writer all along
            client.writer(sid)
    with client.writer(sid) as again:  # a new lease: its first header is a `resume`
        assert again.report_header(HEADER).result(ANSWER_WITHIN_S).reason == "resume"
    assert [e.data["reason"] for e in client.read_events(sid)] == ["initial", "resume"]


def test_the_asyncio_writer_goes_on_after_the_service_ends_its_stream(server: ServerThread, sid: str) -> None:
    async def scenario() -> None:
        async with AsyncSessionLogClient(server.target) as client:
            await client.create_session(sid)
            writer = await client.writer(sid)
            assert (await (await writer.report_header(HEADER))).reason == "initial"
            await asyncio.to_thread(end_stream_of, server, sid, shutdown=True)
            sent = await writer.append([note(0)])
            assert (await asyncio.wait_for(sent, ANSWER_WITHIN_S)).seqs == [1]
            assert (await (await writer.report_header(HEADER))).reason is None
            assert writer.reconnects == 1
            await writer.close()
            events = [e async for e in client.read_events(sid)]
            assert [e.type for e in events] == ["request/header", "test/note"]

    asyncio.run(scenario())
