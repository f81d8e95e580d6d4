"""Bad input the service used to take: a negative usage number (which lowered a session's cost
in stats), a JSON object naming a key twice (stored as sent, read as its last value), JSON of
more objects and arrays, or more values, than the event loop decodes in half a second, and a
lease writer's heartbeat interval that is not a positive number (a busy loop of renewals).
Each is refused with a clear error and changes nothing. Against a real server, on SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import ValidationError
from sessionlog.core.limits import DEFAULT_LIMITS
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import event_pb2
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import assistant, step_end, step_start, turn_start, user
from tests.support.scripted import usage
from tests.support.servers import ServerThread


def _opened(client: SessionLogClient, sid: str) -> Any:
    """A session with a turn and a step open, priced at 0.5 USD so far, and its lease."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    priced = {**usage(10, 0, 5), "cost": {"total": 0.5}}
    client.append(sid, lease, [user("hi"), turn_start(1), step_start(1, 1), assistant(1, 1, "a", usage=priced)])
    client.append(sid, lease, [step_end(1, 1), step_start(1, 2)])
    return lease


@pytest.mark.parametrize(
    ("where", "change", "field"),
    [
        ("data", {"cost": {"total": -0.4}}, "data.usage.cost.total"),
        ("data", {"cost": {"input": 0.1, "output": -0.3}}, "data.usage.cost.output"),
        ("data", {"input": -100}, "data.usage.input"),
        ("data", {"totalTokens": -1}, "data.usage.totalTokens"),
        ("message", {"cacheRead": -0.5}, "data.message.usage.cacheRead"),
        ("message", {"cost": {"total": -1e-9}}, "data.message.usage.cost.total"),
    ],
)
def test_a_negative_usage_number_is_refused_and_the_cost_stays(
    client: SessionLogClient, sid: str, where: str, change: dict[str, Any], field: str
) -> None:
    """A negative cost was accepted and lowered `costUsd` (0.5 - 0.4 = 0.1); a negative count
    lowered the tokens. Refused as NEGATIVE_USAGE naming the number; nothing is written."""
    lease = _opened(client, sid)
    before = client.stats(sid)
    event = assistant(1, 2, "b")
    bad = {**usage(1, 0, 1), **change}
    if where == "data":
        event["data"]["usage"] = bad
    else:
        event["data"]["message"]["usage"] = bad
    with pytest.raises(ValidationError) as refused:
        client.append(sid, lease, [event])
    error = refused.value
    assert (error.reason, error.metadata["field"], error.metadata["event_index"]) == ("NEGATIVE_USAGE", field, "0")
    assert "cannot be negative" in error.message
    assert client.stats(sid) == before and before["costUsd"] == 0.5
    assert client.get_session(sid).next_seq == 7


def test_a_usage_of_zeros_and_non_numbers_is_still_accepted(client: SessionLogClient, sid: str) -> None:
    """Only numbers below zero are refused: 0, -0.0 and what is no number (counted as 0) go in."""
    lease = _opened(client, sid)
    odd = {"input": 0, "output": -0.0, "cacheRead": "-5", "cacheWrite": None, "cost": {"total": 0}}
    assert client.append(sid, lease, [assistant(1, 2, "b", usage=odd)]).seqs == [7]


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (b'{"a":1,"a":2}', "a"),
        (b'{"x":{"at":"12:00:00","k":[1,{"k":"v:w","k":"w"}]}}', "k"),
        (b'{"t" : "a:b", "t":"c"}', "t"),
        (b'{"\\ud83d":1,"\\ud83d":2}', "\\ud83d"),  # a lone surrogate, named by its escape
        (b'{"e":1,"e":"\\u003a"}', "e"),  # an escaped colon in the kept value
        (b'{"n":123456789012345678901234567890,"n":1}', "n"),  # an integer past 64 bits
        (b'{"k:":{"\\u00e9":1},"k:":2}', "k:"),
    ],
)
def test_a_json_object_naming_a_key_twice_is_refused(client: SessionLogClient, sid: str, raw: bytes, key: str) -> None:
    """The text was stored as sent, both keys and all, while reads and projections kept the
    last value: the log and what it showed disagreed. Refused as DUPLICATE_KEY; nothing is written."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    request = pb.AppendEventsRequest(
        session_id=sid,
        lease_token=lease.token,
        events=[event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=raw)],
    )
    with pytest.raises(grpc.RpcError) as refused:
        client.stub.AppendEvents(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(refused.value)
    assert (error.reason, error.metadata["key"]) == ("DUPLICATE_KEY", key)
    assert list(client.read_events(sid)) == []


def test_json_with_colons_in_strings_and_unique_keys_is_accepted(client: SessionLogClient, sid: str) -> None:
    """Keys are counted, not strings: colons inside strings (times, URLs, a key holding one) and
    equal keys in different objects are no repeat."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    raw = b'{"a:b":"http://x:1","n":{"a:b":1,"n":[{"n":"1:2:3"},{"n":"\\":"},{"\\u003a":12345678901234567890123}]}}'
    request = pb.AppendEventsRequest(
        session_id=sid,
        lease_token=lease.token,
        events=[event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=raw)],
    )
    assert list(client.stub.AppendEvents(request).seqs) == [0]
    (event,) = client.read_events(sid)
    assert event.data == {
        "a:b": "http://x:1",
        "n": {"a:b": 1, "n": [{"n": "1:2:3"}, {"n": '":'}, {":": 12345678901234567890123}]},
    }


