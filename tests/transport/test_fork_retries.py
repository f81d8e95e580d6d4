"""A fork whose answer was lost can be asked for again (SPEC §8).

A harness forks its session at a decision point, one fork per candidate plan, and must survive
its own crash and lost answers. ForkSession was the one lifecycle write that could not be sent
again: with the harness's own id the retry was SESSION_EXISTS (its fork, or another session?),
with a generated id a second fork, and the clients did not retry it at all. Now a fork asked
for again (same source, same seq, same new id) answers with the fork it made, and the clients
name every fork and retry it on UNAVAILABLE, as they do appends.
"""

from __future__ import annotations

import asyncio

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import AlreadyExists
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import open_turn_log, system, user
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread


def _decision_point(client: SessionLogClient, sid: str) -> int:
    """A session whose turn is open with two tool calls pending; its head seq."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(open_turn_log()).result()
    return client.get_session(sid).next_seq - 1


def _fork(client: SessionLogClient, sid: str, at_seq: int, new_id: str) -> pb.ForkSessionResponse:
    request = pb.ForkSessionRequest(session_id=sid, at_seq=at_seq, new_session_id=new_id)
    return client.stub.ForkSession(request, timeout=30)


def test_a_fork_asked_for_again_answers_with_the_fork_it_made(client: SessionLogClient, sid: str) -> None:
    head = _decision_point(client, sid)
    first = _fork(client, sid, head, f"{sid}-plan1")
    assert list(first.repair_seqs) == [head + 2, head + 3, head + 4, head + 5]
    with client.writer(f"{sid}-plan1") as writer:  # the sub-agent went on before the retry
        writer.append([user("sub-agent 1")]).result()
    written = list(client.read_events(f"{sid}-plan1"))

    again = _fork(client, sid, head, f"{sid}-plan1")

    assert again.session.id == f"{sid}-plan1"
    assert (again.session.parent.session_id, again.session.parent.fork_seq) == (sid, head)
    assert list(again.repair_seqs) == list(first.repair_seqs)
    assert again.session.next_seq == written[-1].seq + 1
    assert list(client.read_events(f"{sid}-plan1")) == written  # nothing appended twice
    assert [s.id for s in client.list_sessions(parent_session_id=sid)] == [f"{sid}-plan1"]


def test_another_fork_under_a_taken_id_is_refused_and_changes_nothing(client: SessionLogClient, sid: str) -> None:
    head = _decision_point(client, sid)
    fork = client.fork(sid, head, f"{sid}-plan1")
    client.create_session(f"{sid}-other")
    with client.writer(f"{sid}-other") as writer:
        writer.append([system("other")]).result()
    refused = [
        (sid, head - 1, fork.id, "fork_seq", f"it is the fork of session {sid!r} after seq {head}, not {head - 1}"),
        (f"{sid}-other", 0, fork.id, "parent", f"it is the fork of session {sid!r} after seq {head}"),
        (sid, head, f"{sid}-other", "parent", "it is no fork"),
    ]
    for source, at_seq, new_id, differs, said in refused:
        with pytest.raises(AlreadyExists) as caught:
            client.fork(source, at_seq, new_id)
        assert caught.value.reason == "SESSION_EXISTS"
        assert caught.value.metadata == {"session_id": new_id, "differs": differs}
        assert f"session {new_id!r} already exists, and this fork would not make it: {said}" == caught.value.message
    assert client.get_session(fork.id) == fork.session
    assert client.get_session(f"{sid}-other").next_seq == 1
    assert [s.id for s in client.list_sessions(parent_session_id=sid)] == [fork.id]


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_fork_whose_answer_was_lost_is_sent_again(server: ServerThread, sid: str, named: bool) -> None:
    with SessionLogClient(server.target) as direct:
        head = _decision_point(direct, sid)
        with AnswerLosingProxy(server.target, "ForkSession") as proxy, SessionLogClient(proxy.target) as client:
            fork = client.fork(sid, head, f"{sid}-plan1" if named else None)
            assert proxy.calls["ForkSession"] == 2
        if named:
            assert fork.id == f"{sid}-plan1"
        assert [s.id for s in direct.list_sessions(parent_session_id=sid)] == [fork.id]  # one fork, not two
        assert direct.get_session(fork.id).parent_session_id == sid


def test_the_asyncio_client_sends_a_lost_fork_again(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as direct:
        head = _decision_point(direct, sid)

        async def fork_through(target: str) -> str:
            async with AsyncSessionLogClient(target) as client:
                return (await client.fork(sid, head)).id

        with AnswerLosingProxy(server.target, "ForkSession") as proxy:
            fork_id = asyncio.run(fork_through(proxy.target))
            assert proxy.calls["ForkSession"] == 2
        assert [s.id for s in direct.list_sessions(parent_session_id=sid)] == [fork_id]
