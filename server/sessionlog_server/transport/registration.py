"""How the server's services are registered with grpc.aio: by their generic handlers only.

A generated `add_*Servicer_to_server` registers each service twice: a generic handler (looked
up by method name per call) and "registered methods" (matched by gRPC's core). grpc.aio's
server then keeps one pending request future per registered method, plus one for generic
calls, and waits on all of them with `asyncio.wait(FIRST_COMPLETED)` for every call it
accepts: adding and removing a callback on each, twice per unary call. With SessionService's
18 methods, health and reflection that is 24 futures per wait. Served by the generic handlers
alone, the wait covers one future, and a call finds its handler by one dict lookup in the
first generic handler that knows its service (bench/PROFILE.md, round 19).
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from sessionlog.v1 import session_service_pb2_grpc
from sessionlog_server.transport.servicer import SessionServicer


class GenericHandlersOnly:
    """What a generated `add_*Servicer_to_server` is given in place of the server: it passes
    the generic handlers on and drops the registered-method copy of the same handlers."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        """Dropped: the generic handler given alongside serves the same methods."""


def register_services(
    server: grpc.aio.Server,
    servicer: SessionServicer,
    health_servicer: health.aio.HealthServicer,
    reflected: Sequence[str],
) -> None:
    """SessionService, health and reflection (of the `reflected` service names) on `server`."""
    registrar = GenericHandlersOnly(server)
    session_service_pb2_grpc.add_SessionServiceServicer_to_server(servicer, registrar)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, registrar)
    # `reflection.enable_server_reflection` picks its asyncio servicer by the server's type,
    # which the registrar is not; this is the registration it makes for a grpc.aio server.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(list(reflected)), registrar
    )


__all__ = ["GenericHandlersOnly", "register_services"]
