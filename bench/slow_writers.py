"""Many slow writers: the shape of a host that runs many agents.

`streams` writer streams stay open, each appending one small event per second (with a random
phase, so the load is even), for `seconds`. The writers run in `client_procs` client
processes of their own (so the server's figures are not the client's), `per_channel` streams
per channel; their collector runs with `serve`'s thresholds (transport/collector.py), so that
the clients' own collection pauses are not counted as the service's. Reported: how many
writer set-ups (create + open) failed and with what, how long they took (in waves of
`SETUP_WAVE`; the slowest client process's time), the acknowledgement latency p50 / p99 /
p99.9 / max, and stalls: the seconds in which the slowest acknowledgement took longer than
`STALL_MS`.

`python -m bench.slow_writers [--streams 2000] [--seconds 30] [--backends sqlite,postgresql]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bench.procs import (
    Server,
    each_backend,
    machine_cpu_seconds,
    processes_cpu_seconds,
    processes_waiting_seconds,
    section_main,
    settle_writes,
    unavailable_row,
)
from bench.stats import percentile
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.core.errors import SessionLogError
from sessionlog_server.transport.collector import DEFAULT_THRESHOLDS, tune_collector
from sessionlog_server.transport.workers import default_workers

STALL_MS = 250.0
"""A second whose slowest acknowledgement took longer than this counts as a stall."""

SETUP_WAVE = 100
"""Writers set up at once, one wave after the other, as harnesses start their agents (the
echo floor, `transport_floor.slow_streams`, sets its streams up the same way)."""


@dataclass
class _Part:
    """What one client process saw."""

    opened: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    setup_seconds: float = 0.0
    """How long this process's set-ups took, all waves."""
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds)
    append_errors: Counter[str] = field(default_factory=Counter)
    writes: tuple[float, float] = (0.0, 0.0)
    """When this process's writes began and ended (`time.time()`)."""
    writes_cpu: float = 0.0
    """This process's CPU seconds while its writers wrote."""


_START: Any = None
"""In a client process: the barrier every client process waits at once its set-ups are done,
so the writers of all of them start together (set by the pool's initializer)."""


def _init_part(start: Any) -> None:
    global _START
    _START = start
    # A process holding a thousand writers pauses for its own collections as a server does
    # (with Python's defaults, up to 280 ms in these client processes), and those pauses were
    # counted as the service's latency: the clients collect as `serve` does.
    tune_collector(DEFAULT_THRESHOLDS)


