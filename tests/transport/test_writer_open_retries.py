"""A streaming writer's first open whose answer was lost can be sent again (SPEC §7, AIP-155).

A writer's first `open` has no lease token to reconnect with. When its `opened` was lost (the
service granted the lease, or resumed the session, and the stream broke on the way back), the
clients raised Unavailable at once, and the harness's own retry of the same open was refused
WRITER_HELD, by the lease it never saw, until that lapsed (the lease TTL, 30 s by default); a
resume's retry then named none of the repairs the lost one wrote. Now the open carries a
`request_id`, as AcquireLease and ResumeSession do: the clients make one per open and try the
open again on a transient failure, within the writer's reconnect policy, and a retry takes the
lost open's lease again (a new epoch, the same token), a resume written once.

A client closed while the open waits to try again, or while an attempt is under way, ends it
with the closed client's RuntimeError, as every other call of a closed client raises.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import grpc
import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.base import RetryPolicy, WriterCore
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, SessionLogError, Unavailable, WriterHeld
from sessionlog.errors import from_rpc_error
from sessionlog.session_info import lease_from_pb
from sessionlog.unanswered import UnansweredOpens
from sessionlog.v1 import session_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.answers import resume_answer
from tests.support.events import note, open_turn_log
from tests.support.latency_proxy import LatencyProxy
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

#: What a resume of `_crashed_mid_turn`'s session writes: two tool results, the step's and the
#: turn's ends (the repairs), then `session/end-seed`.
RESUME_WRITES = ["tool/result", "tool/result", "step/end", "turn/end", "session/end-seed"]


def _open(client: SessionLogClient, sid: str, **fields: Any) -> pb.WriterOpened:
    """A writer stream that opens and then just ends (as a connection that broke: its lease
    is left to a reconnect or to lapse); the service's `opened`."""
    call = client.stub.Write(iter([pb.WriteRequest(open=pb.OpenWriter(session_id=sid, **fields))]), timeout=30)
    try:
        first = next(call)
    finally:
        call.cancel()
    return first.opened


def _refused_open(client: SessionLogClient, sid: str, **fields: Any) -> SessionLogError:
    with pytest.raises(grpc.RpcError) as refused:
        _open(client, sid, **fields)
    return from_rpc_error(refused.value)


