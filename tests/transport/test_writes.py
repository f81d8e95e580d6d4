"""The write path through a real gRPC server, on SQLite and PostgreSQL (issue 2)."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import (
    ExpectedSeqMismatch,
    LimitExceeded,
    NotFound,
    OwnershipLost,
    ValidationError,
    WriterHeld,
)
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import note, turn_end, turn_start, user
from tests.support.servers import ServerThread


def seqs_of(client: SessionLogClient, sid: str) -> list[int]:
    return [e.seq for e in client.read_events(sid)]


def test_eight_concurrent_writers_keep_seqs_contiguous(client: SessionLogClient, server: ServerThread) -> None:
    sids = [f"conc-{i}-{threading.get_ident()}-{id(client)}" for i in range(8)]
    errors: list[BaseException] = []

    def write(sid: str) -> None:
        try:
            with client.writer(sid, create_if_missing=True) as writer:
                futures = [writer.append([note(i * 5 + j) for j in range(5)]) for i in range(40)]
                for future in futures:
                    future.result()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for sid in sids:
        events = list(client.read_events(sid))
        assert [e.seq for e in events] == list(range(200))
        assert [e.data["n"] for e in events] == list(range(200))


def test_second_writer_is_refused_naming_the_holder(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid, writer_id="first"):
        with pytest.raises(WriterHeld) as refused:
            client.writer(sid, writer_id="second")
        assert refused.value.reason == "WRITER_HELD"
        assert refused.value.metadata["holder"] == "first"
        assert int(refused.value.metadata["expires_at"]) > 0
        with pytest.raises(WriterHeld):
            client.acquire_lease(sid, writer_id="third")


def test_takeover_fences_the_old_writer(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    old = client.writer(sid, writer_id="old")
    old.append([note(0)]).result()
    new = client.writer(sid, writer_id="new", takeover=True)
    assert new.lease.epoch > old.lease.epoch
    with pytest.raises(OwnershipLost):
        old.append([note(1)]).result()
    new.append([note(2)]).result()
    new.close()
    assert [e.data["n"] for e in client.read_events(sid)] == [0, 2]


def test_a_fenced_writer_is_told_so_after_the_new_holder_released_the_lease(client: SessionLogClient, sid: str) -> None:
    # Once the writer that took over had given the lease back, the old one's next batch was
    # checked against the new log first: a turn/end of its own turn was refused NO_OPEN_TURN,
    # which looked like a bug in the harness's events rather than a lost lease.
    client.create_session(sid)
    old = client.writer(sid, writer_id="old")
    old.append([user("hi"), turn_start(1)]).result()
    with client.writer(sid, writer_id="new", takeover=True, resume=True) as new:
        new.append([turn_start(2), turn_end(2)]).result()
    before = seqs_of(client, sid)
    with pytest.raises(OwnershipLost, match="no longer holds"):
        old.append([turn_end(1)]).result()
    assert seqs_of(client, sid) == before


def test_unary_writer_is_fenced_by_epoch(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid, writer_id="a")
    client.append(sid, lease, [note(0)])
    newer = client.acquire_lease(sid, writer_id="b", takeover=True)
    with pytest.raises(OwnershipLost):
        client.append(sid, lease, [note(1)])
    client.append(sid, newer, [note(2)])
    renewed = client.renew_lease(newer)
    assert renewed.expire_time >= newer.expire_time
    client.release_lease(newer)
    client.acquire_lease(sid, writer_id="c")  # released: free at once
    assert [e.data["n"] for e in client.read_events(sid)] == [0, 2]


def test_idempotent_retry_appends_nothing(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    batch = [note(0, eventId="a"), note(1, eventId="b")]
    first = client.append(sid, lease, batch, expected_next_seq=0)
    again = client.append(sid, lease, batch, expected_next_seq=0)
    assert first.seqs == again.seqs == [0, 1]
    mixed = client.append(sid, lease, [note(1, eventId="b"), note(2, eventId="c")])
    assert mixed.seqs == [1, 2]
    new_first = client.append(sid, lease, [note(3, eventId="d"), note(0, eventId="a"), note(4, eventId="e")])
    assert new_first.seqs == [3, 0, 4]  # each retried id's seq in its place, new ones in order
    assert seqs_of(client, sid) == [0, 1, 2, 3, 4]


def test_an_event_id_sent_again_with_another_event_is_refused_not_acknowledged(
    client: SessionLogClient, sid: str
) -> None:
    # A harness restarted after a crash that numbers its eventIds afresh (a counter from 1)
    # sends a new event under an id the log already holds: it was answered with the old
    # event's seq, so an event acknowledged as durable was never stored.
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, [note(0, eventId="a"), note(1, eventId="b")])
    with pytest.raises(ValidationError) as reused:
        client.append(sid, lease, [note(2, eventId="c"), note(7, eventId="b")])
    assert reused.value.reason == "EVENT_ID_REUSED"
    assert reused.value.metadata["seq"] == "1" and reused.value.metadata["event_index"] == "1"
    assert "eventId 'b'" in reused.value.message and "seq 1" in reused.value.message
    with pytest.raises(ValidationError, match="eventId 'a' names the test/note at seq 0"):
        client.append(sid, lease, [{**user("hello"), "eventId": "a"}])  # another type under the id
    assert seqs_of(client, sid) == [0, 1]  # nothing of either batch was written
    assert client.append(sid, lease, [note(1, eventId="b"), note(2, eventId="c")]).seqs == [1, 2]  # a true retry


def test_batch_with_one_bad_event_stores_nothing(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, [note(0)])
    with pytest.raises(ValidationError) as bad:
        client.append(sid, lease, [note(1), {"type": "no/such-type", "data": {}}, note(2)])
    assert bad.value.reason == "UNKNOWN_TYPE"
    assert bad.value.metadata["event_index"] == "1"
    assert seqs_of(client, sid) == [0]
    assert client.append(sid, lease, [note(3)]).seqs == [1]


def test_a_batch_the_fold_refuses_leaves_the_session_as_it_was(client: SessionLogClient, sid: str) -> None:
    """Refusals by the fold's own rules (not the envelope checks before it): one event alone,
    and a batch whose second event breaks a rule only against its first. Either way the next
    batch is judged against the session as it was, and gets the seqs that follow it."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    opened = client.append(sid, lease, [turn_start(1), user("hi")])
    with pytest.raises(ValidationError):
        client.append(sid, lease, [turn_start(2)])  # a turn is open
    with pytest.raises(ValidationError) as twice:
        client.append(sid, lease, [turn_end(1), turn_end(1)])  # the first closes it
    assert twice.value.metadata["event_index"] == "1"
    assert seqs_of(client, sid) == list(range(opened.next_seq))
    closed = client.append(sid, lease, [user("again"), turn_end(1)])
    assert closed.seqs == [opened.next_seq, opened.next_seq + 1]
    history = client.model_history(sid)
    assert [m["content"] for m in history if m["role"] == "user"] == ["hi", "again"]


