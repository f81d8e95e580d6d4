"""`python -m bench --quick` runs end to end and reports every figure (speed is not asserted).

Keeps the bench working as the service changes: the CI-scale run starts real servers, runs
every workload and every peer, and must produce each figure key. One run per database (the
`--backends` the bench takes), so the two halves can run side by side.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers import PEERS as PEER_BACKENDS
from bench.peers import PER_COMMIT_BULK
from bench.run import QUICK
from sessionlog_server.transport.workers import default_workers

ROOT = Path(__file__).resolve().parents[2]
FIGURES = (
    "unary_sequential",
    "stream_1",
    "stream_16",
    "stream_16_long",
    "stream_64",
    "stream_16_batch16",
    "stream_16_workers",
    "stream_16_batch16_workers",
    "latency_at_rate",
    "latency_at_rate_workers",
    "latency_at_high_rate",
    "history_1k",
    "history_10k",
    "history_100k",
    "rss_streams",
)
PEERS = (
    "sqlite3_x1",
    "sqlite3_x16",
    "eventsourcing_sqlite",
    "openai_agents_sqlite_session",
    "langgraph_sqlite_saver",
    "psycopg_x1",
    "psycopg_x16",
    "eventsourcing_postgres",
)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_quick_bench_reports_every_figure(backend: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--backends", backend, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    figures = report["sessionlog"][backend]
    missing = [key for key in FIGURES if key not in figures]
    assert not missing, f"{backend} lacks {missing}"
    for key in FIGURES[:7]:
        assert figures[key]["events"] > 0
        assert figures[key]["events_per_s"] > 0
    for key in ("stream_16_workers", "stream_16_batch16_workers"):  # serve's default: one per core
        assert figures[key]["workers"] == default_workers() and figures[key]["writers_per_channel"] == 1
        if default_workers() > 1:  # each worker's CPU, busiest first
            shares = figures[key]["worker_cpu_pct"]
            assert len(shares) == default_workers() and shares == sorted(shares, reverse=True) and shares[0] > 0
    assert {"p50_ms", "p99_ms", "p999_ms", "server_waited_ms_per_s"} <= figures["latency_at_rate"].keys()
    spread = figures["latency_at_rate_workers"]
    assert spread["workers"] == default_workers() and spread["events"] > 0 and spread["p99_ms"] > 0
    assert "peak_rss_mb" in figures["rss_streams"]
    for key in ("history_1k", "history_10k", "history_100k"):
        assert "cold_ms" in figures[key] or "unavailable" in figures[key]
    long = report["long_sessions"][backend]
    for label in ("compacting", "long"):
        assert long[label]["floor"]["ms"] > 0
        for key in ("cold_history", "history_at_middle", "cold_resume"):
            assert long[label][key]["ms"] > 0 and "rss_growth_mb" in long[label][key]
    assert long["live"]["sessions"] > 0 and "rss_above_idle_mb" in long["live"]
    assert "Long sessions" in done.stdout
    for where in ("same_instance", "other_instance"):
        assert report["delivery"][backend][where]["received"] == report["delivery"][backend]["events"]
    slow = report["slow_writers"][backend]
    assert slow["acks"] > 0 and slow["setups_failed"] == 0
    assert {"ack_p50_ms", "ack_p99_ms", "ack_p999_ms", "stall_seconds"} <= slow.keys()
    # Where the CPU went while the writers wrote: both sides worked, the machine was busy.
    assert slow["writes_server_cpu_pct"] > 0 and slow["writes_client_cpu_pct"] > 0
    assert slow["writes_server_us_per_event"] > 0
    assert 0 < slow["writes_machine_busy_pct"] <= 100
    assert slow["writes_server_waited_ms_per_s"] >= 0
    assert {name for name in PEERS if PEER_BACKENDS[name][0] == backend} <= report["peers"].keys()
    # Every raw driver makes the same number of commits: 16 per commit writes 16 times the events.
    prefix = {"sqlite": "sqlite3", "postgresql": "psycopg"}[backend]
    one, bulk = report["peers"][f"{prefix}_x1"], report["peers"][f"{prefix}_x16"]
    assert bulk["events"] == PER_COMMIT_BULK * one["events"] > 0
    floor = report["transport_floor"]
    assert floor["unary"]["server_us_per_call"] > 0 and floor["streams"]["server_us_per_message"] > 0
    # The echo's latency under the ack latency figure's load: every message answered.
    paced = floor["latency_at_rate"]
    assert paced["messages"] == int(paced["offered_per_s"] * QUICK.rate_seconds) and paced["p99_ms"] > 0
    assert "grpc.aio echo server, latency at a fixed rate" in done.stdout
    driver = {"sqlite": "raw sqlite3", "postgresql": "raw psycopg"}[backend]
    names = [target["name"] for target in report["targets"]]
    for figure in ("16 streaming sessions, 1 event/batch", "16 sessions, 16 events/batch", "unary"):
        assert any(figure in name and f"{backend} vs {driver}" in name for name in names), names
    assert "sessionlog" in done.stdout and "targets" in done.stdout
    if default_workers() > 1:  # the every-core rows show each worker's share
        assert f"{default_workers()} workers (" in done.stdout
