"""`sessionlog health`: the server's gRPC health (grpc.health.v1), for a container's or a
supervisor's probe (deploy/Dockerfile's HEALTHCHECK, deploy/compose.yaml)."""

from __future__ import annotations

from typing import Annotated

import typer

from sessionlog.cli.common import connect, fail
from sessionlog.v1 import session_service_pb2

NOT_SERVING_EXIT = 1
"""The exit status of a server that answered anything but SERVING."""

SESSION_SERVICE: str = session_service_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name
"""The service whose health a sessionlog server reports besides its own (`--service`)."""


def register(app: typer.Typer) -> None:
    """Add `health` to `app`."""
    app.command("health")(health)


def health(
    service: Annotated[
        str,
        typer.Option(
            "--service",
            metavar="NAME",
            help=f"A service to ask about (`{SESSION_SERVICE}`); default: the server as a whole.",
        ),
    ] = "",
) -> None:
    """Print the server's health, `SERVING` or `NOT_SERVING` (a database write unanswered, or
    the server stopping), and exit 0 only when it is SERVING: what a probe runs. A server that
    cannot be reached is the one-line error, exit 1."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from sessionlog.errors import from_rpc_error

    with connect() as client:
        stub = health_pb2_grpc.HealthStub(client.channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=client.timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # the health service knows no such name
                raise fail(
                    f"the server reports no health for service {service!r}: ask about "
                    f"{SESSION_SERVICE} or none (the server as a whole)",
                    code=2,
                ) from None
            raise from_rpc_error(exc) from None  # `connect` prints it as every call's error
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    typer.echo(status)
    if answer.status != health_pb2.HealthCheckResponse.SERVING:
        raise typer.Exit(NOT_SERVING_EXIT)