def _crashed_mid_turn(client: SessionLogClient, sid: str) -> int:
    """A session whose writer went away with a turn open and two tool calls pending; its next seq."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(open_turn_log()).result()
    return client.get_session(sid).next_seq


def _lost_opened(proxy: AnswerLosingProxy, index: int = 0) -> pb.WriterOpened:
    """The `opened` the proxy lost: what the service had granted."""
    return pb.WriteResponse.FromString(proxy.lost[index]).opened


# --- the service -----------------------------------------------------------------------------


@pytest.mark.parametrize("resume", [False, True])
def test_the_same_open_request_id_again_takes_the_lease_again_under_the_same_token(
    client: SessionLogClient, sid: str, resume: bool
) -> None:
    client.create_session(sid)
    request_id = str(uuid.uuid4())
    first = _open(client, sid, request_id=request_id, writer_id="w", resume=resume)
    for other in (str(uuid.uuid4()), ""):
        assert _refused_open(client, sid, request_id=other, resume=resume).reason == "WRITER_HELD"

    again = _open(client, sid, request_id=request_id, writer_id="w", resume=resume)

    assert again.lease_token == first.lease_token
    assert again.lease.epoch == first.lease.epoch + 1  # the first open's epoch is fenced
    assert client.get_session(sid).lease.epoch == again.lease.epoch  # type: ignore[union-attr]
    lease = lease_from_pb(again.lease, again.lease_token)
    assert client.append(sid, lease, [note(1)]).seqs == [again.next_seq]


def test_a_retried_resuming_open_writes_its_repairs_and_seed_once(client: SessionLogClient, sid: str) -> None:
    head = _crashed_mid_turn(client, sid)
    request_id = str(uuid.uuid4())
    first = _open(client, sid, request_id=request_id, resume=True).resumed
    assert list(first.repair_seqs) == [head, head + 1, head + 2, head + 3]
    written = list(client.read_events(sid))

    again = _open(client, sid, request_id=request_id, resume=True).resumed

    assert list(client.read_events(sid)) == written  # nothing written twice
    assert resume_answer(again) == resume_answer(first)
    assert [e.type for e in written[head:]] == RESUME_WRITES


def test_an_open_whose_request_id_is_no_uuid_is_refused_and_creates_nothing(client: SessionLogClient, sid: str) -> None:
    refused = _refused_open(client, sid, request_id="not-a-uuid", create_if_missing=True)

    assert (refused.code, refused.reason, refused.field) == ("INVALID_ARGUMENT", "BAD_REQUEST_ID", "request_id")
    assert "not-a-uuid" not in refused.message
    with pytest.raises(NotFound):  # not created
        client.get_session(sid)


def test_an_open_its_writer_gave_up_while_the_lease_was_granted_gives_the_lease_back(fresh_db: str, sid: str) -> None:
    """A writer gives its open up at its client's timeout; when the service was slow to grant
    the lease (here: its writer thread busy), the grant went on after the cancel and the lease
    held the session under a token nobody learnt, until it lapsed (the TTL, long here). The
    `opened` was never written, so the service gives that lease back."""
    server = ServerThread(fresh_db, lease_ttl_ms=600_000)
    busy = threading.Event()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            blocking = asyncio.run_coroutine_threadsafe(
                server.service.committer.run_in_writer(busy.wait, 30), server.loop
            )
            request = pb.WriteRequest(open=pb.OpenWriter(session_id=sid, request_id=str(uuid.uuid4())))
            call = client.stub.Write(iter([request]))
            eventually(lambda: server.service.open_streams, lambda streams: streams == 1)
            time.sleep(0.3)  # the open is read and its grant queued behind the busy writer thread
            call.cancel()
            busy.set()
            blocking.result(timeout=30)
            eventually(lambda: server.service.open_streams, lambda streams: streams == 0)
            assert client.get_session(sid).lease is None
            with client.writer(sid) as writer:  # not WRITER_HELD by the given-up open
                assert writer.append([note(0)]).result(timeout=30).seqs == [0]
    finally:
        busy.set()
        server.stop()


# --- the clients: a first open whose answer was lost is sent again -----------------------------


def test_a_writers_first_open_whose_answer_was_lost_is_sent_again(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
        with (
            AnswerLosingProxy(server.target, "Write") as proxy,
            SessionLogClient(proxy.target) as client,
            client.writer(sid, writer_id="harness") as writer,
        ):
            lost = _lost_opened(proxy)
            assert proxy.calls["Write"] == 2
            assert writer.lease.token == lost.lease_token  # the lease the lost answer granted
            assert writer.lease.epoch == lost.lease.epoch + 1
            assert writer.reconnects == 0  # no stream had opened to break
            assert writer.append([note(1)]).result(timeout=30).seqs == [0]
        assert direct.get_session(sid).lease is None  # given back on close, not left to lapse
        assert [e.seq for e in direct.read_events(sid)] == [0]


def test_a_resuming_writer_whose_open_was_lost_resumes_once(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as direct:
        head = _crashed_mid_turn(direct, sid)
        with (
            AnswerLosingProxy(server.target, "Write") as proxy,
            SessionLogClient(proxy.target) as client,
            client.writer(sid, writer_id="harness", resume=True) as writer,
        ):
            assert proxy.calls["Write"] == 2
            assert writer.resumed is not None
            assert writer.resumed.repair_seqs == [head, head + 1, head + 2, head + 3]
            assert writer.resumed.end_seed_seq == head + 4
            assert writer.append([note(1)]).result(timeout=30).seqs == [head + 5]
        assert [e.type for e in direct.read_events(sid)][head:] == [*RESUME_WRITES, "test/note"]


def test_the_asyncio_writer_sends_a_lost_first_open_again(server: ServerThread, sid: str) -> None:
    created, resumed = f"{sid}-new", f"{sid}-resumed"
    with SessionLogClient(server.target) as direct:
        head = _crashed_mid_turn(direct, resumed)

    async def create(target: str) -> list[int]:
        async with AsyncSessionLogClient(target) as client, client.writer(created, create_if_missing=True) as writer:
            return (await (await writer.append([note(0)]))).seqs

    async def resume(target: str) -> tuple[list[int], int, int]:
        async with AsyncSessionLogClient(target) as client, client.writer(resumed, resume=True) as writer:
            assert writer.resumed is not None
            seq = (await (await writer.append([note(1)]))).seqs[0]
            return writer.resumed.repair_seqs, seq, writer.reconnects

    with AnswerLosingProxy(server.target, "Write") as proxy:
        assert asyncio.run(create(proxy.target)) == [0]
        assert proxy.calls["Write"] == 2
    with AnswerLosingProxy(server.target, "Write", losses=2) as proxy:
        repairs, seq, reconnects = asyncio.run(resume(proxy.target))
        assert proxy.calls["Write"] == 3
    assert repairs == [head, head + 1, head + 2, head + 3]
    assert (seq, reconnects) == (head + 5, 0)
    with SessionLogClient(server.target) as direct:
        assert [e.type for e in direct.read_events(resumed)][head:] == [*RESUME_WRITES, "test/note"]


def test_a_first_open_is_retried_only_while_transient_and_within_the_reconnect_policy(
    server: ServerThread, sid: str
) -> None:
    """All three attempts of one open whose answers were all lost took one lease, again and
    again under one token: the open fails Unavailable after them. A refusal is not retried."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
        with AnswerLosingProxy(server.target, "Write", losses=3) as proxy, SessionLogClient(proxy.target) as client:
            with pytest.raises(Unavailable):
                client.writer(sid, open_retry=RetryPolicy(attempts=3))
            assert proxy.calls["Write"] == 3
            tokens = {_lost_opened(proxy, i).lease_token for i in range(3)}
            epochs = [_lost_opened(proxy, i).lease.epoch for i in range(3)]
            assert len(tokens) == 1 and epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2]
        with AnswerLosingProxy(server.target, "Write", losses=0) as proxy, SessionLogClient(proxy.target) as client:
            with pytest.raises(WriterHeld):  # the lost opens' lease, held under a token never told
                client.writer(sid)
            assert proxy.calls["Write"] == 1


