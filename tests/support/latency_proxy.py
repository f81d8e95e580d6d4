"""A TCP proxy on loopback that makes a service far away: every byte reaches the other side
`delay_s` after it was sent, each way (a round trip of twice that), as on a link to another
region. It forwards bytes, not gRPC, so TLS and HTTP/2 pass through it untouched: a TLS
handshake takes its round trips through it, as it would over a long link.

It adds latency, not a bandwidth limit: a chunk read at time t is written at t + delay, in
order, whatever else is in flight.

usage: python -m tests.support.latency_proxy UPSTREAM DELAY_MS
prints `listening HOST:PORT`, then serves until stdin closes (the TypeScript client's tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import Any

READ_CHUNK = 64 * 1024


class LatencyProxy:
    """Forwards every connection to `upstream` (HOST:PORT) with `delay_s` added each way; its
    own asyncio loop runs in a background thread. `target` names the proxy."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self.delay_s = delay_s
        self.connections = 0
        """How many connections the proxy has accepted (each connect attempt of a client)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="latency-proxy")
        self._thread.start()
        self._closing = False
        self._flowing = asyncio.Event()
        """Cleared while the proxy is stalled (`stall`): nothing is delivered either way."""
        self._loop.call_soon_threadsafe(self._flowing.set)
        self._sockets: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[Any]] = set()
        """The task of each connection, until both its directions have ended."""
        listening = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop)
        self._server = listening.result(timeout=30)
        self.target = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        this = asyncio.current_task()
        assert this is not None
        self._relays.add(this)
        sockets = {client_writer}
        self._sockets.add(client_writer)
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
            except OSError:
                return  # the service is down: the client sees its connection close
            sockets.add(upstream_writer)
            self._sockets.add(upstream_writer)
            if self._closing:  # accepted while the proxy closed: cut at once
                return
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer),
                self._pipe(upstream_reader, client_writer),
            )
        finally:
            for writer in sockets:
                writer.close()
            self._sockets -= sockets
            self._relays.discard(this)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction: each chunk is written `delay_s` after it was read, in order; the end
        of the stream (or a reset) is passed on after the same delay."""
        in_flight: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        delivering = asyncio.create_task(self._deliver(in_flight, writer))
        with contextlib.suppress(OSError):  # a reset: passed on as the end of the stream
            while chunk := await reader.read(READ_CHUNK):
                in_flight.put_nowait((time.monotonic() + self.delay_s, chunk))
        in_flight.put_nowait((time.monotonic() + self.delay_s, b""))
        await delivering

    async def _deliver(self, in_flight: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            due, chunk = await in_flight.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self._flowing.wait()
            if not chunk:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            try:
                writer.write(chunk)
                await writer.drain()
            except OSError:
                return  # that side has gone: nothing more to deliver to it

    def stall(self) -> None:
        """Deliver nothing either way until `resume`, connections kept open and new ones
        accepted: a peer that hangs (a paused VM, a link that drops every packet), which
        neither side can tell from a quiet one."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        """Deliver again what a `stall` held back, in order."""
        self._loop.call_soon_threadsafe(self._flowing.set)

    def cut(self) -> None:
        """Cut every connection open now (each side sees it reset), as a network fault would;
        the proxy goes on accepting new ones."""
        self._loop.call_soon_threadsafe(self._abort_all)

    def _abort_all(self) -> None:
        for writer in self._sockets:
            writer.transport.abort()

    async def _stop(self) -> None:
        """Stop listening and cut every connection (each side sees it reset), then wait for
        their relays to end (a connection whose upstream is being opened ends as it opens)."""
        self._closing = True
        self._flowing.set()  # a stalled delivery ends with its connection
        self._server.close()
        self._abort_all()
        await asyncio.gather(*self._relays, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    upstream, delay_ms = sys.argv[1], int(sys.argv[2])
    with LatencyProxy(upstream, delay_ms / 1000) as proxy:
        print("listening", proxy.target, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
