"""The sessionlog workloads, each against a running `Server`, each returning a JSON-able dict.

Every event is sent as its own batch and counted only when its acknowledgement arrives, and
the service acknowledges a batch only after its transaction committed (SQLite WAL with
`synchronous=FULL`, PostgreSQL with `synchronous_commit=on`). Concurrent sessions may share a
commit (group commit) - that is the service's design, not a shortcut of the bench.

Each throughput figure also reports the CPU used by the server process and by the client
(this bench process, or its client worker processes) during the run: on a 2-core machine the
client competes with the server, and these two numbers say which side was the limit.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.pacing import LEAD_S, open_loop
from bench.procs import Server, process_cpu_seconds, settle_writes
from bench.stats import percentile
from bench.workload import as_new_events, session_events, user_message
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.events import NewEvent

#: How long past its time budget a streaming run may wait for acknowledgements before it is
#: reported as stalled (a server that stops acknowledging must not hang the bench).
STALL_SECONDS = 60.0


def _sid(label: str) -> str:
    return f"bench-{label}-{uuid.uuid4().hex[:10]}"


def _throughput(events: int, seconds: float, server_cpu: float, client_cpu: float, **extra: Any) -> dict[str, Any]:
    seconds = max(seconds, 1e-9)
    return {
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds, 1),
        "server_cpu_pct": round(100 * server_cpu / seconds, 1),
        # Server CPU time per acknowledged event: machine-independent enough to show regressions.
        "server_us_per_event": round(1e6 * server_cpu / max(events, 1), 1),
        "client_cpu_pct": round(100 * client_cpu / seconds, 1),
        **extra,
    }


# --- unary, sequential ------------------------------------------------------------------


def unary_sequential(server: Server, events: list[NewEvent], max_seconds: float) -> dict[str, Any]:
    """One session, one event per AppendEvents call, each waited for before the next."""
    sid = _sid("unary")
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        client.append(sid, lease, [events[0]])  # warm the channel and the session's fold
        sent = 1
        cpu_s, cpu_c = server.cpu_seconds(), time.process_time()
        start = time.monotonic()
        deadline = start + max_seconds
        for event in events[1:]:
            client.append(sid, lease, [event])
            sent += 1
            if time.monotonic() > deadline:
                break
        wall = time.monotonic() - start
        result = _throughput(sent - 1, wall, server.cpu_seconds() - cpu_s, time.process_time() - cpu_c)
        client.release_lease(lease)
    return result


# --- streaming, pipelined ---------------------------------------------------------------


@dataclass
class _StreamRun:
    acked: int
    start: float
    end: float
    client_cpu: float
    latencies: list[float]
    stalled: bool = False


async def _open_writers(
    target: str, sids: Sequence[str], window: int, per_channel: int = 64
) -> tuple[list[AsyncSessionLogClient], list[Any]]:
    """Open writers, 50 at a time, one channel per `per_channel` writers (an HTTP/2
    connection carries many streams, but a server may cap them per connection)."""
    clients = [AsyncSessionLogClient(target) for _ in range(max(1, (len(sids) + per_channel - 1) // per_channel))]
    writers: list[Any] = []
    for group in range(0, len(sids), 50):
        opened = await asyncio.gather(
            *(
                clients[i // per_channel].writer(sids[i], create_if_missing=True, max_in_flight=window)
                for i in range(group, min(group + 50, len(sids)))
            )
        )
        writers.extend(opened)
    return clients, writers


async def _stream(
    target: str,
    sids: Sequence[str],
    events: list[NewEvent],
    window: int,
    max_seconds: float,
    start_at: float | None,
    batch: int = 1,
    per_channel: int = 64,
) -> _StreamRun:
    clients, writers = await _open_writers(target, sids, window, per_channel)
    latencies: list[float] = []
    acked = 0

    async def one(writer: Any, deadline: float) -> None:
        nonlocal acked
        futures = []

        def done(future: asyncio.Future[Any], sent_at: float, size: int) -> None:
            nonlocal acked
            if not future.cancelled() and future.exception() is None:
                latencies.append(time.monotonic() - sent_at)
                acked += size

        for first in range(0, len(events), batch):
            chunk = events[first : first + batch]
            sent_at = time.monotonic()
            future = await writer.append(chunk)  # sent (waiting only for a window slot); resolves when durable
            future.add_done_callback(lambda f, t=sent_at, n=len(chunk): done(f, t, n))
            futures.append(future)
            if sent_at > deadline:
                break
        for future in futures:
            await future

    if start_at is not None:  # a synchronised start across client processes
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    cpu = time.process_time()
    start = time.monotonic()
    stalled = False
    try:
        # Bounded: a server that stops acknowledging must not hang the bench.
        await asyncio.wait_for(
            asyncio.gather(*(one(w, start + max_seconds) for w in writers)), timeout=max_seconds + STALL_SECONDS
        )
    except TimeoutError:
        stalled = True
    end = time.monotonic()
    cpu = time.process_time() - cpu
    for writer in writers:
        if stalled:
            writer.cancel()
        else:
            await writer.close()
    for client in clients:
        await client.close()
    return _StreamRun(acked, start, end, cpu, latencies, stalled)


def _portable(events: Sequence[NewEvent]) -> list[dict[str, Any]]:
    """Events as their JSON envelopes, to hand to a client process: the compiled build's events
    do not pickle (mypyc's frozen dataclasses refuse the unpickler's setattr)."""
    return [event.to_json() for event in events]


def _from_portable(envelopes: list[dict[str, Any]]) -> list[NewEvent]:
    return [NewEvent.from_json(envelope) for envelope in envelopes]


def _client_events(envelopes: list[dict[str, Any]]) -> list[NewEvent]:
    """A client process's events, decoded, then moved out of the collector's sight (`gc.freeze`)
    with everything else the process holds by then: they live for the whole run, and a full
    collection walking them paused the fixed-rate client once a run, for 30-55 ms with 16,000
    events, at the same event on SQLite and PostgreSQL: the acknowledgements it was about to
    read counted the pause, and it was the figure's slowest (round 42)."""
    events = _from_portable(envelopes)
    gc.freeze()
    return events


