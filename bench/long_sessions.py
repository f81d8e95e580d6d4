"""Long sessions: what a session costs when it comes back, against the cost of its whole log.

Three data sets per database, written in bulk with the server's own row mapping and its own
snapshot policy (the rows and fold snapshots the server would have written, see
`bench/lifecycle_data.py` for why bulk):

- `compacting`: ~2 KB events, a compaction every 40 turns (summary + a replace of everything
  after node 0), 100,000 events at full scale;
- `long`: ~500 B events, the same compaction rhythm, 1,000,000 events;
- `live`: 100 sessions of 10,000 ~2 KB events without compaction, for resident memory.

For `compacting` and `long` the floor is the time to read and parse the whole log once (one
query, every `data` decoded: what any design that folds the log pays). Each operation runs on a
fresh server process (cold; `--quick` shares one server to stay short): the first full model
history, the model history at the middle seq, and a resume to a held lease; each reports its
time and the server's RSS growth. For
`live`, every session is loaded (a stats read) into one server and its RSS above idle is
reported. `python -m bench.long_sessions [--quick] [--backends sqlite,postgresql] [--json P]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.lifecycle_common import Running, info_server
from bench.lifecycle_data import BulkLoader
from bench.procs import each_backend
from bench.workload import TextSource, _usage, turn_events
from sessionlog.core import jsonvalue
from sessionlog.core.events import NewEvent, Replace
from sessionlog.core.fold import SessionFold
from sessionlog_server.config import Settings
from sessionlog_server.service.loader import SnapshotPolicy

COMPACT_EVERY_TURNS = 40
TWO_KB = 1.0
"""Text scale of the workload's turns that makes events of about 2 KB of data on average
(the bench prints each log's size, so the mean can be checked)."""
HALF_KB = 0.25
"""Text scale that makes events of about 500 B."""


@dataclass(frozen=True, slots=True)
class Scale:
    compacting_events: int
    long_events: int
    live_sessions: int
    live_events: int
    fresh_process: bool = True
    """Each measurement in a fresh server process (cold); --quick shares one server, where each
    session's first call still folds it from the database."""


FULL = Scale(compacting_events=100_000, long_events=1_000_000, live_sessions=100, live_events=10_000)
QUICK = Scale(compacting_events=1_000, long_events=2_000, live_sessions=3, live_events=300, fresh_process=False)


# --- data -------------------------------------------------------------------------------


def _compaction(src: TextSource, nodes: list[int], next_seq: int) -> list[NewEvent]:
    """A compaction: its bracket, the summary with usage, and the replace of every node after
    node 0 by a summary user message (the replace lands two seqs after `next_seq`)."""
    replaced = nodes[1:]
    return [
        NewEvent(type="compaction/start", data={}),
        NewEvent(
            type="compaction/summary",
            data={
                "summary": src.text(800, 1600),
                "provider": "acme",
                "model": "m-1",
                "usage": _usage(src),
                "tokensBefore": 90_000,
            },
        ),
        NewEvent(
            type="user/message",
            data={"message": {"role": "user", "content": src.text(800, 1600)}, "source": {"kind": "compaction"}},
            surface_op=Replace(replaced[0], replaced[-1]),
            source_event_seqs=tuple(replaced),
        ),
        NewEvent(type="compaction/end", data={}),
    ]


def session_log(n: int, size: float, compact: bool, seed: int) -> Iterator[NewEvent]:
    """`n` events (or a few more, to end the turn) of a session; with `compact`, a compaction
    every COMPACT_EVERY_TURNS turns. The surface is tracked with the core's fold."""
    src = TextSource(seed)
    fold = SessionFold(keep_messages=False)
    emitted = 0

    def emit(event: NewEvent) -> NewEvent:
        nonlocal emitted
        fold.extend([event.committed(fold.next_seq, 0)])
        emitted += 1
        return event

    yield emit(
        NewEvent(
            type="system/message",
            data={"message": {"role": "system", "content": src.text(1500, 2500)}},
            surface_op="append",
        )
    )
    turn = 0
    while emitted < n:
        turn += 1
        for raw in turn_events(src, turn, size):
            yield emit(NewEvent.from_json(raw))
        if compact and turn % COMPACT_EVERY_TURNS == 0 and emitted < n:
            for event in _compaction(src, fold.surface_view()["nodes"], fold.next_seq):
                yield emit(event)


# --- measurements -------------------------------------------------------------------------


def read_and_parse_floor(loader: BulkLoader, sid: str) -> dict[str, Any]:
    """Read every event's data of the session in one query and decode each: the O(log) floor."""
    start = time.perf_counter()
    nbytes = 0
    with loader.engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=5000).execute(
            text("SELECT data FROM events WHERE session_id = :sid ORDER BY seq"), {"sid": sid}
        )
        for (data,) in result:
            nbytes += len(data)
            jsonvalue.loads(data.encode())
    return {"ms": round((time.perf_counter() - start) * 1000, 1), "log_mb": round(nbytes / 1e6, 1)}


def _cold(db: str, action: Any, shared: Running | None) -> dict[str, Any]:
    """Run `action(client)` against a fresh server process (or `shared`); time and RSS growth."""
    with info_server(db, shared, log_level="warning") as (server, client):
        next(iter(client.list_sessions(page_size=1)), None)  # connected and warm (imports, pools), nothing loaded
        before = server.memory_mb()
        start = time.perf_counter()
        detail = action(client)
        took = time.perf_counter() - start
        after = server.memory_mb()
    return {
        "ms": round(took * 1000, 1),
        "rss_growth_mb": round(after["VmRSS"] - before["VmRSS"], 1),
        "peak_growth_mb": round(after["VmHWM"] - before["VmRSS"], 1),
        **detail,
    }


