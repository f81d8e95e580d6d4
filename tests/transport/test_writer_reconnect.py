"""A writer's reconnect never re-acquires a lease quietly (the rule both Python writers share
in `sessionlog.base.WriterCore`; the TypeScript writer has the same rule).

A reconnect presents the lease token. The service keeps the holder's token when the holder
takes its own lease again, and grants a fresh one when the lease had passed to another writer
and lapsed; a live other holder is WRITER_HELD. The writer turns the last two into
OwnershipLost. The first test shows the service behaviour on a real server, the others the
writer's reading of it.
"""

from __future__ import annotations

import pytest

from sessionlog.base import WriterCore
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import OwnershipLost, WriterHeld
from sessionlog.v1 import session_pb2
from sessionlog.v1 import session_service_pb2 as pb


def test_the_service_keeps_the_holders_token_and_gives_anyone_else_a_fresh_one(
    client: SessionLogClient, sid: str
) -> None:
    client.create_session(sid)
    first = client.acquire_lease(sid, writer_id="a")
    again = client.acquire_lease(sid, writer_id="a", lease_token=first.token)  # a reconnect
    assert again.token == first.token and again.epoch == first.epoch + 1
    other = client.acquire_lease(sid, writer_id="b", takeover=True)
    with pytest.raises(WriterHeld):  # the old holder's token takes nothing from a live holder
        client.acquire_lease(sid, writer_id="a", lease_token=first.token)
    client.release_lease(other)
    late = client.acquire_lease(sid, writer_id="a", lease_token=first.token)
    assert late.token not in (first.token, other.token), "a lease that passed on comes back with a fresh token"


def _opened(epoch: int, token: str) -> pb.WriteResponse:
    lease = session_pb2.Lease(session_id="s", writer_id="w", epoch=epoch, expire_time_unix_ms=1)
    return pb.WriteResponse(opened=pb.WriterOpened(lease=lease, next_seq=0, lease_token=token))


def test_a_reconnect_that_keeps_the_token_goes_on() -> None:
    core = WriterCore("s", "w", create_if_missing=False)
    core.opened(_opened(1, "t1"))
    assert core.open_request(takeover=False, resume=False).open.lease_token == "t1"
    core.opened(_opened(2, "t1"))
    assert core.reconnects == 1 and core.lease is not None and core.lease.epoch == 2


def test_a_reconnect_granted_a_fresh_token_is_ownership_lost() -> None:
    core = WriterCore("s", "w", create_if_missing=False)
    core.opened(_opened(1, "t1"))
    with pytest.raises(OwnershipLost):
        core.opened(_opened(4, "t3"))


def test_without_tokens_an_epoch_jump_is_ownership_lost() -> None:
    core = WriterCore("s", "w", create_if_missing=False)
    core.opened(_opened(1, ""))
    core.opened(_opened(2, ""))
    with pytest.raises(OwnershipLost):
        core.opened(_opened(4, ""))


def test_a_live_other_holder_on_reconnect_is_ownership_lost() -> None:
    core = WriterCore("s", "w", create_if_missing=False)
    lost = core.lost(WriterHeld("WRITER_HELD", "held", session_id="s", holder="b", epoch=3, expires_at=9))
    assert isinstance(lost, OwnershipLost) and lost.metadata == {"session_id": "s", "holder": "b", "epoch": "3"}
