"""A create whose answer was lost can be asked for again (SPEC §2).

A harness names its session, creates it, and must survive a lost answer (a network drop, a
service restarted mid-call). CreateSession answered a second create of the same id with
SESSION_EXISTS, so the harness could not tell its own session from another's, and the clients
did not retry it at all. Now a create asked for again (same id, cwd and metadata) of a
session that holds nothing written since (no event, no lease ever taken) answers with the
session it made; anything else stays SESSION_EXISTS and changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import AlreadyExists
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.tokens import config_line, new_token
from tests.support.events import system, user
from tests.support.lossy_proxy import AnswerLosingProxy
from tests.support.servers import ServerThread

METADATA = {"harness": "claude-code", "task": {"id": 7, "labels": ["a", "b"]}}


def _create(client: SessionLogClient, sid: str, cwd: str, metadata_json: bytes) -> pb.CreateSessionResponse:
    """CreateSession with the metadata's JSON text as given (the clients serialise an object)."""
    request = pb.CreateSessionRequest(session_id=sid, cwd=cwd, metadata_json=metadata_json)
    try:
        response: pb.CreateSessionResponse = client.stub.CreateSession(request, timeout=30)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    return response


def _ids(client: SessionLogClient, sid: str) -> list[str]:
    return [s.id for s in client.list_sessions() if s.id.startswith(sid)]


def test_a_create_asked_for_again_answers_with_the_session_it_made(client: SessionLogClient, sid: str) -> None:
    first = client.create_session(sid, cwd="/home/dev/repo", metadata=METADATA)

    again = client.create_session(sid, cwd="/home/dev/repo", metadata=METADATA)

    assert again == first  # its create_time too: the session made the first time, not a new one
    assert client.get_session(sid) == first
    assert _ids(client, sid) == [sid]


def test_a_bare_create_asked_for_again_answers_with_the_session_it_made(client: SessionLogClient, sid: str) -> None:
    first = client.create_session(sid)
    assert client.create_session(sid) == first
    assert client.create_session(sid, metadata={}) == first  # no metadata is the empty object


def test_the_metadata_is_compared_as_canonical_json(client: SessionLogClient, sid: str) -> None:
    # As a retried event's data is: a retry serialised again is still a retry, and the answer
    # holds the text stored first.
    first = _create(client, sid, "/w", b'{"b": 1, "a": [2.5, "x"]}')
    for same in (b'{"b": 1, "a": [2.5, "x"]}', b'{"a":[2.5,"x"],"b":1}', b'{ "a" : [ 2.5e0, "\\u0078" ] , "b" : 1 }'):
        assert _create(client, sid, "/w", same) == first, same
    for other in (
        b'{"b": 1, "a": ["x", 2.5]}',
        b'{"b": "1", "a": [2.5, "x"]}',
        b'{"b": 1, "a": [2.5, "x"], "c": null}',
    ):
        with pytest.raises(AlreadyExists) as caught:
            _create(client, sid, "/w", other)
        assert caught.value.reason == "SESSION_EXISTS", other
    assert client.get_session(sid).metadata == {"b": 1, "a": [2.5, "x"]}


@pytest.mark.parametrize(
    ("cwd", "metadata", "differs", "said"),
    [
        ("/elsewhere", METADATA, "cwd", "it was created with cwd '/home/dev/repo', this create gives cwd '/elsewhere'"),
        (None, METADATA, "cwd", "it was created with cwd '/home/dev/repo', this create gives no cwd"),
        ("/home/dev/repo", {"harness": "other"}, "metadata", "it was created with other metadata"),
        ("/home/dev/repo", None, "metadata", "it was created with other metadata"),
        ("/w", {}, "cwd,metadata", "this create gives cwd '/w'; it was created with other metadata"),
    ],
    ids=["other-cwd", "no-cwd", "other-metadata", "no-metadata", "both"],
)
def test_another_create_under_a_taken_id_is_refused_and_changes_nothing(
    client: SessionLogClient, sid: str, cwd: str | None, metadata: dict[str, Any] | None, differs: str, said: str
) -> None:
    """The refusal says what differs (in words, and as ErrorInfo `differs`): a harness that
    retried its create with another cwd or metadata learns it from the error, where it could not
    tell that from another's session under its id."""
    first = client.create_session(sid, cwd="/home/dev/repo", metadata=METADATA)
    with pytest.raises(AlreadyExists) as caught:
        client.create_session(sid, cwd=cwd, metadata=metadata)
    assert caught.value.reason == "SESSION_EXISTS"
    assert caught.value.metadata["session_id"] == sid
    assert caught.value.metadata["differs"] == differs
    assert f"session {sid!r} already exists, and this create would not make it: " in caught.value.message
    assert said in caught.value.message
    assert client.get_session(sid) == first
    assert _ids(client, sid) == [sid]


