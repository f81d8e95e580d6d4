"""Undecodable requests (issue 11 §5): a corrupt protobuf, or invalid UTF-8 in a string field,
is INVALID_ARGUMENT with reason MALFORMED_REQUEST (never UNKNOWN with a Python class name), for
unary and streaming calls, and the server logs one line, no traceback."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from sessionlog.errors import from_rpc_error
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.servers import ServerProcess

SERVICE = "/sessionlog.v1.SessionService/"
CORRUPT = [
    b"\xff\xff\xff\xff",  # not a protobuf
    b"\x0a\x02\xff\xfe",  # field 1 (session_id, a string) holding invalid UTF-8
    b"\x0a\x10ab",  # a length past the end of the message
]


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    from sessionlog_server.storage.migrate import upgrade

    url = f"sqlite:///{tmp_path_factory.mktemp('malformed') / 'm.db'}"
    upgrade(url)
    server = ServerProcess(url).start()
    yield server
    server.kill()


def _identity(raw: bytes) -> bytes:
    return raw


@pytest.mark.parametrize("payload", CORRUPT)
def test_undecodable_requests_are_invalid_argument(raw_server: ServerProcess, payload: bytes) -> None:
    with grpc.insecure_channel(raw_server.target) as channel:
        calls = [
            channel.unary_unary(SERVICE + "GetSession", request_serializer=_identity, response_deserializer=_identity),
            channel.unary_unary(
                SERVICE + "AppendEvents", request_serializer=_identity, response_deserializer=_identity
            ),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as refused:
                call(payload, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert from_rpc_error(refused.value).reason == "MALFORMED_REQUEST"
        reads = channel.unary_stream(
            SERVICE + "ReadEvents", request_serializer=_identity, response_deserializer=_identity
        )
        with pytest.raises(grpc.RpcError) as refused:
            list(reads(payload, timeout=10))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        write = channel.stream_stream(SERVICE + "Write", request_serializer=_identity, response_deserializer=_identity)
        with pytest.raises(grpc.RpcError) as refused:
            list(write(iter([payload]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert from_rpc_error(refused.value).reason == "MALFORMED_REQUEST"
    assert not any("Traceback" in line for line in raw_server.log), "\n".join(raw_server.log)


@pytest.mark.parametrize("payload", CORRUPT)
def test_an_undecodable_request_after_open_ends_the_writer_stream(raw_server: ServerProcess, payload: bytes) -> None:
    opened = pb.WriteRequest(open=pb.OpenWriter(session_id=f"malformed-{payload.hex()}", create_if_missing=True))
    with grpc.insecure_channel(raw_server.target) as channel:
        write = channel.stream_stream(SERVICE + "Write", request_serializer=_identity, response_deserializer=_identity)
        answers = write(iter([opened.SerializeToString(), payload]), timeout=10)
        assert pb.WriteResponse.FromString(next(answers)).HasField("opened")
        with pytest.raises(grpc.RpcError) as refused:
            list(answers)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert from_rpc_error(refused.value).reason == "MALFORMED_REQUEST"
    assert not any("Traceback" in line for line in raw_server.log), "\n".join(raw_server.log)
