"""What gRPC alone costs here: a grpc.aio echo server, measured like the sessionlog figures.

The server process does nothing but answer: a unary call returns its request, a bidirectional
stream answers each message with 8 bytes (an acknowledgement's size). Messages carry the
workload's mean event size. Its CPU per message is the part of sessionlog's per-event CPU that
no change to sessionlog's own code can remove while it is served by grpc.aio in Python, and
1e6 / (µs per message) is the most messages one core can take through it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.synchronize import Event as EventType
from typing import Any

import grpc

from bench.procs import free_port, process_cpu_seconds

SERVICE = "bench.Echo"


def _serve(port: int, ready: EventType) -> None:
    """The echo server's process."""

    async def main() -> None:
        async def echo(request: bytes, _context: Any) -> bytes:
            return request

        async def acks(requests: Any, _context: Any) -> Any:
            async for _ in requests:
                yield b"ack-seq0"

        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Unary": grpc.unary_unary_rpc_method_handler(echo),
                "Stream": grpc.stream_stream_rpc_method_handler(acks),
            },
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(main())


def _unary(target: str, payload: bytes, calls: int) -> float:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(f"/{SERVICE}/Unary")
        start = time.perf_counter()
        for _ in range(calls):
            call(payload)
        return time.perf_counter() - start


async def _streams(target: str, payload: bytes, streams: int, per_stream: int) -> float:
    async with grpc.aio.insecure_channel(target) as channel:
        method = channel.stream_stream(f"/{SERVICE}/Stream")

        async def one() -> None:
            call = method()

            async def send() -> None:
                for _ in range(per_stream):
                    await call.write(payload)
                await call.done_writing()

            sender = asyncio.create_task(send())
            async for _ in call:
                pass
            await sender

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(streams)))
        return time.perf_counter() - start


def measure(payload_bytes: int, unary_calls: int, streams: int, per_stream: int) -> dict[str, Any]:
    """Unary round trips one at a time, and `streams` bidirectional streams at once."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    port = free_port()
    proc = ctx.Process(target=_serve, args=(port, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(60):
            return {"unavailable": "the echo server did not start"}
        assert proc.pid is not None
        target = f"127.0.0.1:{port}"
        payload = b"x" * payload_bytes
        _unary(target, payload, 200)  # warm-up: connection, first-call set-up
        cpu = process_cpu_seconds(proc.pid)
        seconds = _unary(target, payload, unary_calls)
        unary_cpu = process_cpu_seconds(proc.pid) - cpu
        cpu = process_cpu_seconds(proc.pid)
        stream_seconds = asyncio.run(_streams(target, payload, streams, per_stream))
        stream_cpu = process_cpu_seconds(proc.pid) - cpu
        messages = streams * per_stream
        return {
            "payload_bytes": payload_bytes,
            "unary": {
                "calls": unary_calls,
                "calls_per_s": round(unary_calls / seconds, 1),
                "server_us_per_call": round(1e6 * unary_cpu / unary_calls, 1),
            },
            "streams": {
                "streams": streams,
                "messages": messages,
                "messages_per_s": round(messages / stream_seconds, 1),
                "server_us_per_message": round(1e6 * stream_cpu / messages, 1),
            },
        }
    finally:
        proc.kill()
        proc.join(10)