def test_session_metadata_naming_a_key_twice_is_refused(client: SessionLogClient, sid: str) -> None:
    """Metadata is stored as sent too: the same rule, and no session is created."""
    with pytest.raises(grpc.RpcError) as refused:
        client.stub.CreateSession(pb.CreateSessionRequest(session_id=sid, metadata_json=b'{"m":1,"m":2}'))
    assert from_rpc_error(refused.value).reason == "DUPLICATE_KEY"
    assert sid not in [s.id for s in client.list_sessions()]


def _raw_append(client: SessionLogClient, sid: str, lease: Any, raw: bytes) -> pb.AppendEventsResponse:
    request = pb.AppendEventsRequest(
        session_id=sid,
        lease_token=lease.token,
        events=[event_pb2.NewEvent(type="test/raw", ignorable=True, data_json=raw)],
    )
    response: pb.AppendEventsResponse = client.stub.AppendEvents(request)
    return response


def test_event_data_holding_more_objects_and_arrays_than_the_limit_is_refused(
    client: SessionLogClient, sid: str
) -> None:
    """8 million `{"k":1}` in one 64 MB event held the server's event loop, and every session
    of the process, ~5 s. Over `max_json_containers` (default 500,000) it is refused before it
    is decoded, and nothing is written; at the limit it is stored."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    limit = DEFAULT_LIMITS.max_json_containers
    at = b'{"a":[' + b",".join([b"[]"] * (limit - 2)) + b"]}"
    with pytest.raises(grpc.RpcError) as refused:
        _raw_append(client, sid, lease, at[:-2] + b",{}]}")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(refused.value)
    assert error.reason == "JSON_TOO_MANY_CONTAINERS"
    assert error.metadata == {"limit": str(limit), "count": str(limit + 1), "event_index": "0"}
    assert list(client.read_events(sid)) == []
    assert list(_raw_append(client, sid, lease, at).seqs) == [0]
    (event,) = client.read_events(sid)
    assert len(event.data["a"]) == limit - 2


@dataclass(frozen=True)
class JsonLimitSetting:
    """A JSON limit's setting, a payload one over a limit of `limit`, and one under it."""

    setting: str
    reason: str
    payload: dict[str, Any]
    """Its count is `limit + 1`; as a reported header's `config`, one more."""
    limit: int
    message: str
    """What the header's refusal says of its count."""
    fewer: dict[str, Any]


JSON_LIMIT_SETTINGS = [
    JsonLimitSetting(
        "max_json_containers",
        "JSON_TOO_MANY_CONTAINERS",
        {"a": [{"b": []}, [{}]] * 4},  # 18 objects and arrays
        17,
        "header holds 19 objects and arrays",
        {"a": [[]] * 15},
    ),
    JsonLimitSetting(
        "max_json_values",
        "JSON_TOO_MANY_VALUES",
        {"a": list(range(20)), "b": "c, d, e"},  # 22 values (commas in strings are none)
        21,
        "header holds 23 values",
        {"a": list(range(19)), "b": "c, d, e"},
    ),
]


