"""Each client object has a TCP connection of its own (`requests.CHANNEL_OPTIONS`).

gRPC shares one connection among a process's channels to one target unless told otherwise; a
process that opens several clients then sends every stream to the one `serve --workers` process
that accepted that connection. Counted from the server's side of the sockets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from tests.support.servers import ServerThread

ESTABLISHED = "01"


def _connections_to(port: int) -> int:
    """Established TCP connections whose local end is `port` (the server's ends)."""
    count = 0
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == ESTABLISHED:
                count += 1
    return count


def test_every_client_connects_on_its_own(db_url: str, sid: str) -> None:
    # A server of its own: the suite's shared one also serves other tests' clients of this
    # process, whose connections (a reconnect, a heartbeat) would count here (seen once: 6 for 5).
    server = ServerThread(db_url)
    port = int(server.target.rsplit(":", 1)[1])
    before = _connections_to(port)
    clients = [SessionLogClient(server.target) for _ in range(3)]
    try:
        for index, client in enumerate(clients):
            client.create_session(f"{sid}-{index}")
        assert _connections_to(port) - before == 3

        async def with_async_clients() -> int:
            opened = [AsyncSessionLogClient(server.target) for _ in range(2)]
            for index, client in enumerate(opened):
                await client.get_session(f"{sid}-{index}")
            count = _connections_to(port) - before
            for client in opened:
                await client.close()
            return count

        assert asyncio.run(with_async_clients()) == 5
    finally:
        for client in clients:
            client.close()
        server.stop()