def _stream_worker(
    target: str,
    sids: list[str],
    envelopes: list[dict[str, Any]],
    window: int,
    max_seconds: float,
    start_at: float,
    batch: int,
    per_channel: int,
) -> _StreamRun:
    """Entry point of a client worker process."""
    events = _client_events(envelopes)
    return asyncio.run(_stream(target, sids, events, window, max_seconds, start_at, batch, per_channel))


def streaming(
    server: Server,
    sessions: int,
    events: list[NewEvent],
    *,
    window: int,
    max_seconds: float,
    client_procs: int = 1,
    batch: int = 1,
    per_channel: int = 64,
    history: Sequence[NewEvent] = (),
) -> dict[str, Any]:
    """`sessions` writers, each streaming `events` `batch` per batch (1 unless stated) with up
    to `window` batches in flight, `per_channel` writers to a client channel (each its own connection).

    With `history`, each session already holds those events when the timed run starts
    (written untimed, `_write_history`), and `events` continue them.

    A server of several workers (`serve --workers`) gets each connection on one of them (the
    kernel spreads connections over the workers' SO_REUSEPORT sockets), so writers must come
    over several connections for the workers to share them, as separate harness processes do.

    With `client_procs` > 1 the sessions are split over that many client processes (each
    with its own asyncio loop and channels), started together; the server CPU share then also
    counts the writers' opening while the workers start, so it overstates a little.
    """
    sids = [_sid(f"s{sessions}") for _ in range(sessions)]
    _write_history(server.target, sids, history)
    cpu_s = server.cpu_seconds()
    workers = {pid: process_cpu_seconds(pid) for pid in server.worker_pids()}
    if client_procs <= 1:
        run = asyncio.run(_stream(server.target, sids, events, window, max_seconds, None, batch, per_channel))
        runs = [run]
    else:
        ctx = multiprocessing.get_context("spawn")
        start_at = time.monotonic() + 3.0 + 0.05 * sessions  # time to spawn, import and open writers
        parts = [sids[i::client_procs] for i in range(client_procs)]
        with ctx.Pool(client_procs) as pool:
            pending = [
                pool.apply_async(
                    _stream_worker,
                    (server.target, part, _portable(events), window, max_seconds, start_at, batch, per_channel),
                )
                for part in parts
                if part
            ]
            runs = [p.get(timeout=max_seconds + 120) for p in pending]
    server_cpu = server.cpu_seconds() - cpu_s
    start = min(r.start for r in runs)
    end = max(r.end for r in runs)
    # Each worker's share: the kernel hands each connection to one worker by a hash, so a few
    # connections can land unevenly, and the busiest worker then sets the pace.
    worker_cpu = sorted((_cpu_since(pid, used) for pid, used in workers.items()), reverse=True)
    acked = sum(r.acked for r in runs)
    latencies = sorted(x for r in runs for x in r.latencies)
    # Server CPU above includes opening and closing the writers; scale it to the timed part.
    return _throughput(
        acked,
        end - start,
        server_cpu,
        sum(r.client_cpu for r in runs),
        sessions=sessions,
        events_per_batch=batch,
        window=window,
        client_procs=client_procs,
        writers_per_channel=per_channel,
        **({"worker_cpu_pct": [round(100 * cpu / (end - start), 1) for cpu in worker_cpu]} if worker_cpu else {}),
        ack_p50_ms=round(1000 * percentile(latencies, 50), 2),
        ack_p99_ms=round(1000 * percentile(latencies, 99), 2),
        **(
            {"stalled": f"acknowledgements stopped; gave up {STALL_SECONDS:.0f}s past the time budget"}
            if any(r.stalled for r in runs)
            else {}
        ),
    )


