"""A streaming writer's first open whose answer was lost can be sent again (SPEC §7, AIP-155).

A writer's first `open` has no lease token to reconnect with. When its `opened` was lost (the
service granted the lease, or resumed the session, and the stream broke on the way back), the
clients raised Unavailable at once, and the harness's own retry of the same open was refused
WRITER_HELD, by the lease it never saw, until that lapsed (the lease TTL, 30 s by default); a
resume's retry then named none of the repairs the lost one wrote. Now the open carries a
`request_id`, as AcquireLease and ResumeSession do: the clients make one per open and try the
open again on a transient failure, within the writer's reconnect policy, and a retry takes the
lost open's lease again (a new epoch, the same token), a resume written once.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, SessionLogError
from sessionlog.errors import from_rpc_error
from sessionlog.session_info import lease_from_pb
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note, open_turn_log

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
    assert (list(again.repair_seqs), again.end_seed_seq, again.next_seq, again.last_turn) == (
        list(first.repair_seqs),
        first.end_seed_seq,
        first.next_seq,
        first.last_turn,
    )
    assert [e.type for e in written[head:]] == RESUME_WRITES


def test_an_open_whose_request_id_is_no_uuid_is_refused_and_creates_nothing(client: SessionLogClient, sid: str) -> None:
    refused = _refused_open(client, sid, request_id="not-a-uuid", create_if_missing=True)

    assert (refused.code, refused.reason, refused.field) == ("INVALID_ARGUMENT", "BAD_REQUEST_ID", "request_id")
    assert "not-a-uuid" not in refused.message
    with pytest.raises(NotFound):  # not created
        client.get_session(sid)
