"""What gRPC alone costs here: a grpc.aio echo server, measured like the sessionlog figures.

The server process does nothing but answer, on the event loop sessionlog's servers run on: a
unary call returns its request, a bidirectional stream answers each message with 8 bytes (an
acknowledgement's size). Messages carry the workload's mean event size. Its CPU per message is
the part of sessionlog's per-event CPU that no change to sessionlog's own code can remove while
it is served by grpc.aio in Python, and 1e6 / (µs per message) is the most messages one core
can take through it.

`slow_streams` is the floor of the many-slow-writers figure: `streams` streams on one echo
server, each sending one message a second, from client processes of their own, as
`bench.slow_writers` drives sessionlog. `latency_at_rate` is the floor of the ack latency
figures: the echo's answer latency under the open-loop load `figures.fixed_rate` puts on
sessionlog (16 streams, 1,000 messages a second in all).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import time
from collections import Counter, deque
from collections.abc import Iterator
from multiprocessing.synchronize import Event as EventType
from typing import Any

import grpc

from bench.pacing import LEAD_S, open_loop
from bench.procs import free_port, process_cpu_seconds
from bench.slow_writers import SETUP_WAVE, CpuSampler, server_us_per_answer, writes_window
from bench.stats import latency_ms
from sessionlog_server.config import Settings
from sessionlog_server.transport.collector import DEFAULT_THRESHOLDS, tune_collector
from sessionlog_server.transport.event_loop import run
from sessionlog_server.transport.grpc_core import apply_server_options

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

    # On the loop and with the collector sessionlog's servers run with, so the floor is theirs.
    settings = Settings.from_env()
    tune_collector(settings.gc_thresholds)
    run(main(), settings.event_loop)


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


async def _paced_streams(target: str, count: int, seconds: float, per_channel: int) -> dict[str, Any]:
    """`count` streams, set up in waves of `SETUP_WAVE` (each its first message and answer, as a
    writer's open), then one message a second each (random phases), each message timed to its
    answer (when it came, `time.time()`, and after how long, as the slow writers record theirs);
    a stream that fails is counted by its status and not reopened. Also when the writes began and
    ended, for the server's CPU in them (`slow_writers.writes_window`)."""
    channels = [grpc.aio.insecure_channel(target) for _ in range(-(-count // per_channel))]
    calls: list[Any] = []
    latencies: list[tuple[float, float]] = []
    failed: Counter[str] = Counter()

    async def fail(call: Any) -> None:
        failed[(await call.code()).name] += 1

    async def set_up(index: int) -> Any:
        call = channels[index // per_channel].stream_stream(f"/{SERVICE}/Stream")()
        try:
            await call.write(b"x" * 64)
            await call.read()
        except (grpc.RpcError, asyncio.InvalidStateError):
            await fail(call)
            return None
        return call

    async def one(call: Any, deadline: float) -> None:
        await asyncio.sleep(random.random())
        try:
            while time.monotonic() < deadline:
                sent = time.monotonic()
                await call.write(b"x" * 64)  # a small event's size
                await call.read()
                latencies.append((time.time(), time.monotonic() - sent))
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - sent)))
            await call.done_writing()
        except (grpc.RpcError, asyncio.InvalidStateError):  # a write to a call that ended raises the latter
            await fail(call)

    for wave in range(0, count, SETUP_WAVE):
        calls += await asyncio.gather(*(set_up(i) for i in range(wave, min(wave + SETUP_WAVE, count))))
    deadline, began = time.monotonic() + seconds, time.time()
    await asyncio.gather(*(one(call, deadline) for call in calls if call is not None))
    ended = time.time()
    for channel in channels:
        await channel.close()
    return {"latencies": latencies, "writes": (began, ended), "failed": dict(failed)}


async def _open_loop(target: str, payload: bytes, streams: int, rate: float, seconds: float) -> list[float]:
    """`streams` streams on one channel; message i is due at start + i/`rate` and goes to stream
    i mod `streams` (`figures.fixed_rate`'s open loop); each is timed from its write to its
    answer, which a stream sends in order, so each stream's reader takes the oldest send time."""
    async with grpc.aio.insecure_channel(target) as channel:
        method = channel.stream_stream(f"/{SERVICE}/Stream")
        calls = [method() for _ in range(streams)]
        for call in calls:  # each stream open and answered before the clock starts, as writers are
            await call.write(b"x" * 64)
            await call.read()
        sent: list[deque[float]] = [deque() for _ in range(streams)]
        taken: list[float] = []

        async def answers(index: int) -> None:
            call, times = calls[index], sent[index]
            while await call.read() is not grpc.aio.EOF:
                taken.append(time.monotonic() - times.popleft())

        readers = [asyncio.create_task(answers(index)) for index in range(streams)]
        async for i, _due, _behind in open_loop(int(rate * seconds), rate, time.monotonic() + LEAD_S):
            sent[i % streams].append(time.monotonic())
            await calls[i % streams].write(payload)
        for call in calls:
            await call.done_writing()
        await asyncio.wait_for(asyncio.gather(*readers), timeout=max(60.0, 4 * seconds))
        return taken


def _open_loop_part(target: str, payload_bytes: int, streams: int, rate: float, seconds: float) -> list[float]:
    """Entry point of the open-loop client's process."""
    return asyncio.run(_open_loop(target, b"x" * payload_bytes, streams, rate, seconds))


def latency_at_rate(payload_bytes: int, streams: int, rate: float, seconds: float) -> dict[str, Any]:
    """The echo server's answer latency under sessionlog's ack latency load (`figures.fixed_rate`:
    `streams` streams, `rate` messages a second in all, open loop, the client in a process of its
    own): what the gRPC round trip alone takes at that pace, before any decoding or commit."""
    try:
        with _echo_server() as (_pid, target), multiprocessing.get_context("spawn").Pool(1) as pool:
            taken = pool.apply(_open_loop_part, (target, payload_bytes, streams, rate, seconds))
    except RuntimeError as exc:
        return {"unavailable": str(exc)}
    return {"offered_per_s": rate, "streams": streams, "messages": len(taken), **latency_ms(taken)}


def _paced_part(target: str, count: int, seconds: float, per_channel: int) -> dict[str, Any]:
    tune_collector(DEFAULT_THRESHOLDS)  # as bench.slow_writers' client processes do
    return asyncio.run(_paced_streams(target, count, seconds, per_channel))


def slow_streams(streams: int, seconds: float, client_procs: int = 2, per_channel: int = 64) -> dict[str, Any]:
    """The echo server under `streams` streams of one message a second each, sent from
    `client_procs` processes: answer latency, failed streams, the server's CPU over the whole
    run, and its CPU per message while the streams wrote (set-ups left out, as the slow writers'
    `writes_server_us_per_event` leaves theirs)."""
    with _echo_server() as (pid, target), CpuSampler(lambda: [pid]) as samples:
        ctx = multiprocessing.get_context("spawn")
        cpu, start = process_cpu_seconds(pid), time.monotonic()
        with ctx.Pool(client_procs) as pool:
            share = -(-streams // client_procs)
            parts = pool.starmap(_paced_part, [(target, share, seconds, per_channel)] * client_procs)
        cpu, wall = process_cpu_seconds(pid) - cpu, time.monotonic() - start
    taken = [after for part in parts for _, after in part["latencies"]]
    failed: Counter[str] = Counter()
    for part in parts:
        failed.update(part["failed"])
    window = writes_window(samples, parts)
    return {
        "streams": share * client_procs,
        "seconds": seconds,
        "messages": len(taken),
        "streams_failed": sum(failed.values()),
        "failures": dict(failed),
        **latency_ms(taken),
        "server_cpu_pct": round(100 * cpu / wall, 1),
        "server_us_per_message": server_us_per_answer(parts, *window) if window else None,
    }


@contextlib.contextmanager
def _echo_server() -> Iterator[tuple[int, str]]:
    """The echo server in a process of its own: its pid and address."""
    # With the gRPC options `serve` sets (transport/grpc_core.py), so the floor is a sessionlog
    # server's: the process started here loads gRPC with them.
    apply_server_options()
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    port = free_port()
    proc = ctx.Process(target=_serve, args=(port, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the echo server did not start")
        assert proc.pid is not None
        yield proc.pid, f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.join(10)


def measure(payload_bytes: int, unary_calls: int, streams: int, per_stream: int) -> dict[str, Any]:
    """Unary round trips one at a time, and `streams` bidirectional streams at once."""
    try:
        with _echo_server() as (pid, target):
            payload = b"x" * payload_bytes
            _unary(target, payload, 200)  # warm-up: connection, first-call set-up
            cpu = process_cpu_seconds(pid)
            seconds = _unary(target, payload, unary_calls)
            unary_cpu = process_cpu_seconds(pid) - cpu
            cpu = process_cpu_seconds(pid)
            stream_seconds = asyncio.run(_streams(target, payload, streams, per_stream))
            stream_cpu = process_cpu_seconds(pid) - cpu
    except RuntimeError as exc:
        return {"unavailable": str(exc)}
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
