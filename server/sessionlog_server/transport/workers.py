"""Several server processes on one address (`serve`: one per core by default, `--workers N`):
every core does work.

One asyncio event loop decodes, validates and folds every event of its process, so one process
saturates one core. With N workers, N processes bind the same address with SO_REUSEPORT and
the kernel spreads connections over them; a connection (a harness's channel, its writer
stream) stays with one worker.

Why this is safe: correctness never depended on a process-wide lock. Every append is fenced in
its own transaction by the lease epoch and the expected next seq (see write-path.md), so two
workers can never interleave writes to a session, on SQLite (one write lock for the file) or
PostgreSQL. A worker's cached session that another worker wrote to catches up on the missing
events (LiveSessionLoader.catch_up) when its lease is taken or it is read. A subscriber on one worker
learns of another worker's appends by polling the log.

The parent checks the tokens, the TLS files and the address, runs the migrations once, starts
the workers (each born with the stop signals held until its handlers are in place: signals.py), forwards
SIGTERM/SIGINT/SIGHUP (`STOP_SIGNALS`) to them, and restarts a worker that dies (it is fenced like any crashed
process: its leases lapse and are repaired). Each worker exits when its parent is gone, so a
kill -9 of the whole service leaves no orphan holding the port. Worker i serves metrics on the
configured metrics port + i (port 0: each picks a free one, which its `serving` line names); only
worker 0 runs the start-up repair.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess

import structlog

from sessionlog_server.config import Settings
from sessionlog_server.transport.address import MAX_PORT, join_listen, split_listen, wait_address_free
from sessionlog_server.transport.signals import STOP_SIGNALS, release_stop_signals, stop_signals_held

log = structlog.get_logger("sessionlog.workers")

RESTART_BACKOFF_S = 1.0
"""Pause before a dead worker is started again (a crash loop costs one start per second)."""

START_UP_S = 15.0
"""A worker that dies sooner than this after its start died starting up (`Restarts`)."""

START_UP_DEATHS_MAX = 5
"""A worker that died starting up this many times in a row is not started again: the service
stops, exit 1 (`Restarts`)."""


class Restarts:
    """Whether a dead worker is started again. A worker that dies starting up, again and again,
    meets a fault the parent's checks did not catch: started again every second for ever, it
    never served, and the service never exited, so a supervisor (systemd's Restart=on-failure)
    never saw the failure. A worker that served a while before it died (a crash, kill -9) is
    always started again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started: dict[int, float] = {}
        self._deaths: dict[int, int] = {}

    def started(self, index: int) -> None:
        self._started[index] = self._clock()

    def died(self, index: int) -> bool:
        """Worker `index` died: True to start it again, False when it died starting up
        START_UP_DEATHS_MAX times in a row."""
        starting_up = self._clock() - self._started.get(index, float("-inf")) < START_UP_S
        self._deaths[index] = self._deaths.get(index, 0) + 1 if starting_up else 0
        return self._deaths[index] < START_UP_DEATHS_MAX


def default_workers() -> int:
    """One worker per core this process may run on (a container's cpuset, `taskset`), at most 8
    (each holds its own caches and connection pools)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 8))


def worker_settings(settings: Settings, index: int) -> Settings:
    """What worker `index` runs with: no migrations (the parent ran them), its own metrics
    port, and the start-up repair in worker 0 only."""
    metrics = settings.metrics_listen
    if metrics:
        host, port = split_listen(metrics, "SESSIONLOG_METRICS_LISTEN")
        if port and port + index > MAX_PORT:
            raise ValueError(
                f"SESSIONLOG_METRICS_LISTEN: worker {index} would serve metrics on port {port + index}, past "
                f"{MAX_PORT} (worker i serves them on port {port} + i): give a lower port, or 0 for free ones"
            )
        metrics = join_listen(host, port + index) if port else metrics
    return replace(
        settings, migrate=False, metrics_listen=metrics, repair_on_start=settings.repair_on_start and index == 0
    )


def run_workers(settings: Settings, workers: int) -> int:
    """Migrate, start `workers` processes on `settings.listen`, supervise them until a signal;
    returns the exit status: 0, or 1 when a worker kept dying as it started up (`Restarts`).

    The parent's handlers are in place first, so a stop while it migrates ends it before any
    worker starts (exit 0, "stopped before the workers started"), where it ended it at once."""
    from sessionlog_server.storage.schema import prepare
    from sessionlog_server.transport.credentials import configured_access

    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    processes: list[BaseProcess] = []
    restarts = Restarts()

    def start(index: int) -> None:
        """Start worker `index` in its place in `processes`, unless stopping. The stop signals
        are held across the spawn: the worker is born with them held and releases them once its
        own handlers are in place (`serve`), so a stop forwarded while it starts up waits for
        them and it drains, where it ended at once; and the parent's handler, which forwards to
        `processes`, runs only once the worker is in it."""
        # Starting its resource tracker (the first spawn), multiprocessing unblocks SIGINT and
        # SIGTERM in this thread: have it started before the stop signals are held.
        resource_tracker.ensure_running()
        with stop_signals_held():
            if stopping.is_set():
                return
            process = context.Process(
                target=_worker_main,
                args=(worker_settings(settings, index), index, os.getpid()),
                name=f"sessionlog-worker-{index}",
            )
            process.start()
            restarts.started(index)
            if index < len(processes):
                processes[index] = process
            else:
                processes.append(process)

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        for process in processes:
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    release_stop_signals()  # held since `serve` began (signals.py): one that came is handled now
    worker_settings(settings, workers - 1)  # the last worker's metrics port, checked before the first starts
    configured_access(settings)  # tokens and TLS, as each worker reads them: a mistake stops the parent
    listen = wait_address_free(settings.listen, settings.shutdown_grace_s + 5)
    prepare(settings.db, settings.migrate)
    settings = replace(settings, listen=listen)
    for index in range(workers):
        start(index)
    if not processes:
        log.info("stopped before the workers started")
        return 0
    log.info("workers started", listen=listen, workers=workers, pids=[p.pid for p in processes])
    status = 0
    while not stopping.is_set():
        for index, process in enumerate(processes):
            if process.is_alive() or stopping.is_set():
                continue
            if not restarts.died(index):
                log.error(
                    "worker keeps dying as it starts up; stopping the service",
                    worker=index,
                    exitcode=process.exitcode,
                    deaths=START_UP_DEATHS_MAX,
                    within_s=START_UP_S,
                )
                status = 1
                forward(signal.SIGTERM, None)
                break
            log.warning("worker died; starting it again", worker=index, exitcode=process.exitcode)
            time.sleep(RESTART_BACKOFF_S)
            start(index)
        stopping.wait(0.2)
    for process in processes:
        process.join(timeout=settings.shutdown_grace_s + 30)
        if process.is_alive():
            process.kill()
            process.join()
    # A worker that did not drain (killed, or ended by a signal: a negative code) shows here.
    log.info("workers stopped", exitcodes=[process.exitcode for process in processes])
    return status


def _worker_main(settings: Settings, index: int, parent: int) -> None:
    """A worker: serve with SO_REUSEPORT until a signal, or until the parent is gone."""
    from sessionlog_server.logging import configure
    from sessionlog_server.transport.event_loop import run
    from sessionlog_server.transport.server import serve

    configure(settings.log_level, worker=index)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True, name="parent-watch").start()
    run(serve(settings, reuse_port=True), settings.event_loop)


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent died (kill -9 of the service) stops: it must not keep the port
    serving on its own; it stops as on SIGTERM (in-flight batches commit; open writer streams
    end with SHUTTING_DOWN and keep their leases for their writers' reconnects)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)  # drain, as on a normal stop


__all__ = ["default_workers", "run_workers", "worker_settings"]
