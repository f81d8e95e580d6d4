"""Instructions per appended event of the whole server, counted by valgrind's callgrind: the
figure to compare two revisions with on a machine whose CPU time moves by a third from run to
run.

`python -m bench.server_instructions [--events 100 400] [--streams 16] [--window 64] [--batch 1]
[--unary] [--db sqlite|postgresql] [--keep DIR]` starts `sessionlog serve` (one worker; a SQLite file, or a fresh
PostgreSQL database with `--db postgresql`) under callgrind, streams the bench workload from
16 writer streams at one event per batch, up to 64 batches in flight each (the bench's
16-session load; `--batch 16` its 16 events a batch; `--streams 1 --window 1` counts an event
sent alone, each its own message, commit and acknowledgement, as a slow writer's is; `--unary`
counts sequential AppendEvents calls of one event to one session, the unary figure's load,
per-call work included), stops the
server with SIGTERM (callgrind writes its count as the process exits), and does it again with
more events per stream; the difference of the two counts divided by the extra events leaves
start-up, imports and shutdown out. Every thread of the server counts: gRPC's core, the event
loop, the writer thread, SQLite; PostgreSQL's own processes do not (only the server runs under
callgrind), nor does the kernel's share (system calls, wake-ups), nor time spent waiting. About
4 minutes; two counts of one revision differed by 0.03 % and 0.4 % at 16 streams. The server's
string hashes are seeded the same in every run (`HASH_SEED`). The server runs ~50 times slower
under valgrind, so run it on an otherwise idle machine; a run whose writers cannot connect in
time is started again (`ATTEMPTS`), and one that stalls fails rather than counting something
else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.figures import _stream
from bench.procs import Server, scratch_database
from bench.report import BACKENDS
from bench.workload import as_new_events, session_events
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import Unavailable
from sessionlog.core.events import NewEvent

ROOT = Path(__file__).resolve().parents[1]
STREAMS = 16
WINDOW = 64
HASH_SEED = "0"
"""The server's string hash seed, the same in every counted run. With Python's random one, the
probes of its dicts' lookups (imports, interning) differ from process to process by millions
of instructions a run: with an event sent alone, two runs of one build differed by 50,000
instructions an event, all of it in `unicodekeys_lookup_unicode` (round 38)."""
START_S = 600.0
"""How long the server may take to start under valgrind (imports run ~50 times slower)."""


def _unary_calls(target: str, events: Sequence[NewEvent]) -> int:
    """Append `events` to one new session, one AppendEvents call each, each waited for; how
    many were acknowledged."""
    with SessionLogClient(target, timeout=START_S) as client:
        client.create_session("count-unary")
        lease = client.acquire_lease("count-unary")
        return sum(len(client.append("count-unary", lease, [event]).seqs) for event in events)


def counted_run(
    events_per_stream: int,
    wrapper: Sequence[str],
    streams: int = STREAMS,
    window: int = WINDOW,
    unary: bool = False,
    db: str = "sqlite",
    *,
    batch: int = 1,
) -> dict[str, Any]:
    """Serve `events_per_stream` events on each of `streams` streams (`window` batches of `batch`
    events in flight each), or with `unary` that many sequential unary appends to one session, with the server
    run under `wrapper` (the valgrind command, or nothing) on a fresh `db` database; what was
    acknowledged (events, and the acknowledgements they came in: one a batch or call) and the
    server's stderr."""
    with (
        tempfile.TemporaryDirectory(prefix="sessionlog-instructions-") as scratch,
        scratch_database(db, "count") as url,
    ):
        server = Server(
            url,
            env={"SESSIONLOG_METRICS_LISTEN": "", "PYTHONHASHSEED": HASH_SEED},
            log_path=Path(scratch) / "stderr",
            wrapper=wrapper,
        )
        server.start(timeout=START_S)
        try:
            events = as_new_events(session_events(events_per_stream, seed=3), "e")
            if unary:
                acked, stalled = _unary_calls(server.target, events), False
                acknowledgements = acked
            else:
                sids = [f"count-{index}-{events_per_stream}" for index in range(streams)]
                run = asyncio.run(_stream(server.target, sids, events, window, START_S, None, batch))
                acked, stalled, acknowledgements = run.acked, run.stalled, len(run.latencies)
        finally:
            server.stop(timeout=START_S)
        assert server.proc is not None
        return {
            "acked": acked,
            "acknowledgements": acknowledgements,
            "stalled": stalled,
            "exit_code": server.proc.returncode,
            "stderr": server.stderr(),
        }


