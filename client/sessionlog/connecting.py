"""How the Python clients connect, and reconnect after a cut: how long a connect attempt may
take, and how long the channel waits between attempts.

gRPC core gives each connect attempt until max(now + MIN_CONNECT_TIMEOUT, the time of the next
attempt by the backoff) (doc/connection-backoff.md), and takes MIN_CONNECT_TIMEOUT from the
channel option `grpc.min_reconnect_backoff_ms` (20 s when unset; there is no separate
connect-timeout option). The clients set that option to 100 ms, meant as the shortest wait
between attempts, and so gave an attempt 100 ms, then the backoff's 160, 256, ... up to its
1 s cap: TCP, TLS and the service's HTTP/2 SETTINGS frame must all arrive within it, or the
attempt fails "connection attempt timed out before receiving SETTINGS frame". A service in
another region (a 400 ms round trip: TLS needs 0.8 s before SETTINGS arrive) failed every
attempt until the backoff had grown past the handshake: a writer opened on a fresh client
failed at once, and a unary call or subscription went through after five or six attempts
(each a TLS handshake wasted on the service); at a 600 ms round trip with TLS nothing connected.

The reconnect backoff stays short: a service that restarts refuses connections (at once) until
it listens again, and the channel tries again after the backoff, not the connect timeout, so a
writer is back within a second of the restart. The connect timeout only bounds an attempt that
gets no answer: a long link, or a service that hangs (its kernel accepts the connection, the
process answers nothing), which is then given up after `CONNECT_TIMEOUT_MS` and tried again.
The TypeScript client (Connect) gives a connection as long as the call's own timeout.
"""

from __future__ import annotations

CONNECT_TIMEOUT_MS = 5_000
"""How long a connect attempt may take, TCP, TLS and the service's SETTINGS frame included: a
TLS handshake takes three or four one-way trips, so this covers round trips past 1 s (and a
lost SYN, resent after 1 s); a service that hangs is given up after it."""

INITIAL_RECONNECT_BACKOFF_MS = 100
"""The wait after a first failed connect attempt (a restart's refused connection): it then grows
1.6-fold (gRPC's multiplier, with ±20% jitter) up to `MAX_RECONNECT_BACKOFF_MS`."""

MAX_RECONNECT_BACKOFF_MS = 1_000
"""The longest wait between connect attempts (gRPC's default grows to 120 s, long enough for a
writer's lease to lapse while its channel waits)."""

CHANNEL_CONNECT_OPTIONS: list[tuple[str, int]] = [
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    # Not a backoff, whatever its name: gRPC core's minimum connect timeout (see above).
    ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
]
"""The connect options of both clients' channels (`requests.CHANNEL_OPTIONS`)."""
