"""Bad input from a hostile or buggy client, over raw stubs: whatever the door accepts, the
service can repair, answer and serve later; a session is never wedged by what it stored."""

from __future__ import annotations

import grpc
import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.jsonvalue import MAX_JSON_DEPTH
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.servers import ServerThread

APPEND = event_pb2.SurfaceOp(append=event_pb2.SurfaceAppend())


def _event(type_: str, data: bytes, surface: bool = False) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type=type_, data_json=data, surface_op=APPEND if surface else None)


def _read(client: SessionLogClient, sid: str) -> list[event_pb2.Event]:
    return [e for page in client.stub.ReadEvents(pb.ReadEventsRequest(session_id=sid)) for e in page.events]


# A call id is the harness's: JSON lets it hold a NUL (`\u0000`) or a lone surrogate (`\ud800`),
# and crash repair named its error result after it (`repair-...-result-<callId>`), an eventId
# PostgreSQL (NUL) or UTF-8 (a lone surrogate) cannot store: every resume and every fork inside
# the turn failed (INTERNAL, COMMIT_OUTCOME_UNKNOWN, UNSTORABLE_VALUE), for good.
@pytest.mark.parametrize("call_id", [r"a\u0000b", r"a\ud800b", "x" * 200 + r"\ud800"], ids=["nul", "surrogate", "long"])
def test_a_pending_call_whose_id_no_event_id_may_hold_is_repaired(server: ServerThread, sid: str, call_id: str) -> None:
    block = b'{"type":"toolCall","id":"' + call_id.encode() + b'","name":"n","arguments":{}}'
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        opened_turn = [
            _event("turn/start", b'{"turn":1}'),
            _event("step/start", b'{"turn":1,"step":1}'),
            _event(
                "assistant/message",
                b'{"turn":1,"step":1,"message":{"role":"assistant","content":[' + block + b"]}}",
                surface=True,
            ),
        ]
        client.stub.AppendEvents(pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=opened_turn))
        fork = client.stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=3))
        assert len(fork.repair_seqs) == 3  # the call's error result, step/end, turn/end
        resumed = client.stub.ResumeSession(pb.ResumeSessionRequest(session_id=sid, takeover=True))
        assert len(resumed.repair_seqs) == 3
        events = _read(client, sid)
        result = events[resumed.repair_seqs[0]]
        assert result.type == "tool/result" and result.event_id.startswith("repair-interrupted-1-1-result-sha256-")
        assert [e.type for e in events[-3:]] == ["step/end", "turn/end", "session/end-seed"]
        again = client.stub.ResumeSession(pb.ResumeSessionRequest(session_id=sid, lease_token=resumed.lease_token))
        assert list(again.repair_seqs) == [] and again.next_seq == len(events)


# A config key is the harness's too, and may be a lone surrogate. The report logged the header,
# then failed to build its answer (`changed_fields` names the key, and protobuf strings are
# UTF-8): INTERNAL for a header that was logged, and so for every later report that changed
# the key, on both write paths (the stream's lease left to lapse).
def test_a_header_change_of_a_key_utf8_cannot_carry_is_answered(server: ServerThread, sid: str) -> None:
    odd = rb'{"config":{"\ud800":1}}'
    plain = b'{"config":{"model":"m"}}'
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)

        def report(header: bytes) -> pb.ReportRequestHeaderResponse:
            request = pb.ReportRequestHeaderRequest(session_id=sid, lease_token=lease.token, header_json=header)
            return client.stub.ReportRequestHeader(request)

        assert report(odd).reason == pb.HEADER_REASON_INITIAL
        changed = report(plain)
        assert changed.reason == pb.HEADER_REASON_CHANGE and list(changed.changed_fields) == ["model", "\\ud800"]
        client.stub.ReleaseLease(pb.ReleaseLeaseRequest(session_id=sid, lease_token=lease.token))
        messages = [
            pb.WriteRequest(open=pb.OpenWriter(session_id=sid)),
            pb.WriteRequest(header=pb.WriteHeader(batch_id=1, header_json=odd)),
            pb.WriteRequest(close=pb.CloseWriter()),
        ]
        answers = list(client.stub.Write(iter(messages)))
        ack = answers[-1].header_ack
        assert ack.batch_id == 1 and list(ack.result.changed_fields) == ["model", "\\ud800"]
        assert [e.type for e in _read(client, sid)] == ["request/header"] * 3
        assert not client.stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.HasField("lease")


def _nested(levels: int) -> bytes:
    """An object `levels` deep, arrays and objects alternating: `{"a":[{"a":[...]}]}`."""
    opening = b"".join(b'{"a":' if level % 2 == 0 else b"[" for level in range(levels - 1))
    closing = b"".join(b"}" if level % 2 == 0 else b"]" for level in reversed(range(levels - 1)))
    return opening + b"{}" + closing


# The depth was measured by removing innermost `[]` and then `{}` pairs a pass at a time, and
# an array's pair removed first left its object's pair innermost in the same pass: nesting that
# alternates took two levels a pass, and up to 512 levels went in past the limit of 256.
def test_nesting_that_alternates_arrays_and_objects_is_held_to_the_depth_limit(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)

        def append(data: bytes) -> pb.AppendEventsResponse:
            event = event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=data)
            return client.stub.AppendEvents(
                pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=[event])
            )

        for levels in (257, 400):
            with pytest.raises(grpc.RpcError) as refused:
                append(_nested(levels))
            error = from_rpc_error(refused.value)
            assert error.reason == "JSON_TOO_DEEP" and error.metadata["limit"] == str(MAX_JSON_DEPTH)
        assert list(append(_nested(MAX_JSON_DEPTH)).seqs) == [0]
        assert [e.data_json for e in _read(client, sid)] == [_nested(MAX_JSON_DEPTH)]