def _with_an_event(client: SessionLogClient, sid: str) -> None:
    with client.writer(sid) as writer:
        writer.append([system("s"), user("hi")]).result()


def _with_a_lease_taken_and_given_back(client: SessionLogClient, sid: str) -> None:
    client.release_lease(client.acquire_lease(sid, writer_id="w"))


def _with_a_lease_held(client: SessionLogClient, sid: str) -> None:
    client.acquire_lease(sid, writer_id="w")


@pytest.mark.parametrize(
    ("written", "differs", "said"),
    [
        (_with_an_event, "events", "it holds 2 events written since it was created"),
        (_with_a_lease_taken_and_given_back, "lease", "a writer took its lease since it was created"),
        (_with_a_lease_held, "lease", "a writer took its lease since it was created"),
    ],
    ids=["an-event", "a-lease-taken-and-given-back", "a-lease-held"],
)
def test_a_create_of_a_session_written_to_since_is_refused_and_changes_nothing(
    client: SessionLogClient, sid: str, written: Callable[[SessionLogClient, str], None], differs: str, said: str
) -> None:
    client.create_session(sid, cwd="/home/dev/repo", metadata=METADATA)
    written(client, sid)
    before = client.get_session(sid)
    events = list(client.read_events(sid))

    with pytest.raises(AlreadyExists) as caught:
        client.create_session(sid, cwd="/home/dev/repo", metadata=METADATA)

    assert caught.value.reason == "SESSION_EXISTS"
    assert caught.value.metadata["differs"] == differs and said in caught.value.message
    assert client.get_session(sid) == before
    assert list(client.read_events(sid)) == events


def test_a_create_under_a_forks_id_is_refused(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    _with_an_event(client, sid)
    fork = client.fork(sid, 1, f"{sid}-fork")
    with pytest.raises(AlreadyExists) as caught:
        client.create_session(fork.id)
    assert caught.value.metadata["differs"] == "parent"
    assert f"it is the fork of session {sid!r} after seq 1" in caught.value.message
    assert client.get_session(fork.id) == fork.session


def test_a_create_asked_for_again_is_its_namespaces_session_and_passes_the_full_quota(db_url: str, sid: str) -> None:
    alice_token, bob_token = new_token(), new_token()
    tokens = [
        config_line(alice_token, f"a-{sid}", read_only=False, name="alice"),
        config_line(bob_token, f"b-{sid}", read_only=False, name="bob"),
    ]
    server = ServerThread(db_url, max_sessions_per_namespace=1, tokens=f"[{', '.join(tokens)}]")
    try:
        with (
            SessionLogClient(server.target, token=alice_token) as alice,
            SessionLogClient(server.target, token=bob_token) as bob,
        ):
            made = alice.create_session(sid, cwd="/w")
            _with_an_event(bob, bob.create_session(sid, cwd="/w").id)  # the same id in another namespace
            assert alice.create_session(sid, cwd="/w") == made  # at the quota: it counts already
            with pytest.raises(AlreadyExists):
                bob.create_session(sid, cwd="/w")  # bob's own session, written to since
            assert [s.id for s in alice.list_sessions()] == [sid]
            assert alice.get_session(sid).next_seq == 0
    finally:
        server.stop()


@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_a_create_whose_answer_was_lost_is_sent_again(server: ServerThread, sid: str, named: bool) -> None:
    with SessionLogClient(server.target) as direct:
        before = {s.id for s in direct.list_sessions()}
        with AnswerLosingProxy(server.target, "CreateSession") as proxy, SessionLogClient(proxy.target) as client:
            made = client.create_session(sid if named else None, cwd="/w", metadata=METADATA)
            assert proxy.calls["CreateSession"] == 2
        if named:
            assert made.id == sid
        assert {s.id for s in direct.list_sessions()} - before == {made.id}  # one session, not two
        assert direct.get_session(made.id) == made


def test_the_asyncio_client_sends_a_lost_create_again(server: ServerThread, sid: str) -> None:
    async def create_through(target: str) -> str:
        async with AsyncSessionLogClient(target) as client:
            return (await client.create_session(sid, cwd="/w", metadata=METADATA)).id

    with AnswerLosingProxy(server.target, "CreateSession") as proxy:
        assert asyncio.run(create_through(proxy.target)) == sid
        assert proxy.calls["CreateSession"] == 2
    with SessionLogClient(server.target) as direct:
        assert _ids(direct, sid) == [sid]
