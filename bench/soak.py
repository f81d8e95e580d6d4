"""Soak test: many streaming writers and subscribers while the service is SIGKILLed and restarted.

    python -m bench.soak --minutes 10 --db sqlite
    python -m bench.soak --seconds 20 --restart-every 7 --db postgresql

What runs (all on loopback, bounded in time and in counts):

- one `sessionlog serve` child process on a fresh database (a SQLite file in a temporary
  directory, or a fresh PostgreSQL database that is dropped afterwards);
- `--sessions` (64) streaming writers on one asyncio client. Each writes complete agent turns
  (turn/start + user message, step/start + assistant message with usage, notes, step/end +
  turn/end), one batch in flight at a time, every event with a deterministic eventId, into one
  session (or a fresh session every `--turns-per-session` turns, so the number of sessions grows
  instead of their length: the service's memory is then bounded by its session cache). When the
  stream fails (the service was killed) the writer reconnects with the same writer id and
  re-sends the unacknowledged batch with the same eventIds: the service answers the original
  seqs if it had committed it, so a retry can never duplicate;
- `--subscribers` (4) subscriptions that follow some sessions live and check that they see
  every event exactly once and in seq order, resubscribing from the next expected seq after
  each restart;
- every `--restart-every` seconds (60) the service is killed with SIGKILL (nothing flushed
  beyond what was committed) and started again on the same port;
- every `--rss-every` seconds (2) the service's VmRSS is read from /proc/PID/status.

At the end the writers finish their open turn, the service is killed and restarted once more,
and the log is verified against what the writers were told: every acknowledged event must be
stored exactly once, at its acknowledged seq, with contiguous seqs. The summary reports events
written (acknowledged), events verified, losses, duplicates, and RSS min/max per restart epoch
with a growth check (across restarts always; over time only in an epoch long enough to be past
its warm-up, which a soak with restarts every minute does not have: `--restart-every 0` runs one
epoch for that). The exit status is 1 on any loss, duplicate, misplaced event, subscriber gap
or duplicate, or writer error; 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import grpc

from bench.lifecycle_data import lean_turn
from bench.procs import Server, create_pg_database, drop_pg_database, process_memory_mb, server_build
from bench.report import BACKENDS
from sessionlog.aio import AsyncSessionLogClient, AsyncWriter
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, OwnershipLost, SessionLogError, Unavailable
from sessionlog.requests import CaughtUp

APPEND_TIMEOUT_S = 30.0
"""Longest wait for one acknowledgement before the writer treats the stream as dead."""
GRACE_S = 120.0
"""How long, after the run, writers may take to finish their turn and subscribers to catch up."""


# --- configuration and results ------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What to run (see `parse_args`)."""

    seconds: float
    db: str
    sessions: int = 64
    subscribers: int = 4
    restart_every: float = 60.0
    rss_every: float = 2.0
    pace: float = 0.2
    payload_bytes: int = 256
    lease_ttl_ms: int = 30_000
    turns_per_session: int = 0
    seed: int = 1
    workers: int = 1
    keep: bool = False
    json_path: str | None = None


@dataclass
class WriterStats:
    """One writer's account: what it was told is durable, and how it got there."""

    name: str
    sessions: list[str] = field(default_factory=list)
    """The sessions it wrote, in order (one, unless `--turns-per-session` rotates them)."""
    acked: dict[int, list[int]] = field(default_factory=dict)
    """batch number -> the seqs the service acknowledged for its events."""
    batches: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    """batch number -> the session it went to and the eventIds it carried."""
    retries: int = 0
    reconnects: int = 0
    ownership_lost: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class SubscriberStats:
    """One subscription's account: what it saw, in which order."""

    sid: str
    expected: int = 0
    """The next seq the subscriber expects."""
    event_ids: list[str | None] = field(default_factory=list)
    gaps: int = 0
    duplicates: int = 0
    resubscribes: int = 0
    """Resubscriptions the client made by itself after a cut (its `on_resubscribe`)."""
    refollows: int = 0
    """Times the client gave up (Unavailable: the service down past its retries) and the soak
    subscribed again."""
    errors: list[str] = field(default_factory=list)

    def resubscribed(self, seq: int, cause: SessionLogError) -> None:
        """The client's `on_resubscribe`."""
        self.resubscribes += 1


