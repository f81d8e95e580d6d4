"""A lease grant or resume whose answer was lost can be sent again (SPEC §7, AIP-155).

AcquireLease and ResumeSession grant the writer lease and return its token, the holder's
secret. When the answer was lost, the clients did not retry, and the harness's own retry was
refused WRITER_HELD until the lease it never saw lapsed (30 s by default). Now each call carries
a `request_id`, a UUID the client makes once and sends again on every retry: the token is
derived from it, so a retry finds the lease held under that token and takes it again (a new
epoch, the same token), and a resume's retry writes neither its repairs nor its seed twice.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import SessionLogError, Unavailable, WriterHeld
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.answers import resume_answer
from tests.support.events import note, open_turn_log
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread

A_UUID = str(uuid.UUID(int=7))


def _raw_note(n: int) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type="test/note", ignorable=True, data_json=b'{"n": %d}' % n)


def _acquire(client: SessionLogClient, sid: str, request_id: str, **fields: Any) -> pb.AcquireLeaseResponse:
    request = pb.AcquireLeaseRequest(session_id=sid, request_id=request_id, **fields)
    return client.stub.AcquireLease(request, timeout=30)


def _resume(client: SessionLogClient, sid: str, request_id: str, **fields: Any) -> pb.ResumeSessionResponse:
    request = pb.ResumeSessionRequest(session_id=sid, request_id=request_id, **fields)
    return client.stub.ResumeSession(request, timeout=30)


def _append(client: SessionLogClient, sid: str, token: str, n: int) -> pb.AppendEventsResponse:
    request = pb.AppendEventsRequest(session_id=sid, lease_token=token, events=[_raw_note(n)])
    return client.stub.AppendEvents(request, timeout=30)


def _refused(call: Callable[[], object]) -> SessionLogError:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return from_rpc_error(refused.value)


def _crashed_mid_turn(client: SessionLogClient, sid: str) -> None:
    """A session whose writer went away with a turn open and two tool calls pending."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(open_turn_log()).result()


@pytest.mark.parametrize("method", ["AcquireLease", "ResumeSession"])
def test_the_same_request_id_again_gets_the_same_working_token(client: SessionLogClient, sid: str, method: str) -> None:
    client.create_session(sid)
    grant = _acquire if method == "AcquireLease" else _resume
    request_id = str(uuid.uuid4())
    first = grant(client, sid, request_id, writer_id="w")

    again = grant(client, sid, request_id, writer_id="w")

    assert again.lease_token == first.lease_token
    assert again.lease.epoch == first.lease.epoch + 1  # the first grant's epoch is fenced
    assert client.get_session(sid).lease.epoch == again.lease.epoch  # type: ignore[union-attr]
    assert list(_append(client, sid, again.lease_token, 1).seqs) == [again.next_seq]
    # Any case spells the same UUID.
    assert grant(client, sid, request_id.upper(), writer_id="w").lease_token == first.lease_token


@pytest.mark.parametrize("method", ["AcquireLease", "ResumeSession"])
def test_another_request_id_or_none_is_writer_held(client: SessionLogClient, sid: str, method: str) -> None:
    client.create_session(sid)
    grant = _acquire if method == "AcquireLease" else _resume
    held = grant(client, sid, str(uuid.uuid4()))
    for other in (str(uuid.uuid4()), ""):
        refused = _refused(lambda other=other: grant(client, sid, other))  # type: ignore[misc]
        assert refused.reason == "WRITER_HELD"
    assert client.get_session(sid).lease.epoch == held.lease.epoch  # type: ignore[union-attr]


@pytest.mark.parametrize("method", ["AcquireLease", "ResumeSession"])
def test_a_retry_after_a_takeover_is_writer_held(client: SessionLogClient, sid: str, method: str) -> None:
    client.create_session(sid)
    grant = _acquire if method == "AcquireLease" else _resume
    request_id = str(uuid.uuid4())
    lost = grant(client, sid, request_id)
    taker = client.acquire_lease(sid, writer_id="operator", takeover=True)

    refused = _refused(lambda: grant(client, sid, request_id))

    assert refused.reason == "WRITER_HELD" and refused.metadata["holder"] == "operator"
    assert _refused(lambda: _append(client, sid, lost.lease_token, 1)).reason == "OWNERSHIP_LOST"
    assert client.append(sid, taker, [note(2)]).seqs == [lost.next_seq]  # the taker keeps it


def test_a_retried_resume_writes_its_repairs_and_seed_once(client: SessionLogClient, sid: str) -> None:
    _crashed_mid_turn(client, sid)
    head = client.get_session(sid).next_seq
    request_id = str(uuid.uuid4())
    first = _resume(client, sid, request_id, writer_id="harness")
    assert list(first.repair_seqs) == [head, head + 1, head + 2, head + 3]  # two results, step, turn
    assert first.end_seed_seq == head + 4
    written = list(client.read_events(sid))

    again = _resume(client, sid, request_id, writer_id="harness")

    assert list(client.read_events(sid)) == written  # nothing written twice
    assert resume_answer(again) == resume_answer(first)
    assert again.lease_token == first.lease_token
    assert list(_append(client, sid, again.lease_token, 1).seqs) == [first.next_seq]


