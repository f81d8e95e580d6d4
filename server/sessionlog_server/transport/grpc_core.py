"""gRPC core's options for a serving process, which must be set before gRPC loads.

gRPC reads `GRPC_EXPERIMENTS` and `GRPC_VERBOSITY` once, when its core loads (at `import grpc`);
set any later, they change nothing in that process. So `sessionlog serve` sets them first (the
CLI imports gRPC only when a command connects), and the worker processes it starts inherit them.

`-event_engine_listener` serves accepted connections with gRPC's iomgr TCP server instead of
the EventEngine listener gRPC 1.85 uses by default. Its connections are read by the thread
that polls the completion queue, which under grpc.aio is the poller thread that wakes the
event loop; an EventEngine connection is read on a thread of the engine's pool, which then
wakes the poller thread: one thread hop more for each read. A server that answers one event
per message pays it per event (bench/PROFILE.md, round 17, SQLite: 14.7-14.9 against 11.6-11.9
context switches per event at 1,000 one-event messages a second; a bare grpc.aio echo, 11.6-12.3
against 6.0-6.2 per unary call). Clients are untouched: the experiment is of listeners only.

`GRPC_VERBOSITY=ERROR`: without it gRPC core logs through absl at INFO, in its own text format,
on the stderr the service writes its JSON lines to; a failed TLS handshake (a plaintext client,
a port scanner) was such a line, one per connection, which anyone reaching the port could
repeat. At ERROR the log stays one JSON object per line but for gRPC's own errors.
"""

from __future__ import annotations

import os

GRPC_EXPERIMENTS = "GRPC_EXPERIMENTS"
"""gRPC's own variable: comma-separated experiment names, `-name` turning one off."""

SERVER_EXPERIMENTS = "-event_engine_listener"
"""What a sessionlog server sets it to unless the environment already sets it."""

GRPC_VERBOSITY = "GRPC_VERBOSITY"
"""gRPC's own variable: the least severe of its core's log lines written (DEBUG, INFO, ERROR, NONE)."""

SERVER_VERBOSITY = "ERROR"
"""What a sessionlog server sets it to unless the environment already sets it."""

SERVER_OPTIONS = {GRPC_EXPERIMENTS: SERVER_EXPERIMENTS, GRPC_VERBOSITY: SERVER_VERBOSITY}


def apply_server_options() -> None:
    """Set gRPC's variables (`SERVER_OPTIONS`) for this process and the processes it starts,
    each unless the environment sets it already (an operator's own choice wins, empty
    included). They take effect in this process only if gRPC has not loaded here yet."""
    for name, value in SERVER_OPTIONS.items():
        os.environ.setdefault(name, value)