@dataclass
class RssSample:
    t: float
    epoch: int
    kb: int


@dataclass
class Outage:
    epoch: int
    downtime_ms: float


# --- the service process --------------------------------------------------------------------


def soak_service(db: str, workdir: Path, lease_ttl_ms: int, workers: int = 1) -> Server:
    """`sessionlog serve` on a loopback port that stays the same across kills and restarts."""
    env = {
        "SESSIONLOG_LEASE_TTL_MS": str(lease_ttl_ms),
        "SESSIONLOG_METRICS_LISTEN": "",
        "SESSIONLOG_WORKERS": str(workers),
    }
    return Server(db, env=env, log_path=workdir / "service.log")


def rss_kb(server: Server) -> int | None:
    """VmRSS of the running service (its worker processes included), or None between a kill
    and a start."""
    if server.proc is None or server.proc.poll() is not None:
        return None
    try:
        return round(sum(process_memory_mb(pid)["VmRSS"] for pid in server.pids()) * 1e6 / 1024)
    except (OSError, KeyError, ValueError):
        return None


# --- databases ------------------------------------------------------------------------------


def create_database(kind: str, workdir: Path) -> tuple[str, str | None]:
    """A fresh database URL, and the PostgreSQL database name to drop afterwards (if any)."""
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'soak.db'}", None
    name = f"sessionlog_bench_soak_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    return create_pg_database(name), name


# --- the workload ---------------------------------------------------------------------------


def turn_batches(turn: int, filler: str) -> list[list[dict[str, Any]]]:
    """The four batches of one complete agent turn: the lean `simple` turn of
    bench/lifecycle_data.py (turn/start + user message, step/start + assistant message with
    usage, then step/end + turn/end) with three ignorable notes before its end, so every
    structure rule is exercised."""
    events = [event.to_json() for event in lean_turn("simple", turn)]
    notes = [{"type": "soak/note", "ignorable": True, "data": {"turn": turn, "i": i, "text": filler}} for i in range(3)]
    return [events[0:2], events[2:4], notes, events[4:6]]


