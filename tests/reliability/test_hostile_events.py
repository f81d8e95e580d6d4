"""What the door accepts, every read serves, before and after a restart (issue 11 §1).

Hypothesis builds hostile but valid JSON payloads: nesting up to the depth limit, integers far
beyond 2^53 and 64 bits, the smallest and largest doubles, lone UTF-16 surrogate escapes,
U+2028, NUL, odd whitespace and escapes, empty and duplicate keys. They go through the real
server with raw stubs, in ignorable events and in every model-visible place (user and tool
messages, tool-call arguments, the request header) and in the usage the stats sum. Then every
read RPC and projection is called on a server process, which is SIGKILLed and started again,
and called again: no acknowledged event may be unreadable, no call may end UNKNOWN or INTERNAL,
and the stored payload must come back byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionlog.core.jsonvalue import MAX_JSON_DEPTH
from sessionlog.requests import read_request
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog.v1.session_service_pb2_grpc import SessionServiceStub
from tests.support.servers import ServerProcess

REFUSED_ONLY = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}

# --- hostile JSON text ------------------------------------------------------------------------

HOSTILE_STRINGS = [
    "\\ud83d",  # a lone high surrogate (a model's broken emoji)
    "\\ude00",  # a lone low surrogate
    "\\ud83d\\ude00",  # a valid pair
    "\\u2028\\u2029",  # line separators: content, not line breaks
    "\\u0000",  # NUL
    "\u202e\u0301\ufeff",  # RTL override, a combining mark, a BOM
    '\\/\\b\\f\\n\\r\\t\\"\\\\',  # every escape
    "é" * 3,
    "",
]
HOSTILE_NUMBERS = [
    "18446744073709551616",  # 2^64
    "-9223372036854775809",  # below int64
    "9007199254740993",  # 2^53 + 1
    "1" + "0" * 100,
    "5e-324",
    "1.7976931348623157e308",
    "1e20",
    "-0.0",
    "1E-7",
    "0.1",
    "-0",
]


def _strings() -> st.SearchStrategy[str]:
    return st.sampled_from(HOSTILE_STRINGS).map(lambda s: f'"{s}"')


def _scalars() -> st.SearchStrategy[str]:
    return st.one_of(_strings(), st.sampled_from(HOSTILE_NUMBERS), st.sampled_from(["true", "false", "null"]))


def _values() -> st.SearchStrategy[str]:
    return st.recursive(
        _scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda xs: "[ " + " ,\t".join(xs) + "\n]"),
            st.lists(st.tuples(_strings(), inner), max_size=3).map(
                lambda kvs: "{" + ",".join(f"{k} :{v}" for k, v in kvs) + "}"
            ),
        ),
        max_leaves=12,
    )


def _deep(depth: int, leaf: str = '"\\ud83d"') -> str:
    """A value nested `depth` levels deep (arrays and objects alternating)."""
    text = leaf
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"d":{text}}}'
    return text


def _objects() -> st.SearchStrategy[str]:
    """Event data: an object with hostile members (empty keys included, and duplicate ones, which
    the door refuses as DUPLICATE_KEY)."""
    return st.lists(st.tuples(_strings(), _values()), min_size=1, max_size=4).map(
        lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"
    )


# --- the server and its calls -----------------------------------------------------------------


def _ok(code: grpc.StatusCode, what: str) -> None:
    assert code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), f"{what} answered {code}"


def _call(fn: Any, request: Any) -> tuple[grpc.StatusCode, Any]:
    try:
        return grpc.StatusCode.OK, fn(request, timeout=60)
    except grpc.RpcError as exc:
        return exc.code(), exc


def _append(stub: SessionServiceStub, sid: str, token: str, events: list[event_pb2.NewEvent]) -> list[int] | None:
    code, result = _call(stub.AppendEvents, pb.AppendEventsRequest(session_id=sid, lease_token=token, events=events))
    _ok(code, "AppendEvents")
    if code != grpc.StatusCode.OK:
        assert code in REFUSED_ONLY, code
        return None
    return list(result.seqs)


def _raw(data: str) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type="test/hostile", ignorable=True, data_json=data.encode("utf-8"))


def _surface(type_: str, data: str) -> event_pb2.NewEvent:
    event = event_pb2.NewEvent(type=type_, data_json=data.encode("utf-8"))
    event.surface_op.append.SetInParent()
    return event


def _log_only(type_: str, data: str) -> event_pb2.NewEvent:
    return event_pb2.NewEvent(type=type_, data_json=data.encode("utf-8"))


def _turn(turn: int, payload: str) -> list[event_pb2.NewEvent]:
    """A whole turn whose model-visible parts carry `payload`, and whose usage the stats sum:
    the payload, the largest double (twice is infinity) and, turn by turn, an integer past a
    double's range and a float (together an OverflowError)."""
    call_id = f"c{turn}"
    huge = "1" + "0" * 400 if turn % 2 else "0.5"
    usage = f'{{"input":{payload},"output":1.7976931348623157e308,"cacheRead":{huge},"cost":{{"total":{huge}}}}}'
    return [
        _log_only("turn/start", f'{{"turn":{turn}}}'),
        _surface(
            "user/message",
            f'{{"turn":{turn},"message":{{"role":"user","content":[{{"type":"text","text":"hi"}}],"x":{payload}}}}}',
        ),
        _log_only("step/start", f'{{"turn":{turn},"step":1}}'),
        _surface(
            "assistant/message",
            f'{{"turn":{turn},"step":1,"usage":{usage},"message":{{"role":"assistant","content":[{{"type":"toolCall",'
            f'"id":"{call_id}","name":"t","arguments":{{"id":18446744073709551617,"p":{payload}}}}}]}}}}',
        ),
        _log_only("tool/call", f'{{"turn":{turn},"step":1,"callId":"{call_id}","name":"t","arguments":{payload}}}'),
        _surface(
            "tool/result",
            f'{{"turn":{turn},"step":1,"message":{{"role":"toolResult","toolCallId":"{call_id}",'
            f'"content":[{{"type":"text","text":"\\ud83d ok"}}],"isError":false,"y":{payload}}}}}',
        ),
        _log_only("step/end", f'{{"turn":{turn},"step":1}}'),
        _log_only("turn/end", f'{{"turn":{turn},"reason":{{"kind":"completed"}}}}'),
    ]  # fmt: skip


