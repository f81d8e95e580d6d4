"""`python -m bench`: sessionlog against its peers on SQLite and PostgreSQL, one command.

For each database it starts `sessionlog serve` as a child process (SQLite: a file in a temp
directory; PostgreSQL: a fresh `sessionlog_bench_*` database, dropped afterwards), runs the
workloads of `bench.figures`, then runs every peer of `bench.peers` on the same events, and
prints one table (peers as ratios to sessionlog) and writes every figure as JSON.

    .venv/bin/python -m bench                 # full run (~10-15 minutes on 2 cores)
    .venv/bin/python -m bench --quick         # CI scale, well under a minute
    .venv/bin/python -m bench --json out.json --profile-seconds 20

Every loop is bounded in count and in time (`--max-seconds` per figure), every address is
loopback, and nothing outside the temp directory and the bench's own databases is touched.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import delivery, figures, long_sessions, peers, profiling, slow_writers, transport_floor
from bench.procs import ROOT, Server, create_pg_database, drop_pg_database, pg_available, scratch_database, server_build
from bench.report import render, targets
from bench.workload import as_new_events, mean_data_bytes, session_events
from sessionlog.core.events import NewEvent
from sessionlog_server.config import Settings
from sessionlog_server.service.live import RECENT_IDS
from sessionlog_server.transport.event_loop import loop_factory, loop_name
from sessionlog_server.transport.workers import default_workers


@dataclass(frozen=True)
class Scale:
    """How much work each figure does (full run vs --quick)."""

    unary_events: int
    stream1_events: int
    stream16_events: int
    stream64_events: int
    batch16_events: int
    repeats: int
    window: int
    rate: float
    high_rate: float
    rate_seconds: float
    rate_sessions: int
    history_sizes: tuple[int, int, int]
    fresh_process_per_history: bool
    rss_streams: int
    rss_hold_seconds: float
    peer_events: int
    max_seconds: float
    profile_events: int


FULL = Scale(
    unary_events=1000,
    stream1_events=3000,
    stream16_events=400,
    stream64_events=150,
    batch16_events=1000,
    repeats=3,
    window=64,
    rate=1000.0,
    high_rate=5000.0,
    rate_seconds=15.0,
    rate_sessions=16,
    history_sizes=(1000, 10_000, 100_000),
    fresh_process_per_history=True,
    rss_streams=1000,
    rss_hold_seconds=2.0,
    peer_events=1000,
    max_seconds=30.0,
    profile_events=20_000,
)
QUICK = Scale(
    unary_events=100,
    stream1_events=300,
    stream16_events=30,
    stream64_events=10,
    batch16_events=64,
    repeats=1,
    window=64,
    rate=1000.0,
    high_rate=5000.0,
    rate_seconds=0.5,
    rate_sessions=16,
    history_sizes=(50, 100, 200),
    fresh_process_per_history=False,
    rss_streams=20,
    rss_hold_seconds=0.2,
    peer_events=200,
    max_seconds=5.0,
    profile_events=200,
)
HISTORY_KEYS = ("history_1k", "history_10k", "history_100k")
LONG_SESSION_EVENTS = RECENT_IDS + 100
"""Events each session of the long-sessions streaming figure holds before it is timed: past the
eventIds a live session remembers, so each new eventId is one the service cannot vouch for from
memory (the unique index answers for it)."""


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _dirty() -> list[str]:
    """Files of server/ and client/ that differ from the commit (others may be mid-change)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "server", "client"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in out.splitlines() if line.strip()]


