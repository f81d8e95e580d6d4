"""Limits hold before work (issue 11 §4, §5): sizes are checked before a payload is parsed,
session metadata and cwd are bounded, a batch over the rate burst is refused once for good,
a retried batch is not charged twice, and a message's role must agree with its event type."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import ExpectedSeqMismatch, LimitExceeded, Unavailable, ValidationError
from sessionlog.core.fold import SessionFold
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service.loader import SnapshotPolicy
from sessionlog_server.storage.records import StoredSnapshot
from tests.support.events import note
from tests.support.servers import ServerThread


@pytest.fixture
def limited(db_url: str) -> Iterator[ServerThread]:
    running = ServerThread(
        db_url,
        lease_ttl_ms=5_000,
        max_event_bytes=1_000,
        max_batch_bytes=3_000,
        max_metadata_bytes=200,
        max_cwd_bytes=64,
        max_events_per_second=10,
    )
    yield running
    running.stop()


def _refused(fn: Any, request: Any) -> tuple[grpc.StatusCode, Any]:
    with pytest.raises(grpc.RpcError) as refused:
        fn(request)
    return refused.value.code(), from_rpc_error(refused.value)


def _raw(data: bytes) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=data)


def test_sizes_are_checked_before_the_payload_is_parsed(limited: ServerThread, sid: str) -> None:
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        stub = client.stub
        # Not JSON at all, and too large: the size refusal comes first (no parse was attempted).
        garbage = b"{" + b"x" * 2_000
        code, error = _refused(
            stub.AppendEvents, pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=[_raw(garbage)])
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "EVENT_TOO_LARGE"
        assert error.metadata["event_index"] == "0"
        batch = [_raw(b'{"a":"' + b"y" * 900 + b'"}') for _ in range(4)] + [_raw(b"{not json")]
        code, error = _refused(
            stub.AppendEvents, pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=batch)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "BATCH_TOO_LARGE"
        assert client.get_session(sid).next_seq == 0


def test_a_reported_header_is_bounded_as_an_event_is(limited: ServerThread, sid: str) -> None:
    # A logged header is one event, but its size was checked by nothing but gRPC's message
    # limit: a 5 KB header was logged past a max_event_bytes of 1,000, on both write paths.
    big = {"config": {"model": "m", "notes": "y" * 5_000}}
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        with pytest.raises(LimitExceeded) as refused:
            client.report_header(sid, lease, big)
        assert refused.value.reason == "EVENT_TOO_LARGE" and refused.value.field == "header"
        assert refused.value.metadata["limit"] == "1000"
        client.release_lease(lease)
        with client.writer(sid) as writer, pytest.raises(LimitExceeded) as streamed:
            writer.report_header(big).result(timeout=10)
        assert streamed.value.reason == "EVENT_TOO_LARGE"
        assert client.get_session(sid).next_seq == 0  # neither logged anything
        assert client.report_header(sid, client.acquire_lease(sid), {"config": {"model": "m"}}).appended


def test_session_metadata_and_cwd_are_bounded(limited: ServerThread, sid: str) -> None:
    with SessionLogClient(limited.target) as client:
        stub = client.stub
        big = b'{"k":"' + b"m" * 300 + b'"}'
        code, error = _refused(stub.CreateSession, pb.CreateSessionRequest(session_id=sid, metadata_json=big))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "METADATA_TOO_LARGE"
        code, error = _refused(stub.CreateSession, pb.CreateSessionRequest(session_id=sid, cwd="/" + "d" * 100))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "CWD_TOO_LARGE"
        code, _ = _refused(stub.GetSession, pb.GetSessionRequest(session_id=sid))
        assert code == grpc.StatusCode.NOT_FOUND  # nothing was created
        assert client.create_session(sid, cwd="/w", metadata={"k": "v"}).cwd == "/w"


def test_a_batch_over_the_rate_burst_is_refused_once_and_retries_are_not_charged(
    limited: ServerThread, sid: str
) -> None:
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        code, error = _refused(
            client.stub.AppendEvents,
            pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=[_raw(b"{}")] * 11),
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.reason == "BATCH_OVER_RATE_BURST"
        assert "retry_after_ms" not in error.metadata  # waiting would not help
        batch = [note(i, eventId=f"e{i}") for i in range(10)]
        first = client.append(sid, lease, batch)  # the whole burst
        again = client.append(sid, lease, batch)  # a retry stores nothing, so it costs nothing
        assert again.seqs == first.seqs and client.get_session(sid).next_seq == 10


def test_a_batch_refused_after_its_rate_check_is_not_charged(limited: ServerThread, sid: str) -> None:
    # The rate is taken before planning; a batch planning then refused (a stale expected seq, an
    # event the fold refuses) wrote nothing but used up the namespace's tokens all the same.
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        for _ in range(5):
            with pytest.raises(ExpectedSeqMismatch):
                client.append(sid, lease, [note(i) for i in range(4)], expected_next_seq=7)
        # Twenty events refused; the burst of ten is still whole.
        assert client.append(sid, lease, [note(i) for i in range(10)]).seqs == list(range(10))


def test_header_reports_that_log_an_event_are_charged_to_the_namespace_rate(limited: ServerThread, sid: str) -> None:
    # They were not: each report of a changed header appended a request/header event (up to
    # max_event_bytes of it) as fast as the writer could send, whatever the namespace's limit.
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        logged = 0
        with pytest.raises(LimitExceeded) as refused:
            for i in range(60):  # 10 a second, bursts of 10: refused long before the 60th
                assert client.report_header(sid, lease, {"config": {"model": f"m{i}"}}).appended
                logged += 1
        assert refused.value.reason == "RATE_LIMITED" and refused.value.metadata["limit"] == "10"
        assert client.get_session(sid).next_seq == logged  # the refused report logged nothing
        assert logged < 30
        # A report that logs nothing (the same header again) costs nothing, even now.
        assert not client.report_header(sid, lease, {"config": {"model": f"m{logged - 1}"}}).appended


@dataclass(frozen=True, slots=True)
class _FailingAtHeaders(SnapshotPolicy):
    """Due after every batch; taking the snapshot after one of `session_id`'s request/header
    events fails (a fault between planning and commit: the report is never sent to commit)."""

    session_id: str

    def stored(self, session_id: str, fold: SessionFold) -> StoredSnapshot:  # type: ignore[override]
        latest = fold.latest_header
        if session_id == self.session_id and latest is not None and latest.seq == fold.next_seq - 1:
            raise Unavailable("STORAGE_UNAVAILABLE", "taking the snapshot failed")
        return SnapshotPolicy.stored(session_id, fold)


def test_a_header_report_refused_after_its_rate_check_is_not_charged(limited: ServerThread, sid: str) -> None:
    # A logged header spends the rate before it is planned; one refused between then and the
    # commit kept its token, where a refused batch's are given back: eight failed reports left
    # most of the burst of ten spent on nothing.
    limited.service.appends.snapshots = _FailingAtHeaders(every_events=1, every_bytes=1 << 30, session_id=sid)
    with SessionLogClient(limited.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        for i in range(8):
            with pytest.raises(Unavailable):
                client.report_header(sid, lease, {"config": {"model": f"m{i}"}})
        assert client.get_session(sid).next_seq == 0  # nothing was logged
        assert client.append(sid, lease, [note(i) for i in range(10)]).seqs == list(range(10))


@pytest.mark.parametrize(
    ("type_", "role"),
    [
        ("user/message", "assistant"),
        ("user/message", "toolResult"),
        ("user/message", "system"),
        ("assistant/message", "user"),
        ("system/message", "user"),
        ("tool/result", "assistant"),
    ],
)
def test_a_message_role_that_contradicts_its_type_is_refused(
    client: SessionLogClient, sid: str, type_: str, role: str
) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    data = {"turn": 1, "step": 1, "message": {"role": role, "content": "x", "toolCallId": "c", "isError": False}}
    event = event_pb2.NewEvent(type=type_, data_json=__import__("json").dumps(data).encode())
    event.surface_op.append.SetInParent()
    code, error = _refused(
        client.stub.AppendEvents, pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=[event])
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == "ROLE_CONTRADICTS_TYPE"
    assert client.get_session(sid).next_seq == 0


ROLELESS = [(type_, False) for type_ in ("system/message", "user/message", "assistant/message", "tool/result")]


@pytest.mark.parametrize(("type_", "kept"), [*ROLELESS, ("user/message", True)])
@pytest.mark.parametrize("role", [None, 7, ""], ids=["no-role", "role-7", "empty-role"])
def test_a_surface_message_without_a_string_role_is_refused(
    client: SessionLogClient, sid: str, type_: str, kept: bool, role: int | str | None
) -> None:
    # `{}` was taken as a model message: the model history then held a message without a role,
    # and the session's Pi export could not be read back. A message kept as its model saw it
    # (only a user/message is) keeps its own role, but must have one.
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    message: dict[str, object] = {"content": "x"} if role is None else {"role": role, "content": "x"}
    data = {"turn": 1, "step": 1, "message": message}
    if kept:
        data["source"] = {"kind": "pi-unstructured"}
    with pytest.raises(ValidationError) as refused:
        client.append(sid, lease, [{"type": type_, "surfaceOp": "append", "data": data}])
    assert refused.value.reason == "ROLE_CONTRADICTS_TYPE"
    assert refused.value.field == "data.message.role"
    assert client.get_session(sid).next_seq == 0


@pytest.mark.parametrize("content", [42, {"text": "x"}, True], ids=["number", "object", "boolean"])
def test_a_surface_message_whose_content_is_neither_text_nor_blocks_is_refused(
    client: SessionLogClient, sid: str, content: object
) -> None:
    # `content: 42` was taken, and served in the model history and the request, which a
    # provider then refused: the log refuses it when it is written.
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    with pytest.raises(ValidationError) as refused:
        client.append(
            sid,
            lease,
            [
                {
                    "type": "user/message",
                    "surfaceOp": "append",
                    "data": {"message": {"role": "user", "content": content}},
                }
            ],
        )
    assert (refused.value.reason, refused.value.field) == ("BAD_MESSAGE_CONTENT", "data.message.content")
    assert client.get_session(sid).next_seq == 0
    # Text, blocks, null (a tool-calling OpenAI message's) and none at all are content.
    fine = [{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "text", "text": "x"}]}]
    fine += [{"role": "user", "content": None}, {"role": "user"}]
    events = [{"type": "user/message", "surfaceOp": "append", "data": {"message": message}} for message in fine]
    assert client.append(sid, lease, events).seqs == [1, 2, 3, 4]


KEPT = [("pi-unpaired-tool-result", "toolResult"), ("pi-unstructured", "assistant"), ("pi-forked-call", "assistant")]


@pytest.mark.parametrize(("kind", "role"), KEPT)
def test_a_message_kept_as_the_model_saw_it_keeps_its_role(
    client: SessionLogClient, sid: str, kind: str, role: str
) -> None:
    # The Pi importers' fallbacks: a tool result whose call is not pending, an assistant message
    # with unusable tool-call ids, the message of a call a fork cut while it was pending (here
    # appended, as any writer may). The same role under any other source kind is refused (above).
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    message = {"role": role, "content": "x", "toolCallId": "c"}
    kept = {"type": "user/message", "surfaceOp": "append", "data": {"message": message, "source": {"kind": kind}}}
    assert client.append(sid, lease, [kept]).seqs == [1]  # 0: the empty system head
    assert client.model_history(sid)[-1] == message
    with pytest.raises(ValidationError) as refused:
        client.append(sid, lease, [{**kept, "data": {"message": message, "source": {"kind": "user"}}}])
    assert refused.value.reason == "ROLE_CONTRADICTS_TYPE"
