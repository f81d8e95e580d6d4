"""The append path in-process, without gRPC: CPU per event of what the event loop does, and CPU
per group commit of what the writer thread does. Thread CPU time, not wall time, so the figures
hold on a busy machine (other processes slow a run down but do not add to its CPU time).

`python -m bench.append_path [--events 20000] [--commits 2000]` prints, for the bench workload:
- `plan`: decode the wire messages, check the envelopes and plan each batch on a live fold
  (`transport.request_fields.decode_events`, `service.append.validate_proposals`, `plan_append`),
  one event per batch and 16 per batch;
- `commit`: `EventRecorder.commit_batches` of one one-event batch, and of 16 sessions' batches
  in one group, on SQLite and PostgreSQL (when reachable).

`--instructions` also counts the instructions per event of `plan` with valgrind's callgrind
(a few minutes): CPU time on a shared virtual machine moves by a third from run to run, an
instruction count by a fraction of a percent, so it is the figure to compare a change with.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import pg_available, scratch_database
from bench.workload import as_new_events, session_events
from sessionlog import convert
from sessionlog.core.events import APPEND, Event
from sessionlog.core.fold import SessionFold
from sessionlog.core.limits import Limits
from sessionlog.v1 import event_pb2
from sessionlog_server.service.append import plan_append, validate_proposals
from sessionlog_server.service.live import LiveSession
from sessionlog_server.storage.factory import open_recorder
from sessionlog_server.storage.migrate import upgrade
from sessionlog_server.storage.records import PendingBatch, SessionRecord
from sessionlog_server.transport.request_fields import decode_events


def _cpu_us(work: Callable[[], int]) -> float:
    """Thread CPU µs per unit of `work` (which returns how many units it did)."""
    start = time.thread_time()
    units = work()
    return round(1e6 * (time.thread_time() - start) / max(units, 1), 1)


def _record(sid: str) -> SessionRecord:
    return SessionRecord(sid, "", 0, None, {}, None, None, 0, 0, None, 0, None, False)


def plan_us(events: int, batch: int) -> float:
    """CPU µs per event to decode, check and plan `events` events sent `batch` per batch."""
    return _cpu_us(_plan_work(_wire(events), batch))


def _wire(events: int) -> list[bytes]:
    """The bench workload's first `events` events as the wire messages a writer sends."""
    return [convert.new_event_to_pb(e).SerializeToString() for e in as_new_events(session_events(events), "ev")]


def _plan_work(wire: list[bytes], batch: int) -> Callable[[], int]:
    """Decode, check and plan `wire` on a fresh live session, `batch` per batch (as the event
    loop does for a writer stream); returns how many events it planned."""
    limits = Limits()

    def work() -> int:
        live = LiveSession(_record("s"), SessionFold(keep_messages=False), ids_complete=True)
        reported = 0
        for first in range(0, len(wire), batch):
            messages = [event_pb2.NewEvent.FromString(raw) for raw in wire[first : first + batch]]
            decoded = decode_events(messages, limits)
            planned = plan_append(
                live,
                validate_proposals(decoded, limits),
                writer_id="w",
                epoch=1,
                expected_next_seq=None,
                now=1,
                lease_expires_at=2,
                blob_threshold=1 << 20,
                raw=[d.raw for d in decoded],
            )
            reported += len(planned.seqs)
        return reported

    return work


INSTRUCTION_RUNS = (1_000, 5_000)
"""Events planned in the two counted runs: their difference leaves out start-up and imports."""


def plan_instructions(batch: int) -> int | None:
    """Instructions per event (callgrind) to decode, check and plan at `batch` per batch; None
    when valgrind is not installed."""
    if shutil.which("valgrind") is None:
        return None
    counts = [_counted_instructions(events, batch) for events in INSTRUCTION_RUNS]
    return round((counts[1] - counts[0]) / (INSTRUCTION_RUNS[1] - INSTRUCTION_RUNS[0]))


def _counted_instructions(events: int, batch: int) -> int:
    """Instructions a process takes to plan the first `events` events (callgrind's total)."""
    command = [sys.executable, "-m", "bench.append_path", "--plan-run", str(events), str(batch)]
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected\s*:\s*([\d,]+)", run.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no instruction count: {run.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def plan_run(events: int, batch: int) -> None:
    """What `_counted_instructions` runs: the same workload whatever `events` is (so building
    it cancels out of the difference), of which the first `events` are planned."""
    wire = _wire(max(INSTRUCTION_RUNS))
    _plan_work(wire[:events], batch)()


def commit_us(db: str, commits: int, sessions: int) -> float:
    """CPU µs per group commit of `sessions` one-event batches (one per session)."""
    upgrade(db)
    recorder = open_recorder(db)
    try:
        now = int(time.time() * 1000)
        leases = []
        for index in range(sessions):
            sid = f"commit-{index}"
            recorder.create_session(_record(sid))
            leases.append(recorder.acquire_lease(sid, "w", takeover=False, now=now, ttl_ms=10**9, token_hash="h"))
        data = {"message": {"role": "user", "content": "y" * 2000}}
        text = json.dumps(data).encode()
        next_seq = [0] * sessions

        def work() -> int:
            for _ in range(commits):
                group = []
                for index, lease in enumerate(leases):
                    seq = next_seq[index]
                    event = Event(seq, now, "user/message", data, surface_op=APPEND)
                    pending = PendingBatch(lease.id, "w", lease.epoch, seq, [event], now, False, now + 10**9, False)
                    pending.stored.append((text, None))
                    group.append(pending)
                    next_seq[index] += 1
                assert recorder.commit_batches(group) == [None] * sessions
            return commits

        return _cpu_us(work)
    finally:
        recorder.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--commits", type=int, default=2_000)
    parser.add_argument("--instructions", action="store_true", help="also count plan's instructions (callgrind)")
    parser.add_argument("--plan-run", type=int, nargs=2, metavar=("EVENTS", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plan_run is not None:
        plan_run(*args.plan_run)
        return 0
    out: dict[str, Any] = {
        "plan_us_per_event": {"1/batch": plan_us(args.events, 1), "16/batch": plan_us(args.events, 16)},
        "commit_us": {},
    }
    if args.instructions:
        out["plan_instructions_per_event"] = {f"{b}/batch": plan_instructions(b) for b in (1, 16)}
    backends = ["sqlite", *(["postgresql"] if pg_available() else [])]
    for backend in backends:
        for sessions in (1, 16):
            with scratch_database(backend, f"commit{sessions}") as db:
                out["commit_us"][f"{backend}, {sessions} session(s)/group"] = commit_us(db, args.commits, sessions)
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
