"""The append path in-process, without gRPC: CPU per event of what the event loop does, and CPU
per group commit of what the writer thread does. Thread CPU time, not wall time, so the figures
hold on a busy machine (other processes slow a run down but do not add to its CPU time).

`python -m bench.append_path [--events 20000] [--commits 2000]` prints, for the bench workload:
- `plan`: decode the wire messages, check the envelopes and plan each batch on a live fold
  (`transport.servicer.decode_events`, `service.append.validate_proposals`, `plan_append`),
  one event per batch and 16 per batch;
- `commit`: `EventRecorder.commit_batches` of one one-event batch, and of 16 sessions' batches
  in one group, on SQLite and PostgreSQL (when reachable).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
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
from sessionlog_server.transport.servicer import decode_events


def _cpu_us(work: Callable[[], int]) -> float:
    """Thread CPU µs per unit of `work` (which returns how many units it did)."""
    start = time.thread_time()
    units = work()
    return round(1e6 * (time.thread_time() - start) / max(units, 1), 1)


def _record(sid: str) -> SessionRecord:
    return SessionRecord(sid, "", 0, None, {}, None, None, 0, 0, None, 0, None, False)


def plan_us(events: int, batch: int) -> float:
    """CPU µs per event to decode, check and plan `events` events sent `batch` per batch."""
    wire = [convert.new_event_to_pb(e).SerializeToString() for e in as_new_events(session_events(events), "ev")]
    limits = Limits()

    def work() -> int:
        live = LiveSession(_record("s"), SessionFold(keep_messages=False), ids_complete=True)
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
            assert planned.checkpoint is not None
            live.fold.release(planned.checkpoint)
        return len(wire)

    return _cpu_us(work)


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
                    pending = PendingBatch(lease.id, "w", lease.epoch, seq, [event], now, False, now + 10**9)
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
    args = parser.parse_args(argv)
    out: dict[str, Any] = {
        "plan_us_per_event": {"1/batch": plan_us(args.events, 1), "16/batch": plan_us(args.events, 16)},
        "commit_us": {},
    }
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