async def _run_part(target: str, sids: list[str], seconds: float, per_channel: int) -> _Part:
    part = _Part()
    clients = [AsyncSessionLogClient(target) for _ in range(max(1, -(-len(sids) // per_channel)))]
    writers: list[Any] = [None] * len(sids)

    async def open_one(index: int) -> None:
        try:
            writers[index] = await clients[index // per_channel].writer(sids[index], create_if_missing=True)
            part.opened += 1
        except SessionLogError as exc:
            part.failures[exc.reason] += 1
        except Exception as exc:
            part.failures[type(exc).__name__] += 1

    setup_began = time.monotonic()
    for group in range(0, len(sids), SETUP_WAVE):
        await asyncio.gather(*(open_one(i) for i in range(group, min(group + SETUP_WAVE, len(sids)))))
    part.setup_seconds = time.monotonic() - setup_began
    await asyncio.to_thread(_START.wait, 300 + len(sids) / 10)  # the others' set-ups too
    deadline = time.monotonic() + seconds
    began, cpu = time.time(), time.process_time()

    async def write(writer: Any, index: int) -> None:
        await asyncio.sleep(random.random())  # an even spread of phases
        tick = 0
        while time.monotonic() < deadline:
            sent = time.monotonic()
            event = {"type": "bench/tick", "data": {"n": tick}, "ignorable": True}
            try:
                await (await writer.append([event]))  # sent, then durable
                part.latencies.append((time.time(), time.monotonic() - sent))
            except SessionLogError as exc:
                part.append_errors[exc.reason] += 1
            tick += 1
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - sent)))

    await asyncio.gather(*(write(w, i) for i, w in enumerate(writers) if w is not None))
    part.writes, part.writes_cpu = (began, time.time()), time.process_time() - cpu
    for writer in writers:
        if writer is not None:
            with contextlib.suppress(Exception):  # closing after the measurement
                await writer.close()
    for client in clients:
        await client.close()
    return part


def _part_main(target: str, sids: list[str], seconds: float, per_channel: int) -> dict[str, Any]:
    part = asyncio.run(_run_part(target, sids, seconds, per_channel))
    return {
        "opened": part.opened,
        "failures": dict(part.failures),
        "setup_seconds": part.setup_seconds,
        "latencies": part.latencies,
        "append_errors": dict(part.append_errors),
        "writes": part.writes,
        "writes_cpu": part.writes_cpu,
    }


def measure(db: str, streams: int, seconds: float, client_procs: int, per_channel: int, workers: int) -> dict[str, Any]:
    """One run against a fresh server on `db`, once what earlier sections wrote is on disk."""
    settle_writes(db)
    workers = workers or default_workers()  # as `serve` resolves 0, so the table shows the count
    env = {"SESSIONLOG_MAX_OPEN_STREAMS": str(streams * 2), "SESSIONLOG_WORKERS": str(workers)}
    with Server(db, env=env) as server:
        stamp = int(time.time() * 1000)
        sids = [f"slow-{stamp}-{i}" for i in range(streams)]
        parts = [sids[i::client_procs] for i in range(client_procs)]
        cpu0, started = server.cpu_seconds(), time.monotonic()
        spawn = multiprocessing.get_context("spawn")
        start = spawn.Barrier(client_procs)  # one task per pool process, so every part reaches it
        with (
            CpuSampler(server.pids) as samples,
            spawn.Pool(client_procs, initializer=_init_part, initargs=(start,)) as pool,
        ):
            pending = [pool.apply_async(_part_main, (server.target, p, seconds, per_channel)) for p in parts]
            results = [p.get(timeout=seconds + 300 + streams / 10) for p in pending]
        cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - started
    latencies = sorted(lat for r in results for _, lat in r["latencies"])
    by_second: dict[int, float] = {}
    for r in results:
        for at, lat in r["latencies"]:
            second = int(at)
            by_second[second] = max(by_second.get(second, 0.0), lat)
    failures: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for r in results:
        failures.update(r["failures"])
        errors.update(r["append_errors"])

    def pct(q: float) -> float:
        return round(1000 * percentile(latencies, q), 2)

    return {
        "streams": streams,
        "workers": workers,
        "seconds": seconds,
        "setups_failed": sum(failures.values()),
        "setup_failures": dict(failures),
        "setup_s": round(max(r["setup_seconds"] for r in results), 2),  # the processes set up side by side
        "append_errors": dict(errors),
        "acks": len(latencies),
        "ack_p50_ms": pct(50),
        "ack_p99_ms": pct(99),
        "ack_p999_ms": pct(99.9),
        "ack_max_ms": round(1000 * latencies[-1], 1) if latencies else None,
        "stall_seconds": sum(1 for worst in by_second.values() if worst * 1000 > STALL_MS),
        "server_cpu_pct": round(100 * cpu / wall, 1),  # set-ups and writes
        **writes_cpu(samples, results),
    }


class Sample(NamedTuple):
    """One reading of `CpuSampler`: seconds, from `time.time()` and from the counters since boot."""

    at: float
    server_cpu: float
    server_waiting: float
    """The server's threads' time runnable without a core (`Server.waiting_seconds`)."""
    busy: float
    """The machine's busy CPU time (`machine_cpu_seconds`)."""
    total: float


class CpuSampler:
    """Samples a server's CPU time, its threads' wait for a core and the machine's busy time
    every `EVERY_S` while its clients run, so that the write phase (known only to the client
    processes) can be cut out of them afterwards (`writes_window`). `pids` gives the server's
    processes (`Server.pids`, or the echo floor's one process)."""

    EVERY_S = 0.2

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def _run(self) -> None:
        while True:
            busy, total = machine_cpu_seconds()
            pids = self.pids()  # one scan of /proc for both counters
            cpu, waiting = processes_cpu_seconds(pids), processes_waiting_seconds(pids)
            self.samples.append(Sample(time.time(), cpu, waiting, busy, total))
            if self._stop.wait(self.EVERY_S):
                return

    def __enter__(self) -> list[Sample]:
        self._thread.start()
        return self.samples

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def writes_cpu(samples: list[Sample], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the machine's CPU went while the writers wrote: the server's, the client
    processes' (their own measure) and the machine's busy share, in % of one core (the machine's
    in % of all of them), and how long the server's threads waited for a core, in ms per second
    (summed over its threads). Which side was short of a core is what decides the latency tail.
    Also the server's CPU per event acknowledged in that time, beside which the echo floor's CPU
    per message (`transport_floor.slow_streams`) says how much of it is gRPC's."""
    window = writes_window(samples, results)
    if window is None:
        return {}
    first, last = window
    wall = last.at - first.at
    client = sum(r["writes_cpu"] / (r["writes"][1] - r["writes"][0]) for r in results)
    return {
        "writes_server_cpu_pct": round(100 * (last.server_cpu - first.server_cpu) / wall, 1),
        "writes_server_us_per_event": server_us_per_answer(results, first, last),
        "writes_client_cpu_pct": round(100 * client, 1),
        "writes_machine_busy_pct": round(100 * (last.busy - first.busy) / (last.total - first.total), 1),
        "writes_server_waited_ms_per_s": round(1000 * (last.server_waiting - first.server_waiting) / wall, 1),
    }


def writes_window(samples: list[Sample], parts: list[dict[str, Any]]) -> tuple[Sample, Sample] | None:
    """The first and last samples taken while every client process wrote (each part's `writes`:
    when it began and ended, `time.time()`), or None if fewer than two were."""
    began = max(p["writes"][0] for p in parts)
    ended = min(p["writes"][1] for p in parts)
    inside = [s for s in samples if began <= s.at <= ended]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None


def server_us_per_answer(parts: list[dict[str, Any]], first: Sample, last: Sample) -> float:
    """The server's CPU between two samples over the answers the client processes had in that
    time (each part's `latencies`: when answered, and after how long), in µs."""
    answered = sum(1 for p in parts for at, _ in p["latencies"] if first.at <= at <= last.at)
    return round(1e6 * (last.server_cpu - first.server_cpu) / max(answered, 1), 1)


def run_all(backends: list[str], streams: int, seconds: float, client_procs: int, workers: int) -> dict[str, Any]:
    return each_backend(backends, "slow", lambda db: measure(db, streams, seconds, client_procs, 64, workers))


def render(results: dict[str, Any]) -> str:
    lines = [
        "| backend | streams | workers | set-ups failed | set-up s | ack p50 / p99 / p99.9 / max ms | stall seconds "
        "| server CPU | in the writes: server / clients / machine busy | server µs CPU/event in the writes "
        "| server threads waiting for a core |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, r in results.items():
        if "unavailable" in r:
            lines.append(unavailable_row(backend, 11))
            continue
        lines.append(
            f"| {backend} | {r['streams']:,} | {r['workers']} | {r['setups_failed']} {r['setup_failures'] or ''} | "
            f"{r['setup_s']} | {r['ack_p50_ms']} / {r['ack_p99_ms']} / {r['ack_p999_ms']} / {r['ack_max_ms']} | "
            f"{r['stall_seconds']} of {int(r['seconds'])} | {r['server_cpu_pct']}% | {_split(r)} | "
            f"{r.get('writes_server_us_per_event', '-')} | {_waited(r)} |"
        )
    return "\n".join(lines)


def _split(r: dict[str, Any]) -> str:
    if "writes_server_cpu_pct" not in r:
        return "-"
    return f"{r['writes_server_cpu_pct']}% / {r['writes_client_cpu_pct']}% / {r['writes_machine_busy_pct']}%"


def _waited(r: dict[str, Any]) -> str:
    if "writes_server_waited_ms_per_s" not in r:
        return "-"
    return f"{r['writes_server_waited_ms_per_s']} ms/s"


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--streams", type=int, default=2000)
        parser.add_argument("--seconds", type=float, default=30.0)
        parser.add_argument("--client-procs", type=int, default=2)
        parser.add_argument("--workers", type=int, default=0, help="server processes (0: one per core, as serve)")

    def run(args: argparse.Namespace, backends: list[str]) -> dict[str, Any]:
        return run_all(backends, args.streams, args.seconds, args.client_procs, args.workers)

    return section_main(argv, "python -m bench.slow_writers", __doc__ or "", options, run, render)


if __name__ == "__main__":
    sys.exit(main())