def test_a_resume_of_a_repaired_session_names_no_repairs_of_others(client: SessionLogClient, sid: str) -> None:
    """The repairs a retry names are its own lease's: another writer's resume before it wrote
    the repairs and seed the log ends with, and this resume (retried or not) wrote nothing."""
    _crashed_mid_turn(client, sid)
    other = client.resume(sid, writer_id="first")
    assert other.repair_seqs
    client.release_lease(other.lease)
    request_id = str(uuid.uuid4())
    for _ in range(2):
        answer = _resume(client, sid, request_id)
        assert (list(answer.repair_seqs), answer.end_seed_seq) == ([], other.end_seed_seq)


@pytest.mark.parametrize("method", ["AcquireLease", "ResumeSession"])
@pytest.mark.parametrize("bad", ["not-a-uuid", "{" + A_UUID + "}", A_UUID + "\n", A_UUID.replace("-", "")])
def test_a_request_id_that_is_no_uuid_is_refused_and_changes_nothing(
    client: SessionLogClient, sid: str, method: str, bad: str
) -> None:
    client.create_session(sid)
    grant = _acquire if method == "AcquireLease" else _resume
    before = client.get_session(sid)

    refused = _refused(lambda: grant(client, sid, bad))

    assert (refused.code, refused.reason, refused.field) == ("INVALID_ARGUMENT", "BAD_REQUEST_ID", "request_id")
    assert bad not in refused.message
    assert client.get_session(sid) == before


def test_no_log_line_names_the_request_id(server: ServerThread, sid: str) -> None:
    request_id = str(uuid.uuid4())
    with SessionLogClient(server.target) as client, capture_logs() as logs:
        _crashed_mid_turn(client, sid)
        first = _resume(client, sid, request_id)
        _resume(client, sid, request_id)
        _refused(lambda: _acquire(client, sid, str(uuid.uuid4())))
    assert any(entry["event"] == "rpc" and entry["method"] == "ResumeSession" for entry in logs)
    for secret in (request_id, first.lease_token):
        assert not [entry for entry in logs if secret in repr(entry)]


# --- the clients: a lost answer is sent again -------------------------------------------------


@pytest.mark.parametrize("method", ["AcquireLease", "ResumeSession"])
def test_a_grant_whose_answer_was_lost_is_sent_again(server: ServerThread, sid: str, method: str) -> None:
    with SessionLogClient(server.target) as direct:
        _crashed_mid_turn(direct, sid)
        head = direct.get_session(sid).next_seq
        with AnswerLosingProxy(server.target, method) as proxy, SessionLogClient(proxy.target) as client:
            if method == "AcquireLease":
                lease = client.acquire_lease(sid, writer_id="harness")
            else:
                resumed = client.resume(sid, writer_id="harness")
                lease = resumed.lease
                assert resumed.repair_seqs == [head, head + 1, head + 2, head + 3]
                assert resumed.end_seed_seq == head + 4
            assert proxy.calls[method] == 2
            closing = 5 if method == "ResumeSession" else 0  # the repairs and the seed, once
            assert client.append(sid, lease, [note(1)]).seqs == [head + closing]


def test_the_asyncio_client_sends_a_lost_grant_and_resume_again(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as direct:
        _crashed_mid_turn(direct, sid)
        head = direct.get_session(sid).next_seq

    async def through(target: str) -> tuple[list[int], int]:
        async with AsyncSessionLogClient(target) as client:
            resumed = await client.resume(sid)
            await client.release_lease(resumed.lease)
            lease = await client.acquire_lease(sid)
            return resumed.repair_seqs, (await client.append(sid, lease, [note(1)])).seqs[0]

    with AnswerLosingProxy(server.target, "ResumeSession") as resumes:
        with AnswerLosingProxy(resumes.target, "AcquireLease") as proxy:
            repairs, seq = asyncio.run(through(proxy.target))
        assert (resumes.calls["ResumeSession"], proxy.calls["AcquireLease"]) == (2, 2)
    assert repairs == [head, head + 1, head + 2, head + 3]
    assert seq == head + 5


def test_every_retry_of_a_grant_sends_its_first_request_id(server: ServerThread, sid: str) -> None:
    """All eight attempts of one `acquire_lease` whose answers were all lost took one lease,
    again and again under one token (one epoch each), and nobody else's: the lease is still
    held by that token, which the caller never learnt, as an unretried lost grant left it."""
    with SessionLogClient(server.target) as direct:
        direct.create_session(sid)
        before = direct.acquire_lease(sid)
        direct.release_lease(before)
        with (
            AnswerLosingProxy(server.target, "AcquireLease", losses=8) as proxy,
            SessionLogClient(proxy.target) as client,
            pytest.raises(Unavailable) as lost,
        ):
            client.acquire_lease(sid)
        assert lost.value.reason == "TRANSPORT_ERROR" and proxy.calls["AcquireLease"] == 8
        held = direct.get_session(sid).lease
        assert held is not None and held.epoch == before.epoch + 8
        with pytest.raises(WriterHeld):
            direct.acquire_lease(sid)