class Soak:
    """Runs the workload against one service and verifies the log afterwards."""

    def __init__(self, config: Config, service: Server) -> None:
        self.config = config
        self.service = service
        self.run_id = uuid.uuid4().hex[:6]
        self.writers = [WriterStats(f"soak-{self.run_id}-{i:03d}") for i in range(config.sessions)]
        followed = self.writers[: max(0, min(config.subscribers, config.sessions))]
        self.subscribers = [SubscriberStats(f"{w.name}-0") for w in followed]  # each writer's first session
        self.rss: list[RssSample] = []
        self.outages: list[Outage] = []
        self.epoch = 0
        self.worker_kills = 0
        self.stop_writing = asyncio.Event()
        self.started = 0.0
        self.write_ended = 0.0
        self.filler = "x" * config.payload_bytes

    # --- tasks ----------------------------------------------------------------------------

    async def run(self) -> None:
        self.started = time.monotonic()
        async with AsyncSessionLogClient(self.service.target, timeout=APPEND_TIMEOUT_S) as client:
            sampler = asyncio.ensure_future(self._sample_rss())
            restarter = asyncio.ensure_future(self._restart_loop())
            subscribers = [asyncio.ensure_future(self._subscribe(client, s)) for s in self.subscribers]
            writers = [asyncio.ensure_future(self._write(client, w, i)) for i, w in enumerate(self.writers)]
            await asyncio.sleep(self.config.seconds)
            self.stop_writing.set()
            restarter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await restarter
            await asyncio.wait(writers, timeout=GRACE_S)
            for task in writers:
                task.cancel()
            self.write_ended = time.monotonic()
            await self._await_subscribers(client, subscribers)
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler

    async def _sample_rss(self) -> None:
        while True:
            kb = rss_kb(self.service)
            if kb is not None:
                self.rss.append(RssSample(time.monotonic() - self.started, self.epoch, kb))
            await asyncio.sleep(self.config.rss_every)

    async def _restart_loop(self) -> None:
        if self.config.restart_every <= 0:
            return
        loop = asyncio.get_running_loop()
        for round_ in range(1_000_000):  # bounded; cancelled when the run ends
            await asyncio.sleep(self.config.restart_every)
            began = time.monotonic()
            if self.config.workers > 1 and round_ % 2 == 0:
                # Every other round kills one worker only: the service stays up, the parent
                # starts the worker again, its clients reconnect to either worker.
                self.service.kill_worker()
                self.worker_kills += 1
                continue
            self.service.kill()
            self.epoch += 1
            await loop.run_in_executor(None, self.service.start)
            self.outages.append(Outage(self.epoch, (time.monotonic() - began) * 1000))

    async def _write(self, client: AsyncSessionLogClient, stats: WriterStats, index: int) -> None:
        """Write complete turns until told to stop, then finish the open turn and close."""
        rnd = random.Random(self.config.seed * 1_000_003 + index)
        await asyncio.sleep(rnd.random() * min(1.0, self.config.pace * 5))  # spread the starts
        writer: AsyncWriter | None = None
        batch_no = 0
        turn = 0
        deadline = self.started + self.config.seconds + GRACE_S
        stats.sessions.append(f"{stats.name}-0")
        try:
            while time.monotonic() < deadline:
                if self.config.turns_per_session and turn == self.config.turns_per_session:
                    await self._close(writer)  # this session is done: go on in a fresh one
                    writer, turn = None, 0
                    stats.sessions.append(f"{stats.name}-{len(stats.sessions)}")
                sid = stats.sessions[-1]
                turn += 1
                for batch in turn_batches(turn, self.filler):
                    ids = [f"{sid}-{batch_no}-{k}" for k in range(len(batch))]
                    events = [dict(e, eventId=eid) for e, eid in zip(batch, ids, strict=True)]
                    stats.batches[batch_no] = (sid, ids)
                    writer, seqs = await self._append_until_acked(client, stats, sid, writer, events, deadline)
                    stats.acked[batch_no] = seqs
                    batch_no += 1
                    await asyncio.sleep(self.config.pace * (0.5 + rnd.random()))
                if self.stop_writing.is_set():
                    break
        except SessionLogError as exc:
            stats.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await self._close(writer)

    @staticmethod
    async def _close(writer: AsyncWriter | None) -> None:
        """Flush and close a writer (its lease is given back); cancel it if that fails."""
        if writer is None:
            return
        try:
            await asyncio.wait_for(writer.close(), timeout=APPEND_TIMEOUT_S)
        except (SessionLogError, TimeoutError, grpc.RpcError):
            await writer.__aexit__(RuntimeError, None, None)

    async def _append_until_acked(
        self,
        client: AsyncSessionLogClient,
        stats: WriterStats,
        sid: str,
        writer: AsyncWriter | None,
        events: list[dict[str, Any]],
        deadline: float,
    ) -> tuple[AsyncWriter, list[int]]:
        """Append one batch, reconnecting and re-sending (same eventIds) until it is acknowledged."""
        delay = 0.05
        attempt = 0
        while time.monotonic() < deadline:
            attempt += 1
            try:
                if writer is None:
                    writer = await client.writer(sid, writer_id=f"w-{sid}", create_if_missing=True)
                    if attempt > 1:
                        stats.reconnects += 1
                if attempt > 1:
                    stats.retries += 1
                before = writer.reconnects
                result = await asyncio.wait_for(_acknowledged(writer, events), timeout=APPEND_TIMEOUT_S)
                stats.reconnects += writer.reconnects - before  # the writer re-sent after a kill
                return writer, list(result.seqs)
            except (Unavailable, TimeoutError, OwnershipLost) as exc:
                if isinstance(exc, OwnershipLost):
                    # Never expected: the same writer id re-takes its own lease after a restart.
                    stats.ownership_lost += 1
                if writer is not None:
                    await writer.__aexit__(RuntimeError, None, None)
                    writer = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise Unavailable("SOAK_DEADLINE", f"batch {events[0]['eventId']} was never acknowledged")

    async def _subscribe(self, client: AsyncSessionLogClient, stats: SubscriberStats) -> None:
        """Follow one session; after every failure resubscribe from the next expected seq."""
        following = False
        for _ in range(100_000):  # bounded; cancelled at the end
            try:
                async for item in client.subscribe(
                    stats.sid, from_seq=stats.expected, on_resubscribe=stats.resubscribed
                ):
                    following = True
                    if isinstance(item, CaughtUp):
                        continue
                    if item.seq < stats.expected:
                        stats.duplicates += 1
                        continue
                    if item.seq > stats.expected:
                        stats.gaps += 1
                        stats.event_ids.extend([None] * (item.seq - stats.expected))
                    stats.event_ids.append(item.event_id)
                    stats.expected = item.seq + 1
            except NotFound:
                pass  # the writer has not created the session yet
            except Unavailable:
                if following:  # the service was down past the client's retries: follow it again
                    stats.refollows += 1
                following = False
            except SessionLogError as exc:
                stats.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.1)

    async def _await_subscribers(self, client: AsyncSessionLogClient, tasks: Sequence[asyncio.Future[None]]) -> None:
        """Wait (bounded) until every subscriber has seen its session's whole log, then stop them."""
        deadline = time.monotonic() + GRACE_S
        for stats in self.subscribers:
            while time.monotonic() < deadline:
                try:
                    target = (await client.get_session(stats.sid)).next_seq
                except SessionLogError:
                    target = -1
                if stats.expected >= target >= 0:
                    break
                await asyncio.sleep(0.2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# --- verification and report ----------------------------------------------------------------


@dataclass
class Verdict:
    """What the log says about the writers' and subscribers' accounts."""

    events_written_acknowledged: int = 0
    events_verified: int = 0
    events_stored: int = 0
    losses: int = 0
    duplicates: int = 0
    misplaced: int = 0
    unacknowledged_stored: int = 0
    sessions_with_seq_gaps: int = 0
    open_turns_at_end: int = 0
    interrupted_turns_repaired: int = 0
    subscriber_events: int = 0
    subscriber_gaps: int = 0
    subscriber_duplicates: int = 0
    subscriber_mismatches: int = 0
    writer_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.losses
            or self.duplicates
            or self.misplaced
            or self.sessions_with_seq_gaps
            or self.subscriber_gaps
            or self.subscriber_duplicates
            or self.subscriber_mismatches
            or self.writer_errors
        )


