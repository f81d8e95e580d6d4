"""How the Python clients notice a service that hangs, and the pings the service accepts.

A service can hang rather than die: a paused VM, a host gone silent behind a network that drops
packets, a process stopped with SIGSTOP. Its connections stay open and nothing answers on them,
so a call without a deadline of its own (a streaming writer's appends, a subscription) waited
for as long as the hang lasted. Each client's connection sends an HTTP/2 PING after
`KEEPALIVE_TIME_MS` without a frame from the service and gives the connection up when the PING
is not answered within `KEEPALIVE_TIMEOUT_MS`: the calls on it fail as UNAVAILABLE, and the
writer and subscriptions reconnect by their own policy, as after any cut. The values are the
TypeScript client's (`pingIntervalMs`, `pingTimeoutMs` in client/typescript/src/sessions.ts).

The service must accept those pings: gRPC's default answers a client that pings more often than
every 5 minutes without data with GOAWAY ("too_many_pings"), which cut quiet writer streams and
subscriptions every ~40 s. Its ping policy (server/sessionlog_server/transport/keepalive.py) is
derived from `MIN_PING_INTERVAL_MS` here, so the two cannot drift apart.
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 10_000
"""A PING after this long without a frame from the service."""

KEEPALIVE_TIMEOUT_MS = 5_000
"""How long a PING may go unanswered before the connection is given up."""

HANG_NOTICED_WITHIN_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000
"""A connection to a hung service is given up at most this long after the service's last frame
on it (15 s); what waits on it then fails or reconnects."""

MIN_PING_INTERVAL_MS = KEEPALIVE_TIME_MS // 2
"""The service takes pings this far apart (and further) without counting them against the
client: half the clients' interval, so a ping that comes a little early (timer jitter) is fine."""

CHANNEL_KEEPALIVE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # gRPC sends no keepalive PING while another PING is unanswered (the flow-control probe it
    # sends along with data): that one's timeout, 60 s by default, decided instead, so a writer
    # whose append was on the wire noticed a hang after a minute. Every PING gets the same 5 s.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # Ping an idle connection too: a lease writer's heartbeat or any later call then finds a
    # live connection (or a new one) instead of spending its timeout on a dead one. (The
    # TypeScript client's Connect pings a connection idle that long before it sends a call on
    # it instead; gRPC core has no such check.)
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC otherwise sends at most two PINGs while the client sends no data, and a quiet
    # subscription (or a writer with nothing to append) sends none.
    ("grpc.http2.max_pings_without_data", 0),
]
"""The keepalive options of both clients' channels (`requests.CHANNEL_OPTIONS`)."""