def measure_session(db: str, loader: BulkLoader, sid: str, events: int, shared: Running | None) -> dict[str, Any]:
    floor = read_and_parse_floor(loader, sid)
    middle = events // 2
    history = _cold(db, lambda c: {"messages": len(c.model_history(sid))}, shared)
    at_middle = _cold(db, lambda c: {"messages": len(c.model_history(sid, at_seq=middle))}, shared)
    resume = _cold(db, lambda c: {"next_seq": c.resume(sid).next_seq}, shared)
    out: dict[str, Any] = {
        "events": events,
        "floor": floor,
        "cold_history": history,
        "history_at_middle": at_middle,
        "cold_resume": resume,
    }
    for key in ("cold_history", "history_at_middle", "cold_resume"):
        out[key]["ratio_to_floor"] = round(out[key]["ms"] / max(floor["ms"], 0.001), 3)
    return out


def measure_live(db: str, sids: list[str], shared: Running | None) -> dict[str, Any]:
    with info_server(db, shared, log_level="warning") as (server, client):
        next(iter(client.list_sessions(page_size=1)), None)
        idle = server.memory_mb()["VmRSS"]
        for sid in sids:
            client.stats(sid)
        loaded = server.memory_mb()["VmRSS"]
    return {"sessions": len(sids), "idle_rss_mb": round(idle, 1), "rss_above_idle_mb": round(loaded - idle, 1)}


# --- driver -----------------------------------------------------------------------------


def run_backend(db: str, scale: Scale) -> dict[str, Any]:
    """Every data set written into `db` and measured."""
    with contextlib.ExitStack() as stack:
        shared = None if scale.fresh_process else stack.enter_context(info_server(db, log_level="warning"))
        return _run_backend(db, scale, shared)


def _run_backend(db: str, scale: Scale, shared: Running | None) -> dict[str, Any]:
    loader = BulkLoader(db)
    policy = SnapshotPolicy(Settings().snapshot_every_events, Settings().snapshot_every_bytes)
    results: dict[str, Any] = {}
    t0 = 1_800_000_000_000
    for label, n, size in (("compacting", scale.compacting_events, TWO_KB), ("long", scale.long_events, HALF_KB)):
        count = loader.long_session(label, session_log(n, size, True, seed=len(label)), t0, snapshots=policy).events
        loader.close()
        loader = BulkLoader(db)
        _log(f"{label} written ({count} events)")
        results[label] = measure_session(db, loader, label, count, shared)
        _log(f"{label} measured")
    sids = [f"live-{i}" for i in range(scale.live_sessions)]
    for index, sid in enumerate(sids):
        loader.long_session(sid, session_log(scale.live_events, TWO_KB, False, seed=100 + index), t0, snapshots=policy)
    loader.close()
    results["live"] = measure_live(db, sids, shared)
    results["live"]["events_per_session"] = scale.live_events
    return results


def targets(results: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """The long-session targets, each met or missed, with the figure that decides it."""
    out: list[tuple[str, bool, str]] = []
    for backend, figures in results.items():
        if "unavailable" in figures:
            continue
        compacting = figures["compacting"]
        for key, name in (("cold_resume", "cold resume"), ("cold_history", "cold full history")):
            ratio = compacting[key]["ratio_to_floor"]
            out.append((f"{backend}: {name} of the compacting session <= 0.1x read+parse", ratio <= 0.1, f"{ratio}x"))
        resume = figures["long"]["cold_resume"]["ms"]
        out.append((f"{backend}: the long session resumes in <= 1 s", resume <= 1000, f"{resume} ms"))
        live = figures["live"]
        if live["sessions"] == FULL.live_sessions and live["events_per_session"] == FULL.live_events:
            above = live["rss_above_idle_mb"]
            out.append((f"{backend}: 100 live 10k-event sessions <= 250 MB above idle", above <= 250, f"{above} MB"))
    return out


def run_all(backends: list[str], scale: Scale) -> dict[str, Any]:
    """Every backend that is reachable; the figures by backend."""
    return each_backend(backends, "long", lambda db: run_backend(db, scale))


def render(results: dict[str, Any]) -> str:
    lines = [
        "| backend | session | events | log MB | read+parse floor | cold history (ratio) "
        "| history at middle (ratio) | cold resume (ratio) | RSS growth history / middle / resume |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    available = {backend: figures for backend, figures in results.items() if "unavailable" not in figures}
    for backend, figures in available.items():
        for label in ("compacting", "long"):
            f = figures[label]
            lines.append(
                f"| {backend} | {label} | {f['events']:,} | {f['floor']['log_mb']} | {f['floor']['ms']} ms | "
                f"{f['cold_history']['ms']} ms ({f['cold_history']['ratio_to_floor']}) | "
                f"{f['history_at_middle']['ms']} ms ({f['history_at_middle']['ratio_to_floor']}) | "
                f"{f['cold_resume']['ms']} ms ({f['cold_resume']['ratio_to_floor']}) | "
                f"{f['cold_history']['rss_growth_mb']} / {f['history_at_middle']['rss_growth_mb']} / "
                f"{f['cold_resume']['rss_growth_mb']} MB |"
            )
    lines.append("")
    lines.append("| backend | live sessions | events each | RSS above idle |")
    lines.append("|---|---:|---:|---:|")
    for backend, figures in available.items():
        live = figures["live"]
        lines.append(
            f"| {backend} | {live['sessions']} | {live['events_per_session']:,} | {live['rss_above_idle_mb']} MB |"
        )
    return "\n".join(lines)


def _log(message: str) -> None:
    print(f"[long-sessions] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.long_sessions", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI scale")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    results = run_all(args.backends.split(","), scale)
    print(render(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"scale": asdict(scale), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