ATTEMPTS = 3
"""Runs tried per count: now and then the server under valgrind answers a new connection too
late for the client's handshake (UNAVAILABLE before any writer opened), and a fresh run does."""


def _writers(streams: int, unary: bool) -> int:
    """How many writers a counted run has: the unary load is one caller on one session."""
    return 1 if unary else streams


def count(
    events_per_stream: int,
    streams: int = STREAMS,
    window: int = WINDOW,
    unary: bool = False,
    db: str = "sqlite",
    out_file: Path | None = None,
    *,
    batch: int = 1,
) -> int:
    """Callgrind's instruction count of one whole server run (`counted_run`'s load); its
    per-function profile is written to `out_file` when given (for `callgrind_annotate`)."""
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file or '/dev/null'}"]
    for attempt in range(1, ATTEMPTS + 1):
        try:
            run = counted_run(events_per_stream, valgrind, streams, window, unary, db, batch=batch)
            break
        except Unavailable:
            if attempt == ATTEMPTS:
                raise
    expected = events_per_stream * _writers(streams, unary)
    if run["stalled"] or run["acked"] != expected:
        raise RuntimeError(f"the counted server acknowledged {run['acked']} of {expected} events")
    found = re.search(r"Collected\s*:\s*([\d,]+)", run["stderr"])
    if found is None:
        raise RuntimeError(f"callgrind printed no instruction count: {run['stderr'][-500:]}")
    return int(found.group(1).replace(",", ""))


def instructions_per_event(
    fewer: int,
    more: int,
    streams: int = STREAMS,
    window: int = WINDOW,
    unary: bool = False,
    db: str = "sqlite",
    keep: Path | None = None,
    *,
    batch: int = 1,
) -> int | None:
    """Instructions per event of the whole server (None when valgrind is not installed). With
    `keep`, both runs' per-function profiles are written there (`keep_paths`)."""
    if shutil.which("valgrind") is None:
        return None
    low_out, high_out = keep_paths(keep, fewer, more) if keep is not None else (None, None)
    low = count(fewer, streams, window, unary, db, low_out, batch=batch)
    high = count(more, streams, window, unary, db, high_out, batch=batch)
    return round((high - low) / (_writers(streams, unary) * (more - fewer)))


def keep_paths(keep: Path, fewer: int, more: int) -> tuple[Path, Path]:
    """Where `--keep DIR` writes the two runs' callgrind profiles: their difference, function by
    function, is where the extra events' instructions went (`callgrind_annotate` each, or
    `callgrind_annotate --inclusive=no` of both and subtract)."""
    keep.mkdir(parents=True, exist_ok=True)
    return keep / f"callgrind.{fewer}.out", keep / f"callgrind.{more}.out"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, nargs=2, default=[100, 400], metavar=("FEWER", "MORE"))
    parser.add_argument("--streams", type=int, default=STREAMS, help="writer streams")
    parser.add_argument("--window", type=int, default=WINDOW, help="batches in flight per stream")
    parser.add_argument("--batch", type=int, default=1, help="events per batch on each stream")
    parser.add_argument("--unary", action="store_true", help="sequential unary appends to one session instead")
    parser.add_argument("--db", choices=BACKENDS, default="sqlite", help="the server's database")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="write both runs' callgrind profiles to DIR")
    args = parser.parse_args(argv)
    fewer, more = sorted(args.events)
    figure = instructions_per_event(
        fewer, more, args.streams, args.window, args.unary, args.db, args.keep, batch=args.batch
    )
    shape: dict[str, Any] = (
        {"unary": True, "events_per_call": 1}
        if args.unary
        else {"streams": args.streams, "window": args.window, "events_per_batch": args.batch}
    )
    print(json.dumps({"server_instructions_per_event": figure, "db": args.db, **shape}))
    return 0 if figure is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
