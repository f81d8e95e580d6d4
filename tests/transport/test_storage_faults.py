"""The database failing under a running service (a full disk): what writers, metrics and the log see.

A full disk is SQLite's own limit on the size of the file (`PRAGMA max_page_count`), set on
the connections that write: a commit that needs the file to grow fails with SQLITE_FULL,
"database or disk is full", as on a disk with no room left, while writes that fit in the
pages the file has (leases) go on, as they did on a real full disk.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import event
from structlog.testing import capture_logs

from sessionlog.base import NO_RETRY
from sessionlog.client import SessionLogClient, Writer
from sessionlog.core.errors import Unavailable
from tests.support.events import note
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

ANSWER_WITHIN_S = 30.0
BIG = "x" * 1_000_000
"""A payload that needs new pages in the file."""
NO_LIMIT = 4294967294
"""SQLite's default `max_page_count`."""


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(f"sqlite:///{tmp_path / 'full.db'}") as server:
        yield server


class FullDisk:
    """While `full`, no connection of the server that writes may grow the file: the one the
    writer thread keeps (set on that thread, where it is used) and any it checks out after."""

    def __init__(self, server: ServerThread) -> None:
        self.server = server
        self.full = False
        event.listen(server.service.recorder.write_engine, "checkout", self._on_checkout)

    def _on_checkout(self, connection: Any, _record: Any, _proxy: Any) -> None:
        connection.execute(f"PRAGMA max_page_count = {1 if self.full else NO_LIMIT}")  # 1: as big as it is

    def fill(self) -> None:
        self.full = True
        commits = self.server.service.recorder._commits
        self.server.call(
            self.server.service.committer.run_in_writer(
                lambda: commits._connection().execute("PRAGMA max_page_count = 1")
            )
        )

    def free(self) -> None:
        self.full = False
        commits = self.server.service.recorder._commits
        self.server.call(
            self.server.service.committer.run_in_writer(
                lambda: commits._connection().execute(f"PRAGMA max_page_count = {NO_LIMIT}")
            )
        )


def reconnected(writer: Writer, pending: Future[Any], within_s: float = ANSWER_WITHIN_S) -> None:
    """Wait until the writer reconnected once (its stream was ended by the failure), or its
    pending append is answered."""
    deadline = time.monotonic() + within_s
    while writer.reconnects < 1 and not pending.done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_streaming_writer_rides_out_a_full_disk_in_its_own_lease(sqlite_server: ServerThread, sid: str) -> None:
    # The service ends the stream with STORAGE_UNAVAILABLE and the writer reconnects to re-send.
    # The service gave the lease back as for any error it reports, so the reconnect got a fresh
    # one and the writer failed with OWNERSHIP_LOST ("had another writer"): there was none.
    disk = FullDisk(sqlite_server)
    with SessionLogClient(sqlite_server.target) as client:
        client.create_session(sid)
        with client.writer(sid) as writer:
            assert writer.append([note(0)]).result(ANSWER_WITHIN_S).seqs == [0]
            token = writer.lease.token
            disk.fill()
            big = writer.append([note(1, data={"n": 1, "text": BIG})])
            reconnected(writer, big)
            disk.free()
            assert big.result(ANSWER_WITHIN_S).seqs == [1]
            assert writer.lease.token == token
        assert [e.data["n"] for e in client.read_events(sid)] == [0, 1]


