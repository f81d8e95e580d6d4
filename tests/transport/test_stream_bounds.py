"""Streams are bounded (SPEC §9, issue 11 §4): subscribers by bytes, writer streams from their
first byte, and no subscription is ever told "caught up" at a seq the log has not reached."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from bench.procs import free_port
from sessionlog import requests
from sessionlog.client import SessionLogClient
from sessionlog.errors import from_rpc_error
from sessionlog.requests import CaughtUp
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1 import session_service_pb2_grpc
from tests.support.events import note
from tests.support.following import follow_in_thread
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

BUFFER = 256 * 1024
PAYLOAD = "x" * 20_000


@pytest.fixture
def bounded(db_url: str) -> Iterator[ServerThread]:
    running = ServerThread(
        db_url, lease_ttl_ms=5_000, subscriber_buffer_bytes=BUFFER, max_open_streams=4, writer_open_timeout_s=1.0
    )
    yield running
    running.stop()


def _fill(client: SessionLogClient, sid: str, batches: int) -> None:
    with client.writer(sid, create_if_missing=True) as writer:
        for i in range(batches):
            writer.append([{"type": "test/note", "data": {"n": i, "text": PAYLOAD}, "ignorable": True}] * 5)
        writer.flush()


def test_subscribing_beyond_the_head_is_out_of_range(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([note(0), note(1)]).result()
    for from_seq in (3, 1_000_000, 2**63 - 1):
        call = client.stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id=sid, from_seq=from_seq))
        with pytest.raises(grpc.RpcError) as refused:
            next(call)
        assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
        error = from_rpc_error(refused.value)
        assert error.reason == "FROM_SEQ_PAST_HEAD" and error.metadata["next_seq"] == "2"
    # At the head exactly: caught up at once, then the live tail.
    subscription = client.subscribe(sid, from_seq=2)
    assert next(iter(subscription)) == CaughtUp(2)
    subscription.cancel()


def test_a_slow_subscriber_is_cut_off_with_the_seq_to_resume_from(bounded: ServerThread, sid: str) -> None:
    # A channel without BDP probing keeps HTTP/2 flow control at its 64 KiB window, so a
    # subscriber that reads nothing really does stop the server's sends (as over a slow link).
    with (
        SessionLogClient(bounded.target) as client,
        grpc.insecure_channel(
            bounded.target, options=[("grpc.http2.bdp_probe", 0), ("grpc.max_receive_message_length", 1 << 30)]
        ) as channel,
    ):
        client.create_session(sid)
        stub = session_service_pb2_grpc.SessionServiceStub(channel)
        call = stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id=sid, from_seq=0))
        responses = iter(call)
        assert next(responses).WhichOneof("kind") == "caught_up"
        _fill(client, sid, 200)  # ~20 MB while the subscriber reads nothing
        seqs: list[int] = []
        with pytest.raises(grpc.RpcError) as cut:
            for response in responses:
                seqs += [e.seq for e in response.events.events]
        assert cut.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        error = from_rpc_error(cut.value)
        assert error.reason == "SUBSCRIBER_TOO_SLOW"
        assert seqs == list(range(len(seqs))) and len(seqs) < 1000
        assert int(error.metadata["resume_seq"]) == len(seqs)


def test_the_python_clients_resume_a_cut_off_subscription_on_their_own(bounded: ServerThread, sid: str) -> None:
    with SessionLogClient(bounded.target) as client:
        client.create_session(sid)
        subscription = client.subscribe(sid)
        items = iter(subscription)
        assert next(items) == CaughtUp(0)
        _fill(client, sid, 200)
        seen = [next(items) for _ in range(1000)]
        subscription.cancel()
    assert [e.seq for e in seen] == list(range(1000))  # type: ignore[union-attr]


def test_the_async_client_resumes_too(bounded: ServerThread, sid: str) -> None:
    import asyncio

    from sessionlog.aio import AsyncSessionLogClient

    async def run() -> list[Any]:
        async with AsyncSessionLogClient(bounded.target) as client:
            await client.create_session(sid)
            items = client.subscribe(sid)
            assert await anext(items) == CaughtUp(0)
            await asyncio.get_running_loop().run_in_executor(None, _fill_sync, bounded.target, sid)
            seen = [await anext(items) for _ in range(1000)]
            await items.aclose()
            return seen

    seen = asyncio.run(run())
    assert [e.seq for e in seen] == list(range(1000))


def _fill_sync(target: str, sid: str) -> None:
    with SessionLogClient(target) as client:
        _fill(client, sid, 200)


def test_writer_streams_count_before_open_and_are_closed_if_open_never_comes(bounded: ServerThread) -> None:
    release = threading.Event()

    def silent() -> Iterator[pb.WriteRequest]:
        release.wait(30)
        return
        yield  # an iterator that sends nothing

    with SessionLogClient(bounded.target) as client:
        idle = [client.stub.Write(silent()) for _ in range(4)]
        time.sleep(0.3)
        late = client.stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id="anything", from_seq=0))
        with pytest.raises(grpc.RpcError) as refused:
            next(late)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert from_rpc_error(refused.value).reason == "TOO_MANY_STREAMS"
        for call in idle:  # none sent `open` in time: each is ended, freeing its slot
            with pytest.raises(grpc.RpcError) as ended:
                next(call)
            assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert from_rpc_error(ended.value).reason == "WRITER_OPEN_TIMEOUT"
        release.set()
        with client.writer(f"open-{time.time_ns()}", create_if_missing=True) as writer:
            assert writer.append([note(0)]).result().seqs == [0]


def test_a_quiet_subscription_rides_out_restart_after_restart(
    fresh_db: str, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A dashboard follows a session nothing is written to while the service is restarted again
    # and again (deploys). Each time the subscription is back, caught up at the head, the
    # service was reached: the next restart must get the clients' whole budget of attempts
    # "in a row" again. It counted every attempt since the last event instead, so a quiet
    # subscription gave up at some later restart. A budget of 10 attempts stands for the
    # clients' minute here; each restart below costs about 5.
    monkeypatch.setattr(requests, "MAX_UNREACHABLE_RESUMES", 10)
    address = f"127.0.0.1:{free_port()}"  # restarts bind it again
    server = ServerThread(fresh_db, listen_override=address, lease_ttl_ms=60_000)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, [note(0)])
            subscription = client.subscribe(sid)
            thread, seen = follow_in_thread(subscription)
            eventually(lambda: list(seen), lambda items: CaughtUp(1) in items)
            for _ in range(4):
                server.stop(grace=0.5)
                time.sleep(0.6)  # the subscription tries again meanwhile, with backoff
                server = ServerThread(fresh_db, listen_override=address, lease_ttl_ms=60_000)
                eventually(server.service.hub.count, lambda n: n == 1 or not thread.is_alive())
            client.append(sid, lease, [note(1)])
            eventually(lambda: list(seen), lambda items: len(items) > 2 or not thread.is_alive())
            subscription.cancel()
            thread.join(10)
            assert [getattr(item, "seq", item) for item in seen] == [0, CaughtUp(1), 1]
    finally:
        server.stop(grace=0.5)