def _write_history(target: str, sids: Sequence[str], history: Sequence[NewEvent]) -> None:
    """Create each session with `history` in it (100 events a unary append, the lease given
    back), so a writer opened afterwards continues a session of that length."""
    if not history:
        return
    with SessionLogClient(target) as client:
        for sid in sids:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            for start in range(0, len(history), 100):
                client.append(sid, lease, history[start : start + 100])
            client.release_lease(lease)


def _cpu_since(pid: int, used: float) -> float:
    """CPU seconds `pid` used since it had used `used` (0 if it has gone meanwhile)."""
    try:
        return process_cpu_seconds(pid) - used
    except OSError:
        return 0.0


# --- latency at a fixed offered rate ------------------------------------------------------


async def _fixed_rate(
    target: str, sessions: int, events: list[NewEvent], rate: float, seconds: float, per_channel: int
) -> dict[str, Any]:
    sids = [_sid("rate") for _ in range(sessions)]
    clients, writers = await _open_writers(target, sids, 1024, per_channel)
    total = min(int(rate * seconds), len(events) * sessions)
    from_send: list[float] = []
    from_schedule: list[float] = []
    futures = []
    start = time.monotonic() + LEAD_S
    late = 0
    async for i, scheduled, behind in open_loop(total, rate, start):
        if behind > 0.001:
            late += 1
        sent_at = time.monotonic()
        future = await writers[i % sessions].append([events[i // sessions]])

        def done(_f: object, sent: float = sent_at, sched: float = scheduled) -> None:
            now = time.monotonic()
            from_send.append(now - sent)
            from_schedule.append(now - sched)

        future.add_done_callback(done)
        futures.append(future)
    # Bounded wait: an overloaded server drains its backlog, a dead one fails the futures.
    _, unacked = await asyncio.wait(futures, timeout=max(60.0, 4 * seconds))
    wall = time.monotonic() - start
    for future in unacked:
        future.cancel()
    for writer in writers:
        await writer.close()
    for client in clients:
        await client.close()
    from_send.sort()
    from_schedule.sort()
    return {
        "offered_per_s": rate,
        "sessions": sessions,
        "events": total,
        "achieved_per_s": round(total / wall, 1),
        "p50_ms": round(1000 * percentile(from_send, 50), 3),
        "p99_ms": round(1000 * percentile(from_send, 99), 3),
        "p999_ms": round(1000 * percentile(from_send, 99.9), 3),
        "max_ms": round(1000 * from_send[-1], 3) if from_send else None,
        "mean_ms": round(1000 * statistics.fmean(from_send), 3) if from_send else None,
        "p99_from_schedule_ms": round(1000 * percentile(from_schedule, 99), 3),
        "sends_late_over_1ms": late,
        "unacked_at_timeout": len(unacked),
    }


def _fixed_rate_main(
    target: str, sessions: int, envelopes: list[dict[str, Any]], rate: float, seconds: float, per_channel: int
) -> dict[str, Any]:
    """Entry point of the fixed-rate client's process."""
    return asyncio.run(_fixed_rate(target, sessions, _client_events(envelopes), rate, seconds, per_channel))


def fixed_rate(
    server: Server, events: list[NewEvent], *, rate: float, seconds: float, sessions: int, per_channel: int = 64
) -> dict[str, Any]:
    """Open-loop load: event i is due at start + i/rate, spread round-robin over `sessions`,
    `per_channel` writers to a client connection (1 spreads them over a server's workers).

    Latency is from the moment the event is handed to the writer to its durable ack
    (`p99_from_schedule_ms` measures from the due time instead, which also counts any delay
    of the sender: the coordinated-omission-free view). It starts once what earlier figures
    wrote is on disk (`settle_writes`), as the raw driver's (`peers.commit_latency`) does.

    The client runs in a process of its own: in the bench's process, whose heap holds every
    section's events, garbage collections paused the client, and the acknowledgements it was
    about to read counted the pause as latency. With a 3-million-object heap beside the client,
    SQLite, alternating runs: p99 45-85 ms in the bench's process, 8-25 ms from a process of
    its own (a full run in process had measured 34 ms, with 275 sends more than 1 ms late).
    """
    settle_writes(server.db)
    pids = server.pids()
    cpu_s, waited_s, began = server.cpu_seconds(pids), server.waiting_seconds(pids), time.monotonic()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply(_fixed_rate_main, (server.target, sessions, _portable(events), rate, seconds, per_channel))
    # Both per second of the client's whole run (its start and set-up included), the window
    # both counters cover. The wait is how long the server's threads had no core while
    # runnable: the cores taken by the client, by other work and by the server's own threads,
    # which wake one another along each acknowledgement.
    elapsed = max(time.monotonic() - began, 1e-9)
    pids = server.pids()
    result["server_cpu_pct"] = round(100 * (server.cpu_seconds(pids) - cpu_s) / elapsed, 1)
    result["server_waited_ms_per_s"] = round(1000 * (server.waiting_seconds(pids) - waited_s) / elapsed, 1)
    return result


# --- model history --------------------------------------------------------------------------


def model_history_available() -> bool:
    """The projection RPC exists in this checkout's client."""
    return callable(getattr(SessionLogClient, "model_history", None))


def seed_session(target: str, sid: str, n: int, seed: int, batch: int = 500) -> int:
    """Write an `n`-event session (whole turns) in large batches; not timed. Returns its length."""
    events = as_new_events(session_events(n, seed, whole_turns=True), sid)
    with SessionLogClient(target) as client, client.writer(sid, create_if_missing=True) as writer:
        futures = [writer.append(events[i : i + batch]) for i in range(0, len(events), batch)]
        for future in futures:
            future.result(timeout=600)
    return len(events)


def history_figures(db: str, sessions: dict[str, tuple[str, int]], fresh_process_each: bool) -> dict[str, Any]:
    """Model history of stored sessions ({key: (session id, events)}), each on a fresh server
    process (or, with `fresh_process_each` False - the quick mode - one fresh process for all,
    so only the first is process-cold; the others are still session-cold)."""
    out: dict[str, Any] = {}
    keys = list(sessions)
    groups = [[key] for key in keys] if fresh_process_each else [keys]
    for group in groups:
        with Server(db) as server:
            for key in group:
                sid, events = sessions[key]
                out[key] = _history_figure(server, sid, events)
                out[key]["cold_means"] = "fresh server process" if fresh_process_each else "fresh session load"
    return out


AFTER_APPEND_ROUNDS = 5
"""Appends the history is read after, each its own writer: the figure is their median (one
read, on a machine busy with the bench's previous section, once measured 5.5 ms against a
median of 2.3 ms in four quiet runs)."""


def _history_figure(server: Server, sid: str, events: int, repeats: int = 3) -> dict[str, Any]:
    """Model history: cold (first full read), after one more append (the median of
    `AFTER_APPEND_ROUNDS`, each after its own append), and warm; plus the server's peak RSS
    after the cold load.

    When the client has `refresh_history` (a local copy refreshed with only the new messages,
    what a harness does before each model call), "after one more append" is that refresh;
    the full `model_history` read after the append is reported too (`after_append_full_ms`).
    """
    with SessionLogClient(server.target, timeout=600) as client:
        api: Any = client
        incremental = callable(getattr(api, "refresh_history", None))
        copy = api.history_copy(sid) if incremental else None
        start = time.perf_counter()
        messages = api.refresh_history(copy) if incremental else api.model_history(sid)
        cold = time.perf_counter() - start
        n_cold = len(messages)
        memory = server.memory_mb()
        afters: list[float] = []
        for n in range(AFTER_APPEND_ROUNDS):
            with client.writer(sid) as writer:
                writer.append([user_message(f"one more question ({n})")]).result(timeout=60)
            start = time.perf_counter()
            again = api.refresh_history(copy) if incremental else api.model_history(sid)
            afters.append(time.perf_counter() - start)
        after = statistics.median(afters)
        n_after = len(again)
        warm: list[float] = []
        for _ in range(repeats):
            start = time.perf_counter()
            api.refresh_history(copy) if incremental else api.model_history(sid)
            warm.append(time.perf_counter() - start)
        start = time.perf_counter()
        full = api.model_history(sid)
        after_full = time.perf_counter() - start
        rpc = _raw_history_ms(client, sid)
    return {
        "events": events,
        "messages": n_cold,
        "messages_after_append": n_after,
        "full_read_matches_copy": len(full) == n_after,
        "after_append_is": "incremental refresh_history" if incremental else "full model_history",
        "cold_ms": round(1000 * cold, 2),
        "after_append_ms": round(1000 * after, 2),
        "after_append_max_ms": round(1000 * max(afters), 2),
        "warm_ms": round(1000 * min(warm), 2),
        "after_append_full_ms": round(1000 * after_full, 2),
        "raw_rpc_full_ms": rpc,
        "server_rss_after_cold_mb": round(memory.get("VmHWM", 0.0), 1),
    }


def _raw_history_ms(client: SessionLogClient, sid: str) -> float | None:
    """The GetModelHistory call alone (bytes on the wire, no JSON parsing in the client)."""
    stub_call = getattr(client.stub, "GetModelHistory", None)
    if stub_call is None:
        return None
    from sessionlog.v1 import session_service_pb2 as pb

    request = pb.GetModelHistoryRequest(scope=pb.ProjectionScope(session_id=sid))
    start = time.perf_counter()
    stub_call(request, timeout=600)
    return round(1000 * (time.perf_counter() - start), 2)


# --- RSS with many open writer streams ---------------------------------------------------------


async def _hold_streams(target: str, count: int, hold_seconds: float) -> dict[str, Any]:
    sids = [_sid("rss") for _ in range(count)]
    start = time.monotonic()
    clients, writers = await _open_writers(target, sids, 4, per_channel=100)
    opened_s = time.monotonic() - start
    hello = as_new_events([user_message("hello")], "hello")
    await asyncio.gather(*(w.append(hello) for w in writers))
    await asyncio.sleep(hold_seconds)
    return {"writers": writers, "clients": clients, "open_seconds": round(opened_s, 2)}


async def _close_streams(state: dict[str, Any]) -> None:
    for writer in state["writers"]:
        await writer.close()
    for client in state["clients"]:
        await client.close()


def rss_with_streams(db: str, count: int, hold_seconds: float = 2.0) -> dict[str, Any]:
    """Peak RSS (VmHWM) of a fresh server process while `count` writer streams are open, each
    with a session of its own that received one event."""
    with Server(db) as server:
        baseline = server.memory_mb()

        async def scenario() -> dict[str, Any]:
            state = await _hold_streams(server.target, count, hold_seconds)
            during = server.memory_mb()
            await _close_streams(state)
            return {"open_seconds": state["open_seconds"], "during": during}

        outcome = asyncio.run(scenario())
        after = server.memory_mb()
    return {
        "streams": count,
        "baseline_rss_mb": round(baseline.get("VmRSS", 0.0), 1),
        "rss_with_streams_mb": round(outcome["during"].get("VmRSS", 0.0), 1),
        "peak_rss_mb": round(max(outcome["during"].get("VmHWM", 0.0), after.get("VmHWM", 0.0)), 1),
        "open_seconds": outcome["open_seconds"],
    }


def server_cpu_of(pid: int) -> float:
    return process_cpu_seconds(pid)