def test_a_first_open_is_retried_by_the_clients_retry_policy_as_every_safe_call(server: ServerThread, sid: str) -> None:
    """Not by the reconnect policy (about a minute, to ride out a restart once open): a harness,
    or `sessionlog append`, pointed at a service that is down or at a wrong address heard so
    after the few seconds `create_session` takes, not a minute later."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
    with (
        AnswerLosingProxy(server.target, "Write", losses=10) as proxy,
        SessionLogClient(proxy.target, retry=RetryPolicy(attempts=2, initial_delay=0.01)) as client,
    ):
        with pytest.raises(Unavailable):
            client.writer(sid)
        assert proxy.calls["Write"] == 2


#: One attempt: an open fails with its first failure (no wait to try again notices a close).
ONE_ATTEMPT = RetryPolicy(attempts=1)


# --- the clients: the next writer on a session retries an open that went unanswered ----------


def test_a_clients_next_writer_takes_the_lease_its_unanswered_open_got(server: ServerThread, sid: str) -> None:
    """A writer whose open failed UNAVAILABLE after its one attempt (its `opened` lost, or given
    up at the client's timeout while the service hung) left a lease on the session, and the
    client's next `writer()` on it was refused WRITER_HELD by that lease, its own try again, for
    a TTL. The next writer now sends that open's request id: it takes the lease (the same token,
    the next epoch), a resume as well as a plain open."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
        with AnswerLosingProxy(server.target, "Write") as proxy, SessionLogClient(proxy.target) as client:
            with pytest.raises(Unavailable):
                client.writer(sid, open_retry=ONE_ATTEMPT)
            lost = _lost_opened(proxy)
            with client.writer(sid, resume=True) as writer:
                assert (writer.lease.token, writer.lease.epoch) == (lost.lease_token, lost.lease.epoch + 1)
                assert writer.append([note(0)]).result(timeout=30).seqs == [1]  # after the seed
            with client.writer(sid) as writer:  # the id went with the open it was sent again by
                assert writer.lease.token != lost.lease_token
        assert direct.get_session(sid).lease is None