def _server_event_loop() -> str:
    """The event loop the bench's servers run on (`SESSIONLOG_EVENT_LOOP`, resolved as `serve`
    resolves it)."""
    loop = loop_factory(Settings.from_env().event_loop)()
    try:
        return loop_name(loop)
    finally:
        loop.close()


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": round(mem_gb, 1), "python": platform.python_version()}


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median events/s, plus every run's events/s (noise shows as spread)."""
    good = [r for r in runs if "events_per_s" in r]
    if not good:
        return runs[0]
    ordered = sorted(good, key=lambda r: r["events_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "runs": [r["events_per_s"] for r in good]}


def backend_figures(
    backend: str,
    db: str,
    scale: Scale,
    client_procs: int,
    peer_events: peers.PeerEvents | None,
    workdir: Path,
    peer_pg_url: str,
    workers: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every sessionlog figure on one database, and its peers, interleaved round by round
    (sessionlog's throughput figures, then each peer, `scale.repeats` times; medians are
    reported), so neighbours' load on the shared cores hits both sides alike.

    The figures are of one server process (one event loop: its CPU per event shows on any
    machine), and the 16-session ones again on `workers` processes, as `serve` runs by
    default, with a connection per session so that the workers share them
    (`every_core_figures`)."""
    out: dict[str, Any] = {"db": "sqlite file (temp dir)" if backend == "sqlite" else "postgresql (fresh db)"}
    longest = max(
        scale.unary_events,
        scale.stream1_events,
        LONG_SESSION_EVENTS + scale.stream16_events,
        scale.stream64_events,
        scale.batch16_events,
    )
    rate_per_session = int(scale.high_rate * scale.rate_seconds / scale.rate_sessions) + 1
    template = as_new_events(session_events(max(longest, rate_per_session), seed=11), "ev")
    # The imports and the events made up front (these and the peers') live as long as the
    # run: out of the collector's sight, the in-process client's full collections no longer
    # walk them (~160,000 objects). With 136,000 tracked, the client used 44-55 % of a core in
    # the 16-session figure, against 34-46 % frozen (six runs each).
    gc.freeze()
    runs: dict[str, list[dict[str, Any]]] = {}
    peer_runs: dict[str, list[dict[str, Any]]] = {}
    # Its own file on SQLite: one service per file. On PostgreSQL the two share the database.
    workers_db = f"sqlite:///{workdir / 'sessionlog-workers.db'}" if backend == "sqlite" else db
    with Server(db) as server, Server(workers_db, env={"SESSIONLOG_WORKERS": str(workers)}) as every_core:
        # Every worker's first calls and caches, as the unary figure warms the one-process server.
        figures.streaming(every_core, 16, template[:16], window=scale.window, max_seconds=10, per_channel=1)
        out["async_writer"] = "sessionlog.aio.AsyncWriter (coalesces queued batches into one message)"
        for round_no in range(scale.repeats):
            tag = f"round {round_no + 1}/{scale.repeats}"
            _log(f"{backend}: unary sequential ({scale.unary_events} events), {tag}")
            runs.setdefault("unary_sequential", []).append(
                figures.unary_sequential(server, template[: scale.unary_events], scale.max_seconds)
            )
            for key, sessions, count, batch, held in (
                ("stream_1", 1, scale.stream1_events, 1, 0),
                ("stream_16", 16, scale.stream16_events, 1, 0),
                ("stream_16_long", 16, scale.stream16_events, 1, LONG_SESSION_EVENTS),
                ("stream_64", 64, scale.stream64_events, 1, 0),
                ("stream_16_batch16", 16, scale.batch16_events, 16, 0),
            ):
                _log(f"{backend}: {sessions} streaming session(s) x {count} events, {batch}/batch, {tag}")
                runs.setdefault(key, []).append(
                    figures.streaming(
                        server,
                        sessions,
                        template[held : held + count],
                        window=scale.window,
                        max_seconds=scale.max_seconds,
                        client_procs=client_procs,
                        batch=batch,
                        history=template[:held],
                    )
                )
            for key, figure in every_core_figures(every_core, scale, template, workers, tag).items():
                runs.setdefault(key, []).append(figure)
            if peer_events is not None:
                for name, result in peers.run_peer_round(
                    backend, peer_events, workdir, peer_pg_url, round_no, scale.max_seconds, _log
                ).items():
                    peer_runs.setdefault(name, []).append(result)
        out.update({key: median_run(values) for key, values in runs.items()})
        _log(f"{backend}: ack latency at {scale.rate:.0f} events/s for {scale.rate_seconds:.0f}s")
        out["latency_at_rate"] = figures.fixed_rate(
            server, template, rate=scale.rate, seconds=scale.rate_seconds, sessions=scale.rate_sessions
        )
        # As `serve` runs by default: each worker commits its own groups, so an event that
        # arrives while one worker's commit is under way need not wait for it.
        _log(f"{backend}: ack latency at {scale.rate:.0f} events/s on {workers} workers, a connection per session")
        out["latency_at_rate_workers"] = {
            **figures.fixed_rate(
                every_core,
                template,
                rate=scale.rate,
                seconds=scale.rate_seconds,
                sessions=scale.rate_sessions,
                per_channel=1,
            ),
            "workers": workers,
        }
        if peer_events is not None:
            _log(f"{backend}: the raw driver's commit latency at {scale.rate:.0f} commits/s")
            where = str(workdir / "raw-latency.db") if backend == "sqlite" else peer_pg_url
            one = peer_events.per_event
            repeated = one * (int(scale.rate * scale.rate_seconds) // len(one) + 1)
            out["raw_commit_latency_at_rate"] = peers.commit_latency(
                backend, where, repeated, scale.rate, scale.rate_seconds
            )
        _log(f"{backend}: ack latency at {scale.high_rate:.0f} events/s for {scale.rate_seconds:.0f}s")
        out["latency_at_high_rate"] = figures.fixed_rate(
            server, template, rate=scale.high_rate, seconds=scale.rate_seconds, sessions=scale.rate_sessions
        )
    # The figures taken on a fresh server get databases of their own. The throughput figures'
    # sessions end inside a turn, and a server started on their database repairs those turns
    # in the background at start-up (240 sessions after a full run's streaming figures), which
    # a fresh-server figure then measured along. On SQLite, a 1,000-event session's cold
    # history took 264 ms and its refresh after one append 66 ms on such a server, against 88
    # and 3.7 ms with nothing to repair. With only the history moved, the RSS figure's server
    # did the repair: with 1,000 open streams it peaked at 197 MB against 157 MB on a database
    # of its own (one probe; 236 MB in the full run that showed it).
    out.update(history_section(backend, scale))
    _log(f"{backend}: peak RSS with {scale.rss_streams} open writer streams (fresh server)")
    with scratch_database(backend, "rss") as rss_db:
        out["rss_streams"] = figures.rss_with_streams(rss_db, scale.rss_streams, scale.rss_hold_seconds)
    return out, {name: median_run(values) for name, values in peer_runs.items()}


def history_section(backend: str, scale: Scale) -> dict[str, Any]:
    """Model history of sessions of `scale.history_sizes` events, each on a fresh server, in a
    database of their own (`backend_figures` says why)."""
    if not figures.model_history_available():
        missing = {"unavailable": "client.model_history does not exist in this checkout yet"}
        return dict.fromkeys(HISTORY_KEYS, missing)
    with scratch_database(backend, "history") as db:
        sids: dict[str, tuple[str, int]] = {}
        with Server(db) as server:
            for key, size in zip(HISTORY_KEYS, scale.history_sizes, strict=True):
                _log(f"{backend}: seeding a {size}-event session for model history")
                sid = f"bench-history-{size}"
                sids[key] = (sid, figures.seed_session(server.target, sid, size, seed=size))
        _log(f"{backend}: model history of {[n for _, n in sids.values()]} events (fresh server)")
        return figures.history_figures(db, sids, scale.fresh_process_per_history)


def every_core_figures(
    server: Server, scale: Scale, template: list[NewEvent], workers: int, tag: str
) -> dict[str, dict[str, Any]]:
    """The 16-session figures on `server`, of `workers` processes, each writer on a connection
    of its own, as 16 harness processes would be."""
    out: dict[str, dict[str, Any]] = {}
    for key, count, batch in (
        ("stream_16_workers", scale.stream16_events, 1),
        ("stream_16_batch16_workers", scale.batch16_events, 16),
    ):
        _log(f"16 streaming sessions x {count} events, {batch}/batch, {workers} workers, {tag}")
        figure = figures.streaming(
            server,
            16,
            template[:count],
            window=scale.window,
            max_seconds=scale.max_seconds,
            batch=batch,
            per_channel=1,
        )
        out[key] = {**figure, "workers": workers}
    return out


def profile_streaming(db: str, scale: Scale, seconds: float, out_dir: Path) -> dict[str, Any]:
    """py-spy on the server during the 16-session streaming workload."""
    raw = out_dir / "profile-stream16.txt"
    with Server(db) as server:
        spy = profiling.start_py_spy(server.pid, seconds, raw)
        time.sleep(1.0)  # let py-spy attach
        template = as_new_events(session_events(scale.profile_events, seed=13), "pf")
        run = figures.streaming(server, 16, template, window=scale.window, max_seconds=seconds)
        try:
            _, err = spy.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            spy.kill()
            _, err = spy.communicate()
    if not raw.exists():
        return {"unavailable": f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}"}
    return {"workload": run, "raw": str(raw), **profiling.summarise(raw)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI scale: small counts, short runs")
    parser.add_argument("--json", type=Path, help="write every figure here (default: bench/results/latest.json)")
    parser.add_argument("--backends", default="sqlite,postgresql", help="comma-separated: sqlite,postgresql")
    parser.add_argument("--no-peers", action="store_true", help="skip the peers")
    parser.add_argument("--profile-seconds", type=float, default=None, help="py-spy the 16-session run (0: skip)")
    parser.add_argument("--client-procs", type=int, default=1, help="client processes for the streaming figures")
    parser.add_argument("--max-seconds", type=float, default=None, help="cap on any one timed loop")
    parser.add_argument("--no-long-sessions", action="store_true", help="skip the long-session section")
    parser.add_argument("--no-slow-writers", action="store_true", help="skip the many-slow-writers section")
    parser.add_argument("--no-delivery", action="store_true", help="skip the subscription-delivery section")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="server processes for the slow writers and the every-core figures (0, as `serve`: one per core)",
    )
    args = parser.parse_args(argv)
    # SIGTERM runs the `finally` blocks too: servers stopped, bench databases dropped.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))

    scale = QUICK if args.quick else FULL
    if args.max_seconds is not None:
        scale = Scale(**{**asdict(scale), "max_seconds": args.max_seconds})
    profile_seconds = args.profile_seconds if args.profile_seconds is not None else (0.0 if args.quick else 15.0)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    json_path = args.json or (ROOT / "bench" / "results" / ("quick.json" if args.quick else "latest.json"))
    json_path.parent.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    peer_events = peers.PeerEvents(
        per_event=session_events(scale.peer_events, seed=11),
        bulk=session_events(peers.PER_COMMIT_BULK * scale.peer_events, seed=11),
    )
    report: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
            "sessionlog_commit": _git_commit(),
            "uncommitted_server_client_changes": _dirty(),
            "machine": _machine(),
            "server_event_loop": _server_event_loop(),
            "server_build": server_build(),
            "durability": {
                "sqlite": "WAL, synchronous=FULL (sessionlog default; peers set or verified the same)",
                "postgresql": "synchronous_commit=on, fsync=on (server defaults)",
            },
            "workload": {
                "mean_event_data_bytes": round(mean_data_bytes(session_events(5000, seed=11))),
                "events_per_batch": 1,
                "pipeline_window": scale.window,
                "client_procs": args.client_procs,
            },
            "scale": asdict(scale),
            "versions": {
                name: _version(name)
                for name in (
                    "grpcio",
                    "uvloop",
                    "sqlalchemy",
                    "psycopg",
                    "eventsourcing",
                    "openai-agents",
                    "langgraph",
                    "langgraph-checkpoint-sqlite",
                    "py-spy",
                )
            },
        },
        "sessionlog": {},
        "peers": {},
    }
    _log("transport floor: a grpc.aio echo server")
    event_bytes = int(report["meta"]["workload"]["mean_event_data_bytes"])
    report["transport_floor"] = transport_floor.measure(event_bytes, scale.unary_events, 16, scale.stream16_events)
    if "unavailable" not in report["transport_floor"]:
        _log(f"transport floor: the echo's latency at {scale.rate:.0f} messages/s on {scale.rate_sessions} streams")
        report["transport_floor"]["latency_at_rate"] = transport_floor.latency_at_rate(
            event_bytes, scale.rate_sessions, scale.rate, scale.rate_seconds
        )
    with tempfile.TemporaryDirectory(prefix="sessionlog-bench-") as tmp:
        workdir = Path(tmp)
        have_pg = "postgresql" in backends and pg_available()
        dbs: dict[str, str] = {}
        if "sqlite" in backends:
            dbs["sqlite"] = f"sqlite:///{workdir / 'sessionlog.db'}"
        pg_name = f"sessionlog_bench_{os.getpid()}"
        if have_pg:
            dbs["postgresql"] = create_pg_database(pg_name)
        elif "postgresql" in backends:
            report["sessionlog"]["postgresql"] = {"unavailable": "PostgreSQL is not reachable on 127.0.0.1:5432"}
        try:
            peer_pg = f"sessionlog_bench_peers_{os.getpid()}"
            peer_pg_url = create_pg_database(peer_pg) if have_pg and not args.no_peers else ""
            try:
                for backend, db in dbs.items():
                    report["sessionlog"][backend], found = backend_figures(
                        backend,
                        db,
                        scale,
                        args.client_procs,
                        None if args.no_peers else peer_events,
                        workdir,
                        peer_pg_url,
                        args.workers or default_workers(),
                    )
                    report["peers"].update(found)
            finally:
                if peer_pg_url:
                    drop_pg_database(peer_pg)
            if not args.no_peers and not have_pg:
                why = "PostgreSQL is not reachable" if "postgresql" in backends else "not measured (--backends)"
                report["peers"].update(peers.unavailable("postgresql", why))
            if profile_seconds > 0 and "sqlite" in dbs:
                _log(f"profiling the server under 16 streaming sessions for {profile_seconds:.0f}s (py-spy)")
                profile_db = f"sqlite:///{workdir / 'profile.db'}"
                report["profile"] = profile_streaming(profile_db, scale, profile_seconds, json_path.parent)
        finally:
            if have_pg:
                drop_pg_database(pg_name)
    if not args.no_slow_writers:
        streams, seconds = (100, 5.0) if args.quick else (2000, 30.0)
        report["slow_writers"] = slow_writers.run_all(backends, streams, seconds, 2, args.workers)
        _log(f"transport floor: {streams} streams at one message a second on the echo server")
        report["transport_floor"]["slow_streams"] = transport_floor.slow_streams(streams, seconds)
    if not args.no_delivery:
        report["delivery"] = delivery.run_all(backends, 40 if args.quick else 300, 0.02)
    if not args.no_long_sessions:
        long_scale = long_sessions.QUICK if args.quick else long_sessions.FULL
        report["long_sessions"] = long_sessions.run_all(backends, long_scale)
    report["targets"] = targets(report)
    report["meta"]["elapsed_s"] = round(time.monotonic() - started, 1)
    report["meta"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    json_path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    print(render(report))
    if "slow_writers" in report:
        print("\n## Many slow writers (one event per second each)\n")
        print(slow_writers.render(report["slow_writers"]))
    if "delivery" in report:
        print("\n## Subscription delivery (append acknowledged -> subscriber has it)\n")
        print(delivery.render(report["delivery"]))
    if "long_sessions" in report:
        print("\n## Long sessions\n")
        print(long_sessions.render(report["long_sessions"]))
    print(f"\nJSON: {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
