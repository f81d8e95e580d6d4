"""`serve --workers 2`: two processes on one address, on SQLite and PostgreSQL.

Writers on separate channels land on either worker; one session is written in turns by
clients on fresh channels (so its cached fold goes stale on one worker while the other
writes, and must catch up); a worker is killed with SIGKILL and started again by the parent;
every acknowledged event is in the log exactly once, seqs contiguous. Then a SIGKILL of the
parent: the workers leave, and a new service starts on the same port.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bench.procs import worker_pids
from sessionlog.client import SessionLogClient
from sessionlog_server.config import Settings
from sessionlog_server.storage.migrate import upgrade
from sessionlog_server.transport.workers import (
    START_UP_DEATHS_MAX,
    START_UP_S,
    Restarts,
    default_workers,
    worker_settings,
)
from tests.support.events import note, turn_end, turn_start
from tests.support.fresh_interpreter import loaded
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually
from tests.transport.test_faults import TurnWriter


def _check_log(client: SessionLogClient, sid: str, acked: dict[str, int]) -> None:
    events = list(client.read_events(sid))
    assert [e.seq for e in events] == list(range(len(events))), "seqs must be contiguous"
    stored = {e.event_id: e.seq for e in events if e.event_id is not None}
    assert len(stored) == sum(1 for e in events if e.event_id is not None), "an eventId is stored twice"
    for event_id, seq in acked.items():
        assert stored.get(event_id) == seq, f"acknowledged {event_id} at {seq} is missing"


def test_each_worker_has_its_own_metrics_port_on_the_same_host() -> None:
    def metrics(listen: str, index: int) -> str:
        return worker_settings(Settings(db="sqlite://", metrics_listen=listen), index).metrics_listen

    assert [metrics("127.0.0.1:9464", i) for i in range(3)] == ["127.0.0.1:9464", "127.0.0.1:9465", "127.0.0.1:9466"]
    assert metrics("[::1]:9464", 1) == "[::1]:9465"
    assert metrics("127.0.0.1:0", 1) == "127.0.0.1:0"  # each picks a free port
    assert metrics("", 1) == ""  # disabled in every worker
    assert worker_settings(Settings(db="sqlite://"), 1).repair_on_start is False


def test_a_metrics_port_past_65535_for_a_worker_is_refused_naming_the_setting() -> None:
    # Worker 1 of `SESSIONLOG_METRICS_LISTEN=127.0.0.1:65535` failed on "'127.0.0.1:65536' is not
    # HOST:PORT", a value nobody set, after worker 0 had started.
    settings = Settings(db="sqlite://", metrics_listen="127.0.0.1:65535")
    assert worker_settings(settings, 0).metrics_listen == "127.0.0.1:65535"
    with pytest.raises(ValueError, match="SESSIONLOG_METRICS_LISTEN: worker 1 would serve metrics on port 65536"):
        worker_settings(settings, 1)


def test_a_worker_that_keeps_dying_as_it_starts_up_is_not_started_again() -> None:
    # It was started again every second for ever: the service never served and never exited.
    now = [0.0]
    restarts = Restarts(clock=lambda: now[0])
    restarts.started(0)
    now[0] = 3600.0
    assert restarts.died(0)  # it served an hour: a crash, started again however often
    for death in range(1, START_UP_DEATHS_MAX + 1):
        restarts.started(0)
        now[0] += START_UP_S / 2
        assert restarts.died(0) is (death < START_UP_DEATHS_MAX), death
    restarts.started(1)
    now[0] += START_UP_S / 2
    assert restarts.died(1)  # each worker counts its own
    restarts.started(1)
    now[0] += START_UP_S * 2
    assert restarts.died(1)  # a worker that came up resets the count:
    for _ in range(START_UP_DEATHS_MAX - 1):
        restarts.started(1)
        now[0] += START_UP_S / 2
        assert restarts.died(1)  # the one death before it no longer counts


def test_with_metrics_port_0_each_worker_names_the_port_it_bound(tmp_path: Path) -> None:
    """Each worker picks a free port of its own; its `serving` line names it (it said
    "127.0.0.1:0" in every worker, so nobody could find the listeners)."""
    env = {"SESSIONLOG_WORKERS": "2", "SESSIONLOG_METRICS_LISTEN": "127.0.0.1:0"}
    server = ServerProcess(f"sqlite:///{tmp_path / 'metrics.db'}", env=env).start()
    try:

        def serving() -> list[dict[str, Any]]:
            return [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]

        lines = eventually(serving, lambda found: len(found) == 2)
        assert sorted(line["worker"] for line in lines) == [0, 1]
        addresses = {line["metrics"] for line in lines}
        assert len(addresses) == 2, lines
        for address in addresses:
            host, _, port = address.rpartition(":")
            assert host == "127.0.0.1" and int(port) > 0, lines
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
                assert response.status == 200
    finally:
        server.terminate()


def test_by_default_one_worker_per_core(tmp_path: Path) -> None:
    """Unset, SESSIONLOG_WORKERS is 0: one process per core (at most 8), as `default_workers`
    says; on a one-core machine that is the single process, with no workers under it."""
    server = ServerProcess(f"sqlite:///{tmp_path / 'default.db'}")
    del server.env["SESSIONLOG_WORKERS"]  # the suite pins one worker (conftest): this test wants the default
    server.start()
    assert server.proc is not None
    expected = default_workers()
    try:
        eventually(lambda: worker_pids(server.proc.pid), lambda pids: len(pids) == (expected if expected > 1 else 0))
        with SessionLogClient(server.target) as client:
            client.create_session(f"dw-{tmp_path.name[-6:]}")
            assert [s.id for s in client.list_sessions()] == [f"dw-{tmp_path.name[-6:]}"]
    finally:
        server.terminate()


def test_two_workers_share_the_address_and_lose_nothing(fresh_db: str, tmp_path: Path) -> None:
    server = ServerProcess(fresh_db, env={"SESSIONLOG_WORKERS": "2"}).start()
    assert server.proc is not None
    parent = server.proc.pid
    try:
        first = eventually(lambda: worker_pids(parent), lambda pids: len(pids) == 2)
        sids = [f"wk-{tmp_path.name[-6:]}-{i}" for i in range(6)]
        writers = [TurnWriter(server.target, sid) for sid in sids]
        for writer in writers:
            writer.start()
        shared = f"wk-{tmp_path.name[-6:]}-shared"
        shared_acked: dict[str, int] = {}
        for turn in range(1, 9):  # a fresh channel each turn: the two workers take turns at random
            with SessionLogClient(server.target) as client:
                if turn == 1:
                    client.create_session(shared)
                lease = client.acquire_lease(shared, writer_id=f"turn-{turn}")
                batch = [
                    dict(e, eventId=f"s-{turn}-{i}")
                    for i, e in enumerate([turn_start(turn), note(turn), turn_end(turn)])
                ]
                shared_acked.update(
                    zip((e["eventId"] for e in batch), client.append(shared, lease, batch).seqs, strict=True)
                )
                client.release_lease(lease)
        eventually(lambda: min(len(w.acked) for w in writers), lambda n: n >= 30)
        os.kill(first[0], signal.SIGKILL)
        again = eventually(lambda: worker_pids(parent), lambda pids: len(pids) == 2 and first[0] not in pids)
        assert first[1] in again
        before = {w.sid: len(w.acked) for w in writers}
        eventually(lambda: all(len(w.acked) > before[w.sid] + 10 for w in writers), lambda ok: ok, timeout=60)
        for writer in writers:
            writer.stop.set()
        for writer in writers:
            writer.join(timeout=60)
            assert not writer.errors, writer.errors
        with SessionLogClient(server.target) as client:
            for writer in writers:
                _check_log(client, writer.sid, writer.acked)
            _check_log(client, shared, shared_acked)
            assert client.stats(shared)["turns"] == 8
        server.kill()  # SIGKILL of the parent: its workers stop on their own
        eventually(lambda: [pid for pid in again if Path(f"/proc/{pid}").exists()], lambda alive: not alive)
        server.start()  # the same port is free again
        with SessionLogClient(server.target) as client:
            _check_log(client, shared, shared_acked)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.terminate()


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_stops_the_service_gracefully(fresh_db: str, sid: str, workers: int) -> None:
    """A terminal or ssh session that goes away sends SIGHUP: its default ended `serve` at once,
    with no drain and no log line (exit 129). It now stops as SIGTERM does, workers included."""
    server = ServerProcess(fresh_db, env={"SESSIONLOG_WORKERS": str(workers)}).start()
    assert server.proc is not None
    try:
        # Each server process serving, so each has a call's worth to drain (a stop while they
        # start up: tests/transport/test_stop_during_start.py).
        eventually(lambda: sum('"serving"' in line for line in server.log), lambda n: n == workers)
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
        assert server.terminate(signal.SIGHUP) == 0
        stops = [line for line in server.log if '"stopped"' in line]
        assert len(stops) == workers, server.log  # each server process drained and said so
    finally:
        if server.proc.poll() is None:
            server.kill()


def test_the_parent_of_several_workers_loads_no_server(tmp_path: Path) -> None:
    """`serve --workers N`'s parent reads the settings, checks tokens and TLS, and prepares the
    database; it serves nothing, so it loads neither the server, the service nor a recorder
    (each worker does): a third of its start-up CPU, on the way to every worker's start. A
    fresh interpreter takes the parent's steps (server_commands.serve, workers.run_workers) on
    a database at head and lists what it loaded."""
    db = f"sqlite:///{tmp_path / 'parent.db'}"
    upgrade(db)
    steps = (
        "from sessionlog.cli import server_commands\n"
        "from sessionlog_server.config import Settings\n"
        "from sessionlog_server.logging import configure\n"
        "from sessionlog_server.storage.schema import prepare\n"
        "from sessionlog_server.transport import event_loop, grpc_core, signals, workers\n"
        "from sessionlog_server.transport.credentials import configured_access\n"
        "with server_commands.startup_errors():\n"
        f"    settings = Settings.from_env(db={db!r}, listen='127.0.0.1:0', workers=2)\n"
        "    configured_access(settings)\n"
        "    prepare(settings.db, settings.migrate)\n"
    )
    served = ["sessionlog_server.transport.server", "sessionlog_server.service.app", "sessionlog_server.storage.sqlite"]
    assert loaded(steps, [*served, "sessionlog_server.storage.postgres", "alembic"]) == []