def test_the_asyncio_clients_next_writer_takes_the_lease_its_unanswered_open_got(
    server: ServerThread, sid: str
) -> None:
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)

    async def scenario(proxy: AnswerLosingProxy) -> tuple[str, int, list[int]]:
        async with AsyncSessionLogClient(proxy.target) as client:
            with pytest.raises(Unavailable):
                await client.writer(sid, open_retry=ONE_ATTEMPT)
            async with client.writer(sid) as writer:
                seqs = (await (await writer.append([note(0)]))).seqs
                return writer.lease.token, writer.lease.epoch, seqs

    with AnswerLosingProxy(server.target, "Write") as proxy:
        token, epoch, seqs = asyncio.run(scenario(proxy))
        lost = _lost_opened(proxy)
    assert (token, epoch, seqs) == (lost.lease_token, lost.lease.epoch + 1, [0])


def test_a_client_forgets_the_oldest_unanswered_opens_past_its_capacity() -> None:
    opens = UnansweredOpens(capacity=2)
    for session in ("a", "b", "c"):
        opens.unanswered(session, f"id-{session}")
    assert opens.request_id("c") == "id-c"
    assert opens.request_id("c") != "id-c"  # taken by the open that sent it again
    assert opens.request_id("b") == "id-b"
    assert uuid.UUID(opens.request_id("a")).version == 4  # pushed out: a fresh one


# --- the clients: closed while an open waits to try again, or is under way ---------------------

#: Waits long enough that an open still waits to try again when the test closes its client (a
#: wait cut short by the close, or not, is told by the attempts the proxy counted).
SLOW_RETRY = RetryPolicy(attempts=10, initial_delay=5.0, max_delay=5.0)


def _open_in_thread(client: SessionLogClient, sid: str) -> tuple[threading.Thread, list[BaseException]]:
    """`client.writer(sid)` on a started daemon thread; the list gets the error it raised."""
    seen: list[BaseException] = []

    def open_writer() -> None:
        try:
            client.writer(sid)
        except BaseException as exc:
            seen.append(exc)

    thread = threading.Thread(target=open_writer, daemon=True)
    thread.start()
    return thread, seen


def _said_closed(seen: list[BaseException]) -> None:
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError), seen
    assert str(seen[0]) == "the client is closed"


