"""The service accepts the clients' keepalive pings (`sessionlog.keepalive`) on quiet streams and
idle connections alike.

gRPC's default server policy takes a PING that comes sooner than 5 minutes after the last one,
while the server sends no data, as a strike, and after two strikes answers the third with GOAWAY
("too_many_pings"), closing the connection: a writer stream quiet between turns was cut and
reconnected every ~40 s (the TypeScript client's, pinging every 10 s, was, as were
subscriptions), and an idle connection was closed the same way. The transport is the same on
every backend, so this runs on SQLite only.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc

from sessionlog.client import SessionLogClient
from sessionlog.keepalive import KEEPALIVE_TIME_MS
from tests.support.events import note
from tests.support.servers import ServerThread

QUIET_S = 5 * KEEPALIVE_TIME_MS / 1000
"""Five ping intervals: gRPC's default policy sends GOAWAY at the fourth PING."""


class ConnectivityLog:
    """Every connectivity state a channel reports, from the moment it is watched."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.states: list[grpc.ChannelConnectivity] = []
        self._lock = threading.Lock()
        channel.subscribe(self._record, try_to_connect=False)

    def _record(self, state: grpc.ChannelConnectivity) -> None:
        with self._lock:
            self.states.append(state)

    def seen(self) -> list[grpc.ChannelConnectivity]:
        with self._lock:
            return list(self.states)


def test_a_quiet_writer_and_an_idle_connection_outlive_many_pings(tmp_path: Path, sid: str) -> None:
    server = ServerThread(f"sqlite:///{tmp_path / 'pings.db'}")
    try:
        with SessionLogClient(server.target) as writing, SessionLogClient(server.target) as idle:
            writer = writing.writer(sid, create_if_missing=True)
            assert writer.append([note(0)]).result(timeout=30).seqs == [0]
            idle.get_session(sid)  # connected; then no call at all while it waits
            watched = [ConnectivityLog(writing.channel), ConnectivityLog(idle.channel)]
            time.sleep(QUIET_S)
            for log in watched:
                assert log.seen() == [grpc.ChannelConnectivity.READY], "the connection was closed under the client"
            assert writer.reconnects == 0
            assert writer.append([note(1)]).result(timeout=30).seqs == [1]
            writer.close()
    finally:
        server.stop()
