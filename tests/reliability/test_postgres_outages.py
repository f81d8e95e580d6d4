"""What an operator running on PostgreSQL meets when the database misbehaves: it accepts
connections and never answers (a hung host, a stalled link), stops answering on connections
already open, or is not one sessionlog may write (a standby). The service says so, on one line
at start-up or in its log while it waits, rather than waiting silently or serving what can only
fail. (A database that refuses connections: tests/storage/test_recorder_contract.py.)

The database is reached through a TCP proxy the test controls (`LatencyProxy`, stalled or cut),
never by restarting the PostgreSQL the suite shares.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy.engine import make_url

from sessionlog.client import SessionLogClient, Writer
from sessionlog.requests import AppendResult
from sessionlog_server.service.committer import STALL_WARN_S
from sessionlog_server.storage.migrate import upgrade
from tests.conftest import PG_ADMIN_URL, scratch_pg
from tests.support.events import note
from tests.support.latency_proxy import LatencyProxy
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually

START_GUARD_S = 90.0
"""How long a start-up is waited for before the test calls it hung (a guard, not a measure)."""


def _proxied(url: str) -> LatencyProxy:
    """A proxy (no delay) in front of the PostgreSQL that `url` names."""
    parsed = make_url(url)
    return LatencyProxy(f"{parsed.host}:{parsed.port or 5432}", 0.0)


def _through(proxy: LatencyProxy, url: str) -> str:
    """`url` with its host and port replaced by the proxy's."""
    host, port = proxy.target.rsplit(":", 1)
    return make_url(url).set(host=host, port=int(port)).render_as_string(hide_password=False)


def _refused_start(server: ServerProcess) -> str:
    """The last line `server` printed, having exited before it served (killed if it served)."""
    started = server.launch()
    try:
        with pytest.raises(RuntimeError, match="server exited") as exited:
            started.result(timeout=START_GUARD_S)
    finally:
        server.kill()
    return str(exited.value).strip().splitlines()[-1]


def test_serve_gives_up_on_a_database_that_never_answers_with_one_line(pg_database: str) -> None:
    """A connection attempt to a PostgreSQL that accepts TCP and answers nothing (a hung host, a
    link that drops everything after the handshake) waited forever: `serve` sat at start-up
    with no log line at all, and a running service's new connections hung its reader and
    writer threads the same way. Now an attempt is given up after the connect timeout."""
    with _proxied(pg_database) as proxy:
        proxy.stall()
        last = _refused_start(ServerProcess(_through(proxy, pg_database)))
        assert "sessionlog: error: cannot use the database: connection timeout expired" in last, last


def test_serve_refuses_a_read_only_database_with_one_line() -> None:
    """A URL that names a read-only database (a hot standby, a replica's address by mistake,
    `default_transaction_read_only`) started a service that answered every write with
    STORAGE_UNAVAILABLE ("cannot execute INSERT in a read-only transaction"), which clients
    retry as if it would pass, while reads worked and the health check said SERVING. It is
    refused at start-up, naming the database."""
    with scratch_pg("sessionlog_read_only") as url:
        upgrade(url)
        name = make_url(url).database
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        for migrate in ("true", "false"):
            last = _refused_start(ServerProcess(url, env={"SESSIONLOG_MIGRATE": migrate}))
            assert f"sessionlog: error: the database {url} is read-only" in last, last


@dataclass
class _Stalled:
    """A service whose database stopped answering on its open connection (the proxy stalls it)
    while `waiting`, a writer's append, waits for its commit; `database write waiting` logged."""

    proxy: LatencyProxy
    server: ServerProcess
    client: SessionLogClient
    writer: Writer
    waiting: Future[AppendResult]


@contextlib.contextmanager
def _stalled(pg_database: str, prefix: str) -> Iterator[_Stalled]:
    with _proxied(pg_database) as proxy:
        server = ServerProcess(_through(proxy, pg_database)).start()
        sid = f"{prefix}-{uuid.uuid4().hex[:10]}"
        try:
            with SessionLogClient(server.target) as client:
                writer = client.writer(sid, writer_id="w", create_if_missing=True)
                assert writer.append([note(0, eventId=f"{sid}-0")]).result(timeout=30).seqs == [0]
                proxy.stall()
                waiting = writer.append([note(1, eventId=f"{sid}-1")])
                eventually(lambda: _logged(server, "database write waiting"), bool)
                yield _Stalled(proxy, server, client, writer, waiting)
        finally:
            server.kill()


def test_a_commit_the_database_does_not_answer_is_logged_while_it_waits(pg_database: str) -> None:
    """A database that stops answering on a connection already open (a hung host, a stalled
    link) holds the writer thread in its statement until it answers. The appends wait (their
    clients' deadlines end the unary calls) and nothing was logged, however long it lasted: the
    operator saw a service quietly answering nothing, and its health check said SERVING. The
    wait is logged while it lasts, and its end once the database answers; meanwhile the health
    check says NOT_SERVING (a load balancer sends new writers elsewhere), then SERVING again;
    the append waiting meanwhile is then acknowledged."""
    with _stalled(pg_database, "stall") as stalled:
        client = stalled.client
        assert not stalled.waiting.done()
        eventually(lambda: _health(client), lambda status: status == health_pb2.HealthCheckResponse.NOT_SERVING)
        stalled.proxy.resume()
        assert stalled.waiting.result(timeout=60).seqs == [1]
        answered = eventually(lambda: _logged(stalled.server, "database write answered"), bool)
        assert answered[0]["waited_s"] >= STALL_WARN_S, answered
        eventually(lambda: _health(client), lambda status: status == health_pb2.HealthCheckResponse.SERVING)
        stalled.writer.close()


def test_a_commit_answered_while_the_service_stops_is_logged_as_answered(pg_database: str) -> None:
    """The end of a stall was logged by a check the stop cancels: a write the database answered
    while the service drained left `database write waiting` as the last word on it."""
    with _stalled(pg_database, "stall-stop") as stalled:
        process = stalled.server.proc
        assert process is not None
        process.send_signal(signal.SIGTERM)  # the stop drains: it waits for the write
        time.sleep(1.0)
        stalled.proxy.resume()
        assert stalled.waiting.result(timeout=60).seqs == [1]  # answered, then the stop finished
        assert process.wait(timeout=60) == 0
        answered = _logged(stalled.server, "database write answered")
        assert len(answered) == 1 and answered[0]["waited_s"] >= STALL_WARN_S, stalled.server.log[-10:]


def _health(client: SessionLogClient) -> int:
    """The service's overall health status, as a load balancer's check reads it."""
    reply = health_pb2_grpc.HealthStub(client.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(reply.status)


def _logged(server: ServerProcess, event: str) -> list[dict[str, Any]]:
    """The server's log records of `event` so far."""
    records = [json.loads(line) for line in server.log if line.startswith("{")]
    return [record for record in records if record.get("event") == event]