def verify(soak: Soak, target: str) -> Verdict:
    """Read every session back and hold it against what writers and subscribers were told."""
    verdict = Verdict()
    with SessionLogClient(target, timeout=120) as client:
        logs = {}
        acked_by_sid: dict[str, list[tuple[list[str], list[int]]]] = {}
        for w in soak.writers:
            for batch_no, seqs in w.acked.items():
                batch_sid, batch_ids = w.batches[batch_no]
                acked_by_sid.setdefault(batch_sid, []).append((batch_ids, seqs))
        for sid in [sid for w in soak.writers for sid in w.sessions]:
            try:
                events = list(client.read_events(sid))
                open_turn = client.get_session(sid).open_turn
            except SessionLogError as exc:
                if sid in acked_by_sid:
                    verdict.writer_errors.append(f"{sid}: cannot be read back: {exc}")
                events, open_turn = [], False
            logs[sid] = events
            verdict.events_stored += len(events)
            verdict.open_turns_at_end += int(open_turn)
            if [e.seq for e in events] != list(range(len(events))):
                verdict.sessions_with_seq_gaps += 1
            by_id: dict[str, int] = {}
            for event in events:
                if event.type == "turn/end" and event.data.get("reason", {}).get("kind") == "interrupted":
                    verdict.interrupted_turns_repaired += 1
                if event.event_id is None:
                    continue
                if event.event_id in by_id:
                    verdict.duplicates += 1
                by_id[event.event_id] = event.seq
            acked_ids = set()
            for batch_ids, seqs in acked_by_sid.get(sid, []):
                for event_id, seq in zip(batch_ids, seqs, strict=True):
                    acked_ids.add(event_id)
                    verdict.events_written_acknowledged += 1
                    stored = by_id.get(event_id)
                    if stored is None:
                        verdict.losses += 1
                    elif stored != seq:
                        verdict.misplaced += 1
                    else:
                        verdict.events_verified += 1
            verdict.unacknowledged_stored += sum(
                1 for eid in by_id if eid.startswith(f"{sid}-") and eid not in acked_ids
            )
        for stats in soak.writers:
            verdict.writer_errors.extend(f"{stats.name}: {e}" for e in stats.errors)
        for sub in soak.subscribers:
            verdict.subscriber_events += len(sub.event_ids)
            verdict.subscriber_gaps += sub.gaps
            verdict.subscriber_duplicates += sub.duplicates
            stored_ids = [e.event_id for e in logs.get(sub.sid, [])]
            if sub.event_ids != stored_ids:
                verdict.subscriber_mismatches += 1
            verdict.writer_errors.extend(f"subscriber {sub.sid}: {e}" for e in sub.errors)
    return verdict