@pytest.mark.parametrize(
    ("event", "error", "reason"),
    [
        ({"type": "mystery/event", "data": {}}, ValidationError, "UNKNOWN_TYPE"),
        ({"type": "test/x", "data": [1, 2], "ignorable": True}, ValidationError, "DATA_NOT_OBJECT"),
        ({"type": "user/message", "data": {"message": {}}}, ValidationError, "SURFACE_OP_MISSING"),
        ({"type": "turn/start", "data": {"turn": 1}, "surfaceOp": "append"}, ValidationError, "SURFACE_OP_NOT_ALLOWED"),
    ],
)
def test_bad_events_are_refused_and_change_nothing(
    client: SessionLogClient, sid: str, event: dict, error: type, reason: str
) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, [note(0)])
    with pytest.raises(error) as refused:
        append_raw(client, sid, lease, [event])
    assert refused.value.reason == reason
    assert refused.value.grpc_code == grpc.StatusCode.INVALID_ARGUMENT
    assert seqs_of(client, sid) == [0]


def append_raw(client: SessionLogClient, sid: str, lease: object, events: list[dict]) -> None:
    """Send events as they are, bypassing the client's own validation, so the server judges."""
    import json

    from sessionlog.errors import from_rpc_error
    from sessionlog.v1 import event_pb2
    from sessionlog.v1 import session_service_pb2 as pb

    messages = []
    for event in events:
        message = event_pb2.NewEvent(
            type=event["type"], data_json=json.dumps(event["data"]).encode(), ignorable=event.get("ignorable", False)
        )
        if event.get("surfaceOp") == "append":
            message.surface_op.append.SetInParent()
        messages.append(message)
    request = pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=messages)
    try:
        client.stub.AppendEvents(request)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None