def _serve_everything(stub: SessionServiceStub, sid: str, acked: dict[int, bytes]) -> None:
    """Every read RPC and projection, at the head and at every acknowledged seq: all succeed,
    and every acknowledged payload reads back byte for byte."""
    read: dict[int, bytes] = {}
    for response in stub.ReadEvents(read_request(sid, 0, None, 7), timeout=60):
        read.update((e.seq, e.data_json) for e in response.events)
    for seq, data in acked.items():
        assert read.get(seq) == data, f"seq {seq} did not read back as it was sent"
    subscription = stub.SubscribeEvents(pb.SubscribeEventsRequest(session_id=sid, from_seq=0), timeout=60)
    for response in subscription:
        if response.WhichOneof("kind") == "caught_up":
            break
    subscription.cancel()
    for call, request in [
        (stub.GetSession, pb.GetSessionRequest(session_id=sid)),
        (stub.ListSessions, pb.ListSessionsRequest(page_size=1000)),
    ]:
        code, _ = _call(call, request)
        assert code == grpc.StatusCode.OK, (call, code)
    for at_seq in [None, *sorted(acked)]:
        scope = pb.ProjectionScope(session_id=sid, with_repair=True)
        if at_seq is not None:
            scope.at_seq = at_seq
        for call, request in [
            (stub.GetModelHistory, pb.GetModelHistoryRequest(scope=scope)),
            (stub.GetTranscript, pb.GetTranscriptRequest(scope=scope)),
            (stub.GetRequest, pb.GetRequestRequest(scope=scope)),
            (stub.GetStats, pb.GetStatsRequest(scope=scope)),
            (stub.GetSurface, pb.GetSurfaceRequest(scope=scope)),
        ]:
            code, result = _call(call, request)
            assert code == grpc.StatusCode.OK, (type(request).__name__, at_seq, code, getattr(result, "details", None))
            if isinstance(request, pb.GetRequestRequest):
                json.loads(result.request_json)  # valid JSON, whatever it holds


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH])
def test_hostile_door_accepted_events_are_served_by_every_read_before_and_after_a_restart(
    db_url: str, tmp_path: Any, depth: int
) -> None:
    url = f"sqlite:///{tmp_path / 'hostile.db'}" if db_url.startswith("sqlite") else db_url
    if url.startswith("sqlite"):
        from sessionlog_server.storage.migrate import upgrade

        upgrade(url)
    # Snapshots every few events: each stores the fold's running totals as JSON.
    server = ServerProcess(url, env={"SESSIONLOG_SNAPSHOT_EVERY_EVENTS": "20"}).start()
    sid = f"hostile-{tmp_path.name[-8:]}"
    acked: dict[int, bytes] = {}
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = SessionServiceStub(channel)
            stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
            token = stub.AcquireLease(pb.AcquireLeaseRequest(session_id=sid)).lease_token
            header = (
                b'{"config":{"model":"m","max":18446744073709551616,"s":"\\ud83d"},"tools":[{"name":"t","d":1e20}]}'
            )
            code, _ = _call(
                stub.ReportRequestHeader,
                pb.ReportRequestHeaderRequest(session_id=sid, lease_token=token, header_json=header),
            )
            assert code == grpc.StatusCode.OK, code

            # Deep at the limit is accepted everywhere; one level more is refused at the door.
            for data in [_deep(depth - 1), '{"u":' + _deep(depth - 2) + "}"]:
                seqs = _append(stub, sid, token, [_raw(data)])
                assert seqs is not None, "a payload at the depth limit was refused"
                acked[seqs[0]] = data.encode()
            assert _append(stub, sid, token, [_raw(_deep(depth))]) is None
            seqs = _append(stub, sid, token, _turn(1, _deep(depth - 8)))
            assert seqs is not None, "a model-visible payload at the depth limit was refused"

            turn = [1]

            @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
            @given(data=_objects(), payload=_values())
            def append_hostile(data: str, payload: str) -> None:
                got = _append(stub, sid, token, [_raw(data)])
                if got is not None:
                    acked[got[0]] = data.encode()
                turn[0] += 1
                if _append(stub, sid, token, _turn(turn[0], payload)) is None:
                    turn[0] -= 1

            append_hostile()
            assert len(acked) > 10
            _serve_everything(stub, sid, acked)
        server.kill()
        server.start()
        with grpc.insecure_channel(server.target) as channel:
            stub = SessionServiceStub(channel)
            _serve_everything(stub, sid, acked)
            # The session stays writable: lease (folding the header and every payload), append,
            # report the same header again, resume.
            token = stub.AcquireLease(pb.AcquireLeaseRequest(session_id=sid, takeover=True)).lease_token
            seqs = _append(stub, sid, token, [_raw('{"after":"restart"}')])
            assert seqs is not None
            acked[seqs[0]] = b'{"after":"restart"}'
            code, _ = _call(
                stub.ReportRequestHeader,
                pb.ReportRequestHeaderRequest(session_id=sid, lease_token=token, header_json=header),
            )
            assert code == grpc.StatusCode.OK, code
            code, _ = _call(stub.ResumeSession, pb.ResumeSessionRequest(session_id=sid, lease_token=token))
            assert code == grpc.StatusCode.OK, code
            _serve_everything(stub, sid, acked)
    finally:
        server.kill()
