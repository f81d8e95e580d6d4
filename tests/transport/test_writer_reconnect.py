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
from sessionlog.core.events import NewEvent
from sessionlog.requests import batch_request, header_report_from_pb, header_write_request, open_request, with_event_ids
from sessionlog.v1 import session_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note, user


def test_the_service_keeps_the_holders_token_and_refuses_one_whose_lease_passed_on(
    client: SessionLogClient, sid: str
) -> None:
    client.create_session(sid)
    first = client.acquire_lease(sid, writer_id="a")
    again = client.acquire_lease(sid, writer_id="a", lease_token=first.token)  # a reconnect
    assert again.token == first.token and again.epoch == first.epoch + 1
    other = client.acquire_lease(sid, writer_id="b", takeover=True)
    with pytest.raises(OwnershipLost):  # the old holder's token takes nothing from a live holder
        client.acquire_lease(sid, writer_id="a", lease_token=first.token)
    with pytest.raises(WriterHeld):  # asked for afresh, the lease is another's
        client.acquire_lease(sid, writer_id="a")
    client.release_lease(other)
    with pytest.raises(OwnershipLost):  # nor from no one, once its lease passed on: it must ask afresh
        client.acquire_lease(sid, writer_id="a", lease_token=first.token)
    afresh = client.acquire_lease(sid, writer_id="a")
    assert afresh.token not in (first.token, other.token) and afresh.epoch == other.epoch + 1


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


def _write(client: SessionLogClient, opening: pb.WriteRequest, sent: list[pb.WriteRequest]) -> list[pb.WriteResponse]:
    """One writer stream: `open`, the requests, then the answers to all of them (the stream is
    then dropped, as a connection that broke)."""
    call = client.stub.Write(iter([opening, *sent]))
    answers = []
    for response in call:
        answers.append(response)
        if len(answers) == len(sent) + 1:
            break
    call.cancel()
    return answers


def _report(response: pb.WriteResponse) -> tuple[str | None, int | None, list[str]]:
    report = header_report_from_pb(response.header_ack.result)
    return report.reason, report.header_seq, report.changed_fields


def test_header_reports_re_sent_after_lost_answers_are_answered_from_the_log(
    client: SessionLogClient, sid: str
) -> None:
    # A writer reported model B, appended a batch, reported model A again; the service logged
    # both changes, then the answers were lost (the service was killed before sending them).
    # The writer reconnects and re-sends the three: decided again, B and A were logged a second
    # time, and the request at those seqs named a model that no call used there.
    a, b = {"config": {"model": "a"}}, {"config": {"model": "b"}}
    client.create_session(sid)
    answered = _write(
        client,
        open_request(sid, "w", False, False),
        [header_write_request(1, a), batch_request(2, [NewEvent.from_json({**user("hi"), "eventId": "u1"})])],
    )
    token, acknowledged = answered[0].opened.lease_token, answered[-1].ack.next_seq
    lost = [
        header_write_request(10, b),
        batch_request(11, with_event_ids([note(1)])),
        header_write_request(12, a),
        header_write_request(13, a),  # unchanged: logs nothing
    ]
    first = _write(client, open_request(sid, "w", False, False, lease_token=token), lost)
    logged = [(e.seq, e.data["reason"]) for e in client.read_events(sid) if e.type == "request/header"]
    assert logged == [(0, "initial"), (acknowledged, "change"), (acknowledged + 2, "change")]
    opening = open_request(sid, "w", False, False, lease_token=token, acknowledged_next_seq=acknowledged)
    again = _write(client, opening, [*lost, header_write_request(14, b)])
    reports = [_report(r) for r in again if r.HasField("header_ack")]
    # the re-sent answers equal the lost ones, the fields each change changed included
    lost_answers = [r.header_ack.result for r in first if r.HasField("header_ack")]
    assert [r.header_ack.result for r in again if r.HasField("header_ack")][:3] == lost_answers
    assert reports == [
        ("change", acknowledged, ["model"]),
        ("change", acknowledged + 2, ["model"]),
        (None, acknowledged + 2, []),
        ("change", acknowledged + 3, ["model"]),
    ]
    headers = [(e.seq, e.data["reason"]) for e in client.read_events(sid) if e.type == "request/header"]
    assert headers == [*logged, (acknowledged + 3, "change")]  # only the new report was logged
    assert client.request(sid)["request"]["model"] == "b"


def test_a_reconnect_says_where_its_acknowledgements_end_a_logged_header_included() -> None:
    core = WriterCore("s", "w", create_if_missing=False)
    assert not core.open_request(takeover=False, resume=False).open.HasField("acknowledged_next_seq")
    core.opened(_opened(1, "t1"))
    batch = pb.WriteResponse(ack=pb.BatchAck(batch_id=1, seqs=[0, 1], next_seq=2))
    header = pb.WriteResponse(
        header_ack=pb.HeaderAck(
            batch_id=2,
            result=pb.ReportRequestHeaderResponse(reason=pb.HEADER_REASON_CHANGE, header_seq=2, appended=True),
        )
    )
    unchanged = pb.WriteResponse(
        header_ack=pb.HeaderAck(batch_id=3, result=pb.ReportRequestHeaderResponse(header_seq=2, appended=False))
    )
    for response in (batch, header, unchanged):
        core.acknowledged(response)
    assert core.open_request(takeover=False, resume=False).open.acknowledged_next_seq == 3