def test_a_batch_the_full_disk_refused_is_counted_as_refused_not_as_committed(
    sqlite_server: ServerThread, sid: str
) -> None:
    # `sessionlog_batches_refused_total{reason}` counted only what was refused before the
    # commit; a full disk showed nowhere in the metrics, and its commits' latencies were
    # observed in `sessionlog_commit_latency_seconds` ("submission to durable commit").
    metrics = sqlite_server.service.metrics.registry
    disk = FullDisk(sqlite_server)
    with SessionLogClient(sqlite_server.target, retry=NO_RETRY) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        client.append(sid, lease, [note(0)])
        disk.fill()
        with pytest.raises(Unavailable) as refused:
            client.append(sid, lease, [note(1, data={"n": 1, "text": BIG})])
        assert refused.value.reason == "STORAGE_UNAVAILABLE" and "disk is full" in refused.value.message
        disk.free()
        client.append(sid, lease, [note(1, data={"n": 1, "text": BIG})])
    assert metrics.get_sample_value("sessionlog_batches_refused_total", {"reason": "STORAGE_UNAVAILABLE"}) == 1
    assert metrics.get_sample_value("sessionlog_batches_appended_total") == 2
    assert metrics.get_sample_value("sessionlog_commit_latency_seconds_count") == 2


def test_the_log_says_why_the_database_refused_a_commit(sqlite_server: ServerThread, sid: str) -> None:
    # The call's line said `status: UNAVAILABLE` and nothing else, and no line said what the
    # database answered: an operator could not tell a full disk from a lost connection.
    disk = FullDisk(sqlite_server)
    with SessionLogClient(sqlite_server.target, retry=NO_RETRY) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        disk.fill()
        with capture_logs() as logs:
            with pytest.raises(Unavailable):
                client.append(sid, lease, [note(0, data={"n": 0, "text": BIG})])
            # The call's line is written once its answer has gone out.
            calls = eventually(
                lambda: [(e["method"], e["status"], e.get("reason")) for e in logs if e["event"] == "rpc"],
                bool,
            )
    assert calls == [("AppendEvents", "UNAVAILABLE", "STORAGE_UNAVAILABLE")]
    [failed] = [e for e in logs if e["event"] == "commit failed"]
    assert failed["log_level"] == "warning" and failed["reason"] == "STORAGE_UNAVAILABLE"
    assert "database or disk is full" in failed["error"] and failed["batches"] == 1


def test_a_database_file_deleted_while_serving_is_refused_not_written(sqlite_server: ServerThread, sid: str) -> None:
    # SQLite goes on writing to the file it has open: appends after `rm` were acknowledged,
    # and with the next start every one of them (and all that came before) was gone.
    database = Path(sqlite_server.settings.db.removeprefix("sqlite:///"))
    with SessionLogClient(sqlite_server.target, retry=NO_RETRY) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        assert client.append(sid, lease, [note(0)]).seqs == [0]
        for file in database.parent.glob(f"{database.name}*"):
            file.unlink()
        with pytest.raises(Unavailable) as refused:
            client.append(sid, lease, [note(1)])
        assert refused.value.reason == "STORAGE_UNAVAILABLE"
        assert f"the database file {database} was deleted or replaced" in refused.value.message
        with pytest.raises(Unavailable):
            client.create_session(f"{sid}-2")
        # Every write is refused until a restart: the health service says so, for the service
        # and overall, where it stayed SERVING (a load balancer kept sending writes to it).
        health = health_pb2_grpc.HealthStub(client.channel)
        for service in ("sessionlog.v1.SessionService", ""):
            eventually(
                lambda service=service: health.Check(health_pb2.HealthCheckRequest(service=service)).status,
                lambda status: status == health_pb2.HealthCheckResponse.NOT_SERVING,
            )


def test_a_full_disk_leaves_the_service_serving(sqlite_server: ServerThread, sid: str) -> None:
    """A database that fails for a while is not lost storage: reads go on and writes are
    retried, so the status stays SERVING."""
    disk = FullDisk(sqlite_server)
    with SessionLogClient(sqlite_server.target, retry=NO_RETRY) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        disk.fill()
        with pytest.raises(Unavailable):
            client.append(sid, lease, [note(0, data={"n": 0, "text": BIG})])
        time.sleep(2.5)  # past two of the health watch's looks at the storage
        reply = health_pb2_grpc.HealthStub(client.channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        disk.free()
