"""A stop signal that comes while `serve --workers N` starts up: each worker drains, as it does
once serving, and exits with status 0 and its `stopped` line.

A worker put its handlers for the stop signals (`STOP_SIGNALS`) in place only once it was
serving: a SIGTERM before that, sent to it or forwarded by the parent (an orchestrator
stopping a service it has just started), ended it at once with the signal's default, without
a drain or a log line, and the parent said "workers stopped" all the same.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from bench.procs import worker_pids
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually


def events(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    """The server's log records (its JSON lines) whose event is `name`."""
    records = [json.loads(line) for line in server.log if line.startswith("{")]
    return [record for record in records if record.get("event") == name]


def starting(tmp_path: Path) -> tuple[ServerProcess, list[int]]:
    """`serve --workers 2` on a SQLite file of its own, returned as soon as both workers exist,
    before either is serving."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'starting.db'}", env={"SESSIONLOG_WORKERS": "2"})
    server.launch()
    assert server.proc is not None
    parent = server.proc.pid
    workers = eventually(lambda: worker_pids(parent), lambda pids: len(pids) == 2, every=0.01)
    # A worker takes far longer to load than this took to see it: it is still starting up.
    assert not events(server, "serving"), server.log
    return server, workers


def test_a_stop_forwarded_while_the_workers_start_lets_each_drain(tmp_path: Path) -> None:
    server, _ = starting(tmp_path)
    assert server.terminate() == 0, server.log
    stopped = eventually(lambda: events(server, "stopped"), lambda found: len(found) == 2)
    assert sorted(record["worker"] for record in stopped) == [0, 1], server.log
    (done,) = eventually(lambda: events(server, "workers stopped"), lambda found: len(found) == 1)
    assert done["exitcodes"] == [0, 0], done


def test_a_stop_sent_to_a_starting_worker_lets_it_drain(tmp_path: Path) -> None:
    """The worker drains and exits 0, and the parent, not stopping, starts it again."""
    server, workers = starting(tmp_path)
    assert server.proc is not None
    try:
        os.kill(workers[0], signal.SIGTERM)
        (died,) = eventually(lambda: events(server, "worker died; starting it again"), lambda found: len(found) == 1)
        assert died["exitcode"] == 0, server.log
        assert [r for r in events(server, "stopped") if r.get("worker") == died["worker"]], server.log
        eventually(lambda: events(server, "serving"), lambda found: len(found) == 2)  # the restarted one too
    finally:
        assert server.terminate() == 0, server.log


def test_a_stop_while_the_parent_migrates_ends_it_cleanly(tmp_path: Path) -> None:
    """Sent as the parent logs its first migration: it ended at once (status -15, no line). It
    now starts no worker and says so, or, should the stop come once they are started, they
    drain; either way with status 0."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'migrating.db'}", env={"SESSIONLOG_WORKERS": "2"})
    server.launch()
    assert server.proc is not None
    eventually(lambda: [line for line in server.log if "Running upgrade" in line], bool, every=0.005)
    assert server.terminate() == 0, server.log
    before = events(server, "stopped before the workers started")
    done = events(server, "workers stopped")
    assert before or (done and done[0]["exitcodes"] == [0, 0]), server.log