WARM_UP_S = 120.0
"""How long a fresh service's RSS climbs as its caches fill: an 8-minute soak without kills
levelled off after about 140 s (bench/PROFILE.md, round 15). Growth over time is judged after it."""
MIN_SLOPE_SPAN_S = 60.0
"""The least stretch of samples, past the warm-up, that a growth slope is fitted over."""


def rss_report(samples: list[RssSample]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per epoch: min/max/last RSS (MB). Growth: flagged when RSS keeps climbing.

    Two checks, both on epochs with at least 5 samples: the largest epoch maximum after the first
    epoch against the first epoch's maximum (restarts must bring RSS back to the same level: a
    ratio over 1.5 and +64 MB means state that survives restarts, e.g. a cache sized by the
    database), and within the longest epoch the slope of a least-squares line over its second
    half, past its warm-up (`WARM_UP_S`; more than 16 MB per minute means memory that grows with
    time, not with load). An epoch too short to show a slope past its warm-up is not judged, and
    `slope_not_judged` says why: every restart soak's epochs were, and their flag only ever
    showed the warm-up (bench/PROFILE.md, rounds 15-21).
    """
    epochs: dict[int, list[RssSample]] = {}
    for sample in samples:
        epochs.setdefault(sample.epoch, []).append(sample)
    rows = []
    for epoch, items in sorted(epochs.items()):
        kbs = [s.kb for s in items]
        rows.append(
            {
                "epoch": epoch,
                "samples": len(items),
                "from_s": round(items[0].t, 1),
                "to_s": round(items[-1].t, 1),
                "min_mb": round(min(kbs) / 1024, 1),
                "max_mb": round(max(kbs) / 1024, 1),
                "last_mb": round(kbs[-1] / 1024, 1),
            }
        )
    growth: dict[str, Any] = {"flagged": False, "reasons": []}
    full = [r for r in rows if r["samples"] >= 5]
    if len(full) >= 2:
        first, later = full[0]["max_mb"], max(r["max_mb"] for r in full[1:])
        growth["epoch_max_ratio"] = round(later / first, 3) if first else None
        if first and later / first > 1.5 and later - first > 64:
            growth["flagged"] = True
            growth["reasons"].append(f"epoch maximum grew from {first} MB to {later} MB across restarts")
    if full:
        longest = max(epochs.values(), key=len)
        began = longest[0].t
        tail = [s for s in longest[len(longest) // 2 :] if s.t - began >= WARM_UP_S]
        if len(tail) >= 5 and tail[-1].t - tail[0].t >= MIN_SLOPE_SPAN_S:
            ts = [s.t for s in tail]
            mbs = [s.kb / 1024 for s in tail]
            slope = statistics.linear_regression(ts, mbs).slope * 60
            growth["slope_mb_per_min_longest_epoch"] = round(slope, 2)
            if slope > 16:
                growth["flagged"] = True
                growth["reasons"].append(f"RSS grew {slope:.1f} MB/min in the second half of the longest epoch")
        else:
            growth["slope_not_judged"] = (
                f"the longest epoch lasted {longest[-1].t - began:.0f} s; growth over time is judged past "
                f"an epoch's first {WARM_UP_S:.0f} s, over at least {MIN_SLOPE_SPAN_S:.0f} s "
                "(--restart-every 0: one epoch)"
            )
    return rows, growth


def rss_timeline(samples: list[RssSample], buckets: int = 20) -> list[tuple[float, float]]:
    """(seconds into the run, largest RSS in MB) for about `buckets` equal slices of the run."""
    if not samples:
        return []
    width = max(samples[-1].t / buckets, 1e-9)
    peaks: dict[int, RssSample] = {}
    for sample in samples:
        key = min(int(sample.t / width), buckets - 1)
        if key not in peaks or sample.kb > peaks[key].kb:
            peaks[key] = sample
    return [(round(peaks[k].t, 1), round(peaks[k].kb / 1024, 1)) for k in sorted(peaks)]


def summary(config: Config, soak: Soak, verdict: Verdict) -> dict[str, Any]:
    writers = soak.writers
    written_s = max(soak.write_ended - soak.started, 1e-9)
    epochs, growth = rss_report(soak.rss)
    downtimes = [o.downtime_ms for o in soak.outages]
    counts = {key: value for key, value in asdict(verdict).items() if key != "writer_errors"}
    return {
        "config": asdict(config),
        "server_build": server_build(),
        "duration_s": round(written_s, 1),
        **counts,
        "batches_acknowledged": sum(len(w.acked) for w in writers),
        "sessions_written": sum(len(w.sessions) for w in writers),
        "events_per_second": round(verdict.events_written_acknowledged / written_s, 1),
        "retries": sum(w.retries for w in writers),
        "reconnects": sum(w.reconnects for w in writers),
        "ownership_lost": sum(w.ownership_lost for w in writers),
        "restarts": len(soak.outages),
        "worker_kills": soak.worker_kills,
        "downtime_ms_mean": round(statistics.fmean(downtimes), 1) if downtimes else None,
        "downtime_ms_max": round(max(downtimes), 1) if downtimes else None,
        "subscribers": len(soak.subscribers),
        "resubscribes": sum(s.resubscribes for s in soak.subscribers),
        "refollows": sum(s.refollows for s in soak.subscribers),
        "rss_epochs": epochs,
        "rss_timeline_mb": rss_timeline(soak.rss),
        "rss_growth": growth,
        "errors": verdict.writer_errors[:20],
        "result": "PASS" if verdict.ok else "FAIL",
    }


def print_summary(report: dict[str, Any]) -> None:
    c = report["config"]
    print(
        f"sessionlog soak: {c['db']}, {c['workers']} worker(s), {report['duration_s']} s of writing, "
        f"{c['sessions']} streaming sessions, {report['subscribers']} subscribers, kill -9 every "
        f"{c['restart_every']} s ({report['restarts']} of the service, {report['worker_kills']} of one worker; "
        f"downtime mean {report['downtime_ms_mean']} ms, max {report['downtime_ms_max']} ms)"
    )
    print(f"server build:                  {report['server_build']} (SESSIONLOG_BENCH_SERVER_PYTHON)")
    print(
        f"events written (acknowledged): {report['events_written_acknowledged']} in "
        f"{report['batches_acknowledged']} batches, {report['sessions_written']} sessions "
        f"({report['events_per_second']} events/s)"
    )
    print(f"events verified:               {report['events_verified']} (stored: {report['events_stored']})")
    print(f"losses:                        {report['losses']}")
    print(f"duplicates:                    {report['duplicates']}")
    print(
        f"misplaced: {report['misplaced']}, unacknowledged but stored: {report['unacknowledged_stored']}, "
        f"sessions with seq gaps: {report['sessions_with_seq_gaps']}, "
        f"open turns at end: {report['open_turns_at_end']}, "
        f"interrupted turns repaired: {report['interrupted_turns_repaired']}"
    )
    print(
        f"writers: {report['retries']} batches re-sent after a failure, {report['reconnects']} reconnects, "
        f"{report['ownership_lost']} ownership lost"
    )
    print(
        f"subscribers: {report['subscriber_events']} events seen, gaps {report['subscriber_gaps']}, "
        f"duplicates {report['subscriber_duplicates']}, mismatches with the log {report['subscriber_mismatches']}, "
        f"{report['resubscribes']} resubscribes by the client, {report['refollows']} after it gave up"
    )
    print("service RSS per restart epoch (MB):")
    for row in report["rss_epochs"]:
        print(
            f"  epoch {row['epoch']:>3}  {row['from_s']:>7.1f}-{row['to_s']:<7.1f}s  "
            f"min {row['min_mb']:>7.1f}  max {row['max_mb']:>7.1f}  last {row['last_mb']:>7.1f}  "
            f"({row['samples']} samples)"
        )
    print("service RSS over time (s: MB): " + ", ".join(f"{t:.0f}: {mb:.0f}" for t, mb in report["rss_timeline_mb"]))
    growth = report["rss_growth"]
    details = {k: v for k, v in growth.items() if k not in {"flagged", "reasons", "slope_not_judged"}}
    verdict = "FLAGGED: " + "; ".join(growth["reasons"]) if growth["flagged"] else "no unbounded growth"
    print(f"RSS growth: {verdict} {details}")
    if "slope_not_judged" in growth:
        print(f"RSS growth over time not judged: {growth['slope_not_judged']}")
    for error in report["errors"]:
        print(f"error: {error}")
    print(f"result: {report['result']}")


# --- entry point ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long to write (default 10)")
    length.add_argument("--seconds", type=float, help="how long to write, in seconds (for CI)")
    parser.add_argument("--db", choices=BACKENDS, default="sqlite")
    parser.add_argument("--sessions", type=int, default=64, help="streaming sessions (default 64)")
    parser.add_argument("--subscribers", type=int, default=4, help="subscriptions following sessions (default 4)")
    parser.add_argument("--restart-every", type=float, default=60.0, help="seconds between SIGKILLs (0: never)")
    parser.add_argument("--rss-every", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument("--pace", type=float, default=0.2, help="mean pause between a writer's batches (s)")
    parser.add_argument("--payload-bytes", type=int, default=256, help="text per note event")
    parser.add_argument("--lease-ttl-ms", type=int, default=30_000, help="the service's writer lease")
    parser.add_argument(
        "--turns-per-session", type=int, default=0, help="start a fresh session after this many turns (0: never)"
    )
    parser.add_argument("--workers", type=int, default=1, help="server processes (kills alternate: a worker, all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the database and the service log")
    parser.add_argument("--json", dest="json_path", help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 10)
    if seconds <= 0 or args.sessions < 1:
        parser.error("the run needs a positive length and at least one session")
    options = {f.name: getattr(args, f.name) for f in fields(Config) if f.name != "seconds"}
    return Config(seconds=seconds, **options)


def run(config: Config) -> dict[str, Any]:
    """Run one soak and return its report (also printed)."""
    workdir = Path(tempfile.mkdtemp(prefix="sessionlog-soak-"))
    url, pg_name = create_database(config.db, workdir)
    service = soak_service(url, workdir, config.lease_ttl_ms, config.workers)
    try:
        service.start()
        soak = Soak(config, service)
        asyncio.run(soak.run())
        # A last SIGKILL: everything acknowledged must survive it, too.
        service.kill()
        service.start()
        verdict = verify(soak, service.target)
        report = summary(config, soak, verdict)
    finally:
        service.kill()
        if not config.keep:
            if pg_name is not None:
                drop_pg_database(pg_name)
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept: {url} and {service.log_path}")
    print_summary(report)
    if config.json_path:
        Path(config.json_path).write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    report = run(parse_args(argv))
    return 0 if report["result"] == "PASS" else 1


async def _acknowledged(writer: AsyncWriter, events: list[dict[str, Any]]) -> Any:
    """Send one batch and wait until it is durable (`append` returns once it is sent)."""
    return await (await writer.append(events))


if __name__ == "__main__":
    raise SystemExit(main())