def test_closing_the_client_while_a_writers_open_waits_to_retry_says_the_client_is_closed(
    server: ServerThread, sid: str
) -> None:
    """Closed from another thread while the open waited to try again, the open raised gRPC's
    ValueError ("Cannot invoke RPC: Channel closed!") at its next attempt, not the closed
    client's RuntimeError that every other call raises. The wait ends with the close: no
    attempt is made after it."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
    with AnswerLosingProxy(server.target, "Write", losses=SLOW_RETRY.attempts) as proxy:
        client = SessionLogClient(proxy.target, retry=SLOW_RETRY)
        opening, seen = _open_in_thread(client, sid)
        eventually(lambda: len(proxy.lost), lambda lost: lost == 1)  # the first attempt failed
        client.close()
        opening.join(30)
        assert not opening.is_alive()
        assert proxy.calls["Write"] == 1  # the retry loop stopped at the close
    _said_closed(seen)


def test_closing_the_client_while_a_writers_open_is_under_way_says_the_client_is_closed(server: ServerThread) -> None:
    """The open connects through a proxy that delivers nothing (a service that hangs), so it is
    under way, not waiting, when the client is closed, and it has no retry left to notice the
    close: it raised the closed channel's CANCELLED as the service's failure (Unavailable,
    TRANSPORT_ERROR "Channel closed!")."""
    with LatencyProxy(server.target, 0.0) as proxy:
        proxy.stall()
        client = SessionLogClient(proxy.target, retry=ONE_ATTEMPT)
        opening, seen = _open_in_thread(client, "never-reached")
        eventually(lambda: proxy.connections, lambda connections: connections == 1)  # the open connects
        client.close()
        opening.join(30)
        assert not opening.is_alive()
    _said_closed(seen)


def test_closing_the_asyncio_client_while_a_writers_open_waits_to_retry_says_the_client_is_closed(
    server: ServerThread, sid: str
) -> None:
    """As the sync client's: the open raised grpc.aio's UsageError ("Channel is closed.") at its
    next attempt. The close cancels the wait: no attempt is made after it."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)

    async def scenario(proxy: AnswerLosingProxy) -> None:
        client = AsyncSessionLogClient(proxy.target, retry=SLOW_RETRY)
        opening = asyncio.ensure_future(client.writer(sid))
        while not proxy.lost:  # the first attempt failed
            await asyncio.sleep(0.01)
        await client.close()
        with pytest.raises(RuntimeError, match=r"^the client is closed$"):
            await asyncio.wait_for(opening, 30)

    with AnswerLosingProxy(server.target, "Write", losses=SLOW_RETRY.attempts) as proxy:
        asyncio.run(scenario(proxy))
        assert proxy.calls["Write"] == 1  # the retry loop stopped at the close


def test_closing_the_asyncio_client_while_a_writers_open_is_under_way_says_the_client_is_closed(
    server: ServerThread,
) -> None:
    """As the sync client's; the open waited forever: grpc.aio never ends the write of a stream
    that had not connected when its channel was closed."""

    async def scenario(proxy: LatencyProxy) -> None:
        client = AsyncSessionLogClient(proxy.target, retry=ONE_ATTEMPT)
        opening = asyncio.ensure_future(client.writer("never-reached"))
        while proxy.connections < 1:  # the open connects
            await asyncio.sleep(0.01)
        await client.close()
        with pytest.raises(RuntimeError, match=r"^the client is closed$"):
            await asyncio.wait_for(opening, 30)

    with LatencyProxy(server.target, 0.0) as proxy:
        proxy.stall()
        asyncio.run(scenario(proxy))


def test_only_the_first_open_carries_the_request_id() -> None:
    """A reconnect presents its token and no request_id: its token was derived from that id, so
    a lease that passed to another writer and lapsed would be granted under it again, and the
    writer would go on as if it had held it throughout (`WriterCore._lost_meanwhile`)."""
    core = WriterCore("s", "w", create_if_missing=False)
    first = core.open_request(takeover=False, resume=True).open
    assert uuid.UUID(first.request_id).version == 4
    assert core.open_request(takeover=False, resume=True).open.request_id == first.request_id  # a retry
    assert WriterCore("s", "w", create_if_missing=False).request_id != first.request_id  # one per open
    lease = session_pb2.Lease(session_id="s", writer_id="w", epoch=1, expire_time_unix_ms=1)
    core.opened(pb.WriteResponse(opened=pb.WriterOpened(lease=lease, next_seq=0, lease_token="t1")))
    reconnect = core.open_request(takeover=False, resume=False).open
    assert (reconnect.request_id, reconnect.lease_token) == ("", "t1")
