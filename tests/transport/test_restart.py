"""Durability across restarts of a real `sessionlog serve` process (issue 2)."""

from __future__ import annotations

from pathlib import Path

from sessionlog.client import SessionLogClient
from tests.support.events import note
from tests.support.servers import ServerProcess


def test_restart_keeps_every_acknowledged_event(fresh_db: str, sid: str) -> None:
    server = ServerProcess(fresh_db).start()
    acknowledged: list[int] = []
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            writer = client.writer(sid)
            for i in range(20):
                acknowledged += writer.append([note(i * 10 + j) for j in range(10)]).result().seqs
        server.kill()  # SIGKILL right after the acks: nothing graceful
        server.start()
        with SessionLogClient(server.target) as client:
            events = list(client.read_events(sid))
            assert [e.seq for e in events] == acknowledged == list(range(200))
            assert [e.data["n"] for e in events] == list(range(200))
            with client.writer(sid, takeover=True) as writer:  # the dead writer's lease is taken over
                assert writer.append([note(999)]).result().seqs == [200]
        assert server.terminate() == 0  # SIGTERM is a clean shutdown
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()


def test_graceful_shutdown_releases_stream_leases(tmp_path: Path, sid: str) -> None:
    # The writer's stream stays open and idle on purpose: the service ends it at once when it
    # stops (acknowledging what it has, releasing the lease) instead of waiting out the grace
    # period, which is set far beyond `terminate`'s 60 s wait so that waiting would fail the test.
    server = ServerProcess(f"sqlite:///{tmp_path / 'g.db'}", env={"SESSIONLOG_SHUTDOWN_GRACE_S": "600"}).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            writer = client.writer(sid, reconnect_attempts=0)
            writer.append([note(0)]).result()
            assert server.terminate() == 0
        server.start()
        with SessionLogClient(server.target) as client:
            assert client.get_session(sid).lease is None  # released at shutdown, not left to expire
            with client.writer(sid) as again:
                assert again.append([note(1)]).result().seqs == [1]
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()
