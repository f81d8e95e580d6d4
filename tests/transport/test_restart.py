"""Durability across restarts of a real `sessionlog serve` process (issue 2)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import WriterHeld
from sessionlog.requests import CaughtUp
from tests.support.events import note, turn_end, turn_start, user
from tests.support.servers import ServerProcess

HEADER = {"config": {"provider": "acme", "model": "m-1"}}


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


def test_a_writer_goes_on_in_its_lease_across_a_graceful_restart(tmp_path: Path, sid: str) -> None:
    # The writer's stream stays open and idle, mid-turn, on purpose. The service ends it at once
    # when it stops (acknowledging what it has) instead of waiting out the grace period, which
    # is set far beyond `terminate`'s 60 s wait so that waiting would fail the test. It ends it
    # with SHUTTING_DOWN and leaves the lease live: the writer reconnects with its token once the
    # service is back, the start-up repair leaves its open turn alone, and its lease goes on
    # (the same header is not logged again as a `resume`).
    server = ServerProcess(f"sqlite:///{tmp_path / 'g.db'}", env={"SESSIONLOG_SHUTDOWN_GRACE_S": "600"}).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            with client.writer(sid) as writer:
                assert writer.report_header(HEADER).result().reason == "initial"
                assert writer.append([user("go"), turn_start(1)]).result().seqs == [2, 3]  # 1: the system head
                assert server.terminate() == 0
                server.start()
                assert writer.append([turn_end(1)]).result(timeout=60).seqs == [4]
                assert writer.reconnects == 1
                assert writer.report_header(HEADER).result().reason is None
                with pytest.raises(WriterHeld):
                    client.writer(sid)
            events = list(client.read_events(sid))
            assert [e.type for e in events] == [
                "request/header",
                "system/message",
                "user/message",
                "turn/start",
                "turn/end",
            ]
            assert events[-1].data["reason"] == {"kind": "completed"}  # the writer's, not a repair's
            assert client.get_session(sid).lease is None  # closed: given back
        assert server.terminate() == 0
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()


def test_a_subscription_neither_holds_a_graceful_stop_nor_misses_an_event(tmp_path: Path, sid: str) -> None:
    # A dashboard follows a quiet session while the service restarts. A subscription never ends
    # on its own, and the service stopping waited the whole grace period for it (10 s by
    # default; set far beyond `terminate`'s 60 s wait here, so waiting fails the test). It is
    # ended at once with SHUTTING_DOWN, and the client resubscribes from the seq after its last
    # event once the service is back.
    server = ServerProcess(f"sqlite:///{tmp_path / 's.db'}", env={"SESSIONLOG_SHUTDOWN_GRACE_S": "600"}).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, [note(0)])
            subscription = client.subscribe(sid)
            items = iter(subscription)
            assert next(items).seq == 0
            assert next(items) == CaughtUp(1)
            assert server.terminate() == 0
            server.start()
            client.append(sid, lease, [note(1)])
            assert next(items).seq == 1  # no gap, no repeat, no second marker
            subscription.cancel()
        assert server.terminate() == 0
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()


def test_a_subscriber_that_stopped_reading_does_not_hold_a_graceful_stop(tmp_path: Path, sid: str) -> None:
    # A dashboard that stopped reading (busy, or paused in a debugger) while its subscription
    # had megabytes to send: HTTP/2 flow control holds the service's next message, and the
    # subscription, waiting in that send, never saw the stop. The stop waited out its whole
    # grace period (set far beyond `terminate`'s 60 s wait here, so waiting fails the test) and
    # then cut the stream mid-message. Now the stop ends it at once; the client reads what
    # reached it, then resubscribes from the seq after its last event: every event once, in order.
    server = ServerProcess(f"sqlite:///{tmp_path / 'slow.db'}", env={"SESSIONLOG_SHUTDOWN_GRACE_S": "600"}).start()
    pad = "x" * 60_000
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            for start in range(0, 400, 20):  # 24 MB: more than any flow-control window holds
                client.append(
                    sid,
                    lease,
                    [
                        {"type": "test/note", "data": {"n": n, "pad": pad}, "ignorable": True}
                        for n in range(start, start + 20)
                    ],
                )
            resumed: list[int] = []
            subscription = client.subscribe(sid, on_resubscribe=lambda seq, cause: resumed.append(seq))
            items = iter(subscription)
            assert next(items).seq == 0
            time.sleep(1)  # the stream fills the client's window, and the service waits to send more
            assert server.terminate() == 0
            server.start()
            seqs = [0]
            for item in items:
                if isinstance(item, CaughtUp):
                    break
                seqs.append(item.seq)
            assert seqs == list(range(400))
            assert subscription.resubscribes == len(resumed) >= 1 and 0 < resumed[0] < 400  # after a cut
            subscription.cancel()
        assert server.terminate() == 0
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()


def test_a_health_watch_does_not_hold_a_graceful_stop(tmp_path: Path) -> None:
    # Every gRPC client with client-side health checking keeps a health Watch open on each
    # backend; a watch never ends by itself, and the stop waited out its whole grace period for
    # it (600 s here: waiting fails the test). The watch hears NOT_SERVING, then is cut once the
    # service's own calls are done.
    server = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}", env={"SESSIONLOG_SHUTDOWN_GRACE_S": "600"}).start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
            statuses = iter(watch)
            assert next(statuses).status == health_pb2.HealthCheckResponse.SERVING
            assert server.terminate() == 0
            assert next(statuses).status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.RpcError):
                next(statuses)
    finally:
        if server.proc and server.proc.poll() is None:
            server.kill()
