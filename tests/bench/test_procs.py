"""The bench's process counters read what they say they read."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.procs import process_cpu_seconds, process_waiting_seconds

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
