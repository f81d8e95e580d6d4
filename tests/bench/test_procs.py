"""The bench's process counters read what they say they read."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import psycopg
import pytest

from bench.figures import _client_events, _portable
from bench.procs import PG_ADMIN_URL, process_cpu_seconds, process_waiting_seconds, settle_writes
from bench.workload import as_new_events, session_events

BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux CPU affinity")
def test_busy_processes_sharing_one_core_wait_for_it_longer_than_they_run() -> None:
    """Three busy loops on one core each run about a third of the time and wait the rest:
    the wait is schedstat's second field, not its first (the time on the core, which is about
    the process's CPU time)."""
    core = min(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", BUSY.format(seconds=1.5)]) for _ in range(3)]
    try:
        for p in procs:  # from here, not in the child before exec (`preexec_fn` is unsafe with threads)
            os.sched_setaffinity(p.pid, {core})
        time.sleep(1.2)
        readings = [(process_waiting_seconds(p.pid), process_cpu_seconds(p.pid)) for p in procs]
    finally:
        for p in procs:
            p.wait(timeout=30)
    for waited, ran in readings:
        assert waited > 1.3 * ran > 0, readings


def test_a_process_that_is_gone_has_waited_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert process_waiting_seconds(proc.pid) == 0.0


def _checkpoint_lsn() -> str:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        row = conn.execute("SELECT checkpoint_lsn::text FROM pg_control_checkpoint()").fetchone()
    assert row is not None
    return str(row[0])


def test_settling_before_a_latency_figure_checkpoints_postgresql() -> None:
    """What earlier sections wrote is written out before a latency figure: on PostgreSQL a
    CHECKPOINT, whose record moves the control file's checkpoint location; on SQLite only the
    kernel's pages are written (nothing to ask of PostgreSQL)."""
    before = _checkpoint_lsn()
    settle_writes("sqlite")
    assert _checkpoint_lsn() == before
    settle_writes(PG_ADMIN_URL)
    assert _checkpoint_lsn() != before


def test_a_client_process_freezes_its_events_out_of_the_collectors_sight() -> None:
    envelopes = _portable(as_new_events(session_events(20, seed=3), "frozen"))
    frozen_before = gc.get_freeze_count()
    try:
        events = _client_events(envelopes)
        assert _portable(events) == envelopes
        assert gc.get_freeze_count() >= frozen_before + len(events)
    finally:
        gc.unfreeze()  # this test process's heap goes back to the collector
