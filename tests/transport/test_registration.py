"""The services reach grpc.aio as generic handlers only, and every method is still served."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection

from sessionlog.v1 import session_service_pb2
from sessionlog_server.transport.registration import register_services
from sessionlog_server.transport.servicer import SessionServicer
from tests.support.servers import ServerThread

SERVICE = session_service_pb2.DESCRIPTOR.services_by_name["SessionService"]


def _call(channel: grpc.Channel, path: str, client_streaming: bool, server_streaming: bool) -> grpc.StatusCode:
    """The status of one call to `path` with an empty request (or no requests, when it streams)."""
    identity: dict[str, Any] = {"request_serializer": None, "response_deserializer": None}
    try:
        if client_streaming:
            responses = channel.stream_stream(path, **identity)(iter(()), timeout=10)
            list(responses)
        elif server_streaming:
            list(channel.unary_stream(path, **identity)(b"", timeout=10))
        else:
            channel.unary_unary(path, **identity)(b"", timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_every_method_of_the_proto_is_served(server: ServerThread) -> None:
    """An empty request is refused for what it lacks (or answered), never UNIMPLEMENTED: the
    generic handlers route every method of the proto, health and reflection included."""
    with grpc.insecure_channel(server.target) as channel:
        for method in SERVICE.methods:
            path = f"/{SERVICE.full_name}/{method.name}"
            code = _call(channel, path, method.client_streaming, method.server_streaming)
            assert code != grpc.StatusCode.UNIMPLEMENTED, path
        assert _call(channel, "/grpc.health.v1.Health/Check", False, False) != grpc.StatusCode.UNIMPLEMENTED
        reflected = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        assert _call(channel, reflected, True, True) != grpc.StatusCode.UNIMPLEMENTED
        unknown = f"/{SERVICE.full_name}/NoSuchMethod"
        assert _call(channel, unknown, False, False) == grpc.StatusCode.UNIMPLEMENTED


def test_no_method_is_registered_with_grpc_aio(monkeypatch: pytest.MonkeyPatch) -> None:
    """grpc.aio waits on one pending future per registered method for every call it accepts;
    the registration gives it none, and the generic handlers of all three services."""

    async def register() -> tuple[list[str], int]:
        server = grpc.aio.server()
        registered: list[str] = []
        generic: list[Any] = []
        monkeypatch.setattr(server, "add_registered_method_handlers", lambda name, _handlers: registered.append(name))
        passed_on = server.add_generic_rpc_handlers
        monkeypatch.setattr(
            server, "add_generic_rpc_handlers", lambda handlers: (generic.extend(handlers), passed_on(handlers))
        )
        servicer = SessionServicer.__new__(SessionServicer)  # never called: the server does not start
        register_services(server, servicer, health.aio.HealthServicer(), [SERVICE.full_name, reflection.SERVICE_NAME])
        await server.stop(None)
        return registered, len(generic)

    registered, generic = asyncio.run(register())
    assert registered == []
    assert generic == 3