@pytest.mark.parametrize("limit", JSON_LIMIT_SETTINGS, ids=lambda limit: limit.setting)
def test_a_json_limit_is_a_setting_and_what_was_stored_under_a_higher_one_is_read(
    fresh_db: str, sid: str, limit: JsonLimitSetting
) -> None:
    """`SESSIONLOG_MAX_JSON_CONTAINERS` and `SESSIONLOG_MAX_JSON_VALUES` bound event data,
    session metadata and reported headers alike; events and metadata stored before a limit was
    lowered are still read as they are."""
    payload, over = limit.payload, str(limit.limit + 1)
    with ServerThread(fresh_db) as before, SessionLogClient(before.target) as client:
        client.create_session(sid, metadata=payload)
        lease = client.acquire_lease(sid)
        assert client.append(sid, lease, [{"type": "test/raw", "data": payload, "ignorable": True}]).seqs == [0]
        client.release_lease(lease)
    with (
        ServerThread(fresh_db, None, **{limit.setting: limit.limit}) as after,
        SessionLogClient(after.target) as client,
    ):
        (event,) = client.read_events(sid)
        assert event.data == payload and client.get_session(sid).metadata == payload
        lease = client.acquire_lease(sid)
        with pytest.raises(ValidationError) as data:
            client.append(sid, lease, [{"type": "test/raw", "data": payload, "ignorable": True}])
        with pytest.raises(ValidationError) as header:
            client.report_header(sid, lease, {"config": payload})
        other = sid + "-m"
        with pytest.raises(ValidationError) as metadata:
            client.create_session(other, metadata=payload)
        for refused, count in ((data, over), (header, str(limit.limit + 2)), (metadata, over)):
            assert refused.value.reason == limit.reason
            assert (refused.value.metadata["limit"], refused.value.metadata["count"]) == (str(limit.limit), count)
        assert limit.message in header.value.message
        assert [e.seq for e in client.read_events(sid)] == [0]
        assert other not in [s.id for s in client.list_sessions()]
        assert client.append(sid, lease, [{"type": "test/raw", "data": limit.fewer, "ignorable": True}]).seqs == [1]


def test_event_data_holding_more_values_than_the_limit_is_refused(client: SessionLogClient, sid: str) -> None:
    """One object of 4.5 million keys held the server's event loop, and every session of the
    process, ~2.5 s (~8 s with one integer past 64 bits). Over `max_json_values` (default 500,000;
    each array element and each object member counts once) it is refused before it is decoded,
    and nothing is written; at the limit it is stored. Commas inside strings are no values."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    limit = DEFAULT_LIMITS.max_json_values
    at = b'{"s":"' + b"a," * limit + b'","a":[' + b",".join([b"1"] * (limit - 2)) + b"]}"
    with pytest.raises(grpc.RpcError) as refused:
        _raw_append(client, sid, lease, at[:-2] + b',"x"]}')
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = from_rpc_error(refused.value)
    assert error.reason == "JSON_TOO_MANY_VALUES"
    assert error.metadata == {"limit": str(limit), "count": str(limit + 1), "event_index": "0"}
    assert list(client.read_events(sid)) == []
    assert list(_raw_append(client, sid, lease, at).seqs) == [0]
    (event,) = client.read_events(sid)
    assert len(event.data["a"]) == limit - 2


@pytest.mark.parametrize("heartbeat", [0, -1, math.nan, math.inf, 2**31, True, "1"])
def test_a_heartbeat_that_is_not_a_positive_number_is_refused_before_the_lease_is_taken(
    server: ServerThread, sid: str, heartbeat: Any
) -> None:
    """With 0 the writer renewed its lease in a busy loop (a negative interval failed in the
    heartbeat thread instead); refused with ValueError by both clients, before the lease is
    taken: another writer then takes it without a takeover."""
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        with pytest.raises(ValueError, match="heartbeat"):
            client.lease_writer(sid, heartbeat=heartbeat)

        async def scenario() -> None:
            async with AsyncSessionLogClient(server.target) as aio:
                with pytest.raises(ValueError, match="heartbeat"):
                    await aio.lease_writer(sid, heartbeat=heartbeat)

        asyncio.run(scenario())
        client.release_lease(client.acquire_lease(sid))


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (event_pb2.NewEvent(type="x/" + "t" * 10_000, ignorable=True, data_json=b"{}"), "BAD_TYPE"),
        (event_pb2.NewEvent(type="x/" + "\u6f22" * 6_000, ignorable=True, data_json=b"{}"), "BAD_TYPE"),
        (
            event_pb2.NewEvent(type="request/header", data_json=b'{"header":{"config":{},"' + b"k" * 10_000 + b'":1}}'),
            "HEADER_UNKNOWN_KEY",
        ),
    ],
)
def test_a_refusal_that_echoes_a_long_value_keeps_its_reason(
    client: SessionLogClient, sid: str, event: event_pb2.NewEvent, reason: str
) -> None:
    """An error's message echoes what was refused; one of 10,000 characters took the status's
    headers past gRPC's metadata limit, and the caller was told MESSAGE_TOO_LARGE (of a size it
    never sent) instead of the reason. The message is cut, and says how much was left out."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    with pytest.raises(grpc.RpcError) as refused:
        client.stub.AppendEvents(pb.AppendEventsRequest(session_id=sid, lease_token=lease.token, events=[event]))
    error = from_rpc_error(refused.value)
    assert error.reason == reason, error
    assert len(error.message.encode()) <= 1024 and error.message.endswith(" more characters)"), error.message
    assert list(client.read_events(sid)) == []
