"""The server's peak memory while it renders one session page: a figure, not a test.

    .venv/bin/python -m bench.page_memory [--events 200000] [--scale 0.05] [--db URL]

Writes one session of about `--events` small events (the workload's turns at `--scale` of their
text, a compaction every 40 turns: `bench.long_sessions.session_log`) straight into a fresh
SQLite file (or `--db`) with the server's own row mapping, starts `sessionlog serve` on it with
the admin listener on loopback, and fetches `/sessions/ID` once. It prints the server's RSS
before the request and its peak (`VmHWM` of /proc/PID/status) after, the page's size and the
time it took; the page is read as it arrives and not kept. Asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.lifecycle_data import BulkLoader
from bench.long_sessions import session_log
from bench.procs import Server, free_port
from sessionlog.client import SessionLogClient

SESSION = "page-memory"


def measure(db: str, events: int, scale: float) -> dict[str, float]:
    """Write the session into `db`, render its page once on a fresh server; the figures."""
    loader = BulkLoader(db)
    written = loader.long_session(SESSION, session_log(events, scale, True, seed=7), 1_800_000_000_000).events
    loader.close()
    port = free_port()
    env = {"SESSIONLOG_METRICS_LISTEN": f"127.0.0.1:{port}"}
    with Server(db, env=env) as server, SessionLogClient(server.target) as client:
        client.get_session(SESSION)  # connected and warm; the log is not read
        before = server.memory_mb()
        started = time.perf_counter()
        size = 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sessions/{SESSION}", timeout=600) as response:
            while chunk := response.read(1 << 20):
                size += len(chunk)
        took = time.perf_counter() - started
        after = server.memory_mb()
    return {
        "events": written,
        "rss_before_mb": round(before["VmRSS"], 1),
        "peak_mb": round(after["VmHWM"], 1),
        "peak_growth_mb": round(after["VmHWM"] - before["VmRSS"], 1),
        "page_mb": round(size / 1e6, 1),
        "seconds": round(took, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--scale", type=float, default=0.05, help="text scale of the workload's turns")
    parser.add_argument("--db", default=None, help="a database URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or f"sqlite:///{Path(folder) / 'page.db'}"
        figures = measure(db, args.events, args.scale)
    print(
        f"{figures['events']:,} events: server RSS {figures['rss_before_mb']} MB before the page, "
        f"peak {figures['peak_mb']} MB (+{figures['peak_growth_mb']} MB); "
        f"page {figures['page_mb']} MB in {figures['seconds']} s"
    )


if __name__ == "__main__":
    main()
