"""The pings the service accepts from its clients: their keepalive, at their interval.

gRPC's default server policy takes a PING that comes sooner than 5 minutes after the last one,
while the server has sent no data since, as a strike, and answers the third strike with GOAWAY
(ENHANCE_YOUR_CALM, "too_many_pings"), closing the connection; on a connection with no call
open it allows one PING every 2 hours. The clients ping every 10 s (`sessionlog.keepalive`, and
the TypeScript client), so a writer stream quiet between turns, or a quiet subscription, was cut
about every 40 s and reconnected, and an idle connection was closed.

The service accepts PINGs `MIN_PING_INTERVAL_MS` apart (half the clients' interval), with calls
or without. A client that pings faster still draws strikes and, after gRPC's two, GOAWAY: the
policy keeps its purpose against a PING flood.

The service pings its clients too (`client_ping_ms`): a writer's host that went silent (power
loss, a dropped network) sends no FIN, and a quiet stream sends nothing the kernel would find
unanswered, so without a PING the service held such a stream, and renewed its lease, until TCP
gave up on the connection: hours, while every other writer of the session was refused
WRITER_HELD.
"""

from __future__ import annotations

from sessionlog.keepalive import MIN_PING_INTERVAL_MS


def client_ping_options(client_ping_ms: int) -> list[tuple[str, int]]:
    """The server's options for pinging its clients: after `client_ping_ms` of quiet, answered
    within half that (at least 1 s), on a connection with calls or without, however long the
    client sends no data (0: gRPC's defaults, no such pings)."""
    if client_ping_ms <= 0:
        return []
    timeout_ms = max(1_000, client_ping_ms // 2)
    return [
        ("grpc.keepalive_time_ms", client_ping_ms),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        # No keepalive PING goes out while another PING is unanswered (the flow-control probe
        # sent with the stream's last data), and that one's own timeout, 60 s by default,
        # decided instead: every PING gets the keepalive's (as the clients' do).
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.http2.max_pings_without_data", 0),
    ]


SERVER_PING_OPTIONS: list[tuple[str, int]] = [
    # gRPC core's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS. Its string is this one:
    # "grpc.http2.min_recv_ping_interval_without_data_ms", the macro's name, is no option, and
    # gRPC ignores a name it does not know without a word.
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
    ("grpc.keepalive_permit_without_calls", 1),
]
"""The server's channel options for its ping policy (`server.start_server`)."""