def test_nan_and_bad_utf8_payloads_are_refused(client: SessionLogClient, sid: str) -> None:
    from sessionlog.v1 import event_pb2
    from sessionlog.v1 import session_service_pb2 as pb

    client.create_session(sid)
    lease = client.acquire_lease(sid)
    for raw, reason in [
        (b'{"x": NaN}', "NON_FINITE_NUMBER"),
        (b'{"x": Infinity}', "NON_FINITE_NUMBER"),
        (b'{"x": "\xff"}', "INVALID_UTF8"),
        (b'{"x": ', "MALFORMED_JSON"),
    ]:
        request = pb.AppendEventsRequest(
            session_id=sid,
            lease_token=lease.token,
            events=[event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=raw)],
        )
        with pytest.raises(grpc.RpcError) as refused:
            client.stub.AppendEvents(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        from sessionlog.errors import from_rpc_error

        assert from_rpc_error(refused.value).reason == reason
    assert seqs_of(client, sid) == []


def test_wrong_expected_seq_and_unknown_session(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, [note(0)])
    with pytest.raises(ExpectedSeqMismatch) as mismatch:
        client.append(sid, lease, [note(1)], expected_next_seq=5)
    assert mismatch.value.grpc_code == grpc.StatusCode.FAILED_PRECONDITION
    assert mismatch.value.metadata["next_seq"] == "1"
    assert seqs_of(client, sid) == [0]
    with pytest.raises(NotFound):
        client.acquire_lease("no-such-session-" + sid)
    with pytest.raises(NotFound):
        list(client.read_events("no-such-session-" + sid))


def test_oversize_event_is_refused(db_url: str, sid: str) -> None:
    server = ServerThread(db_url, max_event_bytes=1000)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            with pytest.raises(LimitExceeded) as refused:
                client.append(sid, lease, [note(0), {"type": "test/big", "ignorable": True, "data": {"x": "y" * 2000}}])
            assert refused.value.grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refused.value.metadata["limit"] == "1000"
            assert seqs_of(client, sid) == []
    finally:
        server.stop()


def test_twenty_megabyte_payload_round_trips(client: SessionLogClient, sid: str) -> None:
    big = "".join(chr(0x41 + i % 26) for i in range(1000)) * 20_000 + "é中😀"
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(
            [user("run it"), {"type": "test/out", "ignorable": True, "data": {"out": big, "again": big}}]
        ).result()
    events = list(client.read_events(sid))
    assert events[-1].data == {"out": big, "again": big}
    assert events[1].data["message"]["content"] == "run it"


def test_nul_characters_round_trip(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([{"type": "test/bin", "ignorable": True, "data": {"out": "a\x00b", "k": ["\x00"]}}]).result()
    assert next(iter(client.read_events(sid))).data == {"out": "a\x00b", "k": ["\x00"]}


def test_a_metadata_value_postgresql_cannot_hold_is_refused_in_one_line(client: SessionLogClient, sid: str) -> None:
    # PostgreSQL's JSONB holds no NUL character; SQLite would store it. Both refuse it alike,
    # in one line, before the database is asked (no driver DETAIL/CONTEXT lines).
    metadata = {"x": "a\x00b"}
    with pytest.raises(ValidationError) as refused:
        client.create_session(sid, metadata=metadata)
    assert refused.value.reason == "UNSTORABLE_VALUE"
    assert refused.value.metadata.get("field") == "metadata"
    assert "\n" not in refused.value.message and "NUL" in refused.value.message
    with pytest.raises(NotFound):
        client.get_session(sid)


def _refused(call: Any) -> tuple[str, str, str]:
    """The reason, field and message of an INVALID_ARGUMENT refusal (an RPC error otherwise)."""
    with pytest.raises(grpc.RpcError) as refused:
        call()
    error = from_rpc_error(refused.value)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    return error.reason, str(error.metadata.get("field")), error.message


@pytest.mark.parametrize(
    ("case", "reason", "field"),
    [
        ("cwd-nul", "UNSTORABLE_VALUE", "cwd"),
        ("metadata-key-nul", "UNSTORABLE_VALUE", "metadata"),
        ("metadata-lone-surrogate", "UNSTORABLE_VALUE", "metadata"),
        ("event-id-nul", "BAD_EVENT_ID", "eventId"),
        ("writer-id-nul", "BAD_WRITER_ID", "writer_id"),
        ("writer-id-long", "BAD_WRITER_ID", "writer_id"),
        ("stream-writer-id-long", "BAD_WRITER_ID", "writer_id"),
        ("resume-writer-id-long", "BAD_WRITER_ID", "writer_id"),
    ],
)
def test_values_postgresql_cannot_hold_are_refused_alike_on_both_databases(
    client: SessionLogClient, sid: str, case: str, reason: str, field: str
) -> None:
    """Bug: SQLite stored a NUL in a cwd, an eventId or a writer id, a lone surrogate or NUL in
    metadata, and writer ids of any length (a 100,000-character one), all of which PostgreSQL
    refused (UNSTORABLE_VALUE, naming varchar(128) or the driver's words): the same request
    succeeded or failed by database. Both now refuse them before the database, by one rule."""
    client.create_session(sid)
    stub = client.stub
    with client.lease_writer(sid) as writer:
        token = writer.lease.token
        raw_event = event_pb2.NewEvent(type="test/note", data_json=b"{}", ignorable=True, event_id="e\x00")
        calls: dict[str, Any] = {
            "cwd-nul": lambda: stub.CreateSession(pb.CreateSessionRequest(session_id=sid + "c", cwd="/a\x00b")),
            "metadata-key-nul": lambda: stub.CreateSession(
                pb.CreateSessionRequest(session_id=sid + "k", metadata_json=b'{"k\\u0000": 1}')
            ),
            "metadata-lone-surrogate": lambda: stub.CreateSession(
                pb.CreateSessionRequest(session_id=sid + "s", metadata_json=b'{"k": "\\ud83d"}')
            ),
            "event-id-nul": lambda: stub.AppendEvents(
                pb.AppendEventsRequest(session_id=sid, lease_token=token, events=[raw_event])
            ),
            "writer-id-nul": lambda: stub.AcquireLease(
                pb.AcquireLeaseRequest(session_id=sid, writer_id="w\x00", takeover=True)
            ),
            "writer-id-long": lambda: stub.AcquireLease(
                pb.AcquireLeaseRequest(session_id=sid, writer_id="w" * 129, takeover=True)
            ),
            "stream-writer-id-long": lambda: list(
                stub.Write(
                    iter([pb.WriteRequest(open=pb.OpenWriter(session_id=sid, writer_id="w" * 500, takeover=True))])
                )
            ),
            "resume-writer-id-long": lambda: stub.ResumeSession(
                pb.ResumeSessionRequest(session_id=sid, writer_id="w" * 129, takeover=True)
            ),
        }
        got_reason, got_field, message = _refused(calls[case])
        assert (got_reason, got_field) == (reason, field), message
        assert "varying" not in message and "PostgreSQL" not in message
        # The lease was not taken over, nothing was written, no session was created.
        assert writer.append([note(1)]).seqs == [0]
    assert [s.id for s in client.list_sessions() if s.id.startswith(sid)] == [sid]


def test_a_writer_id_of_128_characters_is_kept(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid, writer_id="é" * 128) as writer:
        writer.append([note(1)]).result()
        assert client.get_session(sid).lease.writer_id == "é" * 128


def test_group_commit_shares_transactions(client: SessionLogClient, server: ServerThread) -> None:
    committer = server.service.committer
    groups_before, batches_before = committer.groups_committed, committer.batches_committed
    test_eight_concurrent_writers_keep_seqs_contiguous(client, server)
    batches = committer.batches_committed - batches_before
    groups = committer.groups_committed - groups_before
    assert batches >= 320
    assert groups < batches
