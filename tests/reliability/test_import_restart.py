"""`import` and `ingest` ride out a service killed (SIGKILL) and restarted while they open a
writer (cli/writers.py).

An import opens one streaming writer per session it writes (the main one, then each fork); an
open writer reconnects by itself, but the open was not tried again. A kill -9 that fell while
the import created or forked its next session and opened its writer (a fork's writer loads the
inherited prefix first: a window of a few hundred ms per session) ended the import half done
with TRANSPORT_ERROR; run again within the lease's time, the import found the lease held by its
own lost open (WRITER_HELD).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sessionlog.cli.transfer_commands import append_planned
from sessionlog.cli.writers import command_writer_id, open_writer
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import WriterHeld
from sessionlog.core.events import NewEvent
from tests.support.events import note
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually

DOWN_S = 1.0
"""How long the service stays down before it is started again."""


def planned(count: int) -> list[NewEvent]:
    return [NewEvent.from_json({**note(n), "eventId": f"imported-{n}"}) for n in range(count)]


def refuses(target: str) -> bool:
    """Whether nothing listens at `target` any more (a killed service's workers leave within
    its shutdown grace)."""
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def restarted_later(server: ServerProcess) -> threading.Thread:
    """Start the (killed) server again after `DOWN_S`, in the background."""

    def restart() -> None:
        time.sleep(DOWN_S)
        server.start()

    thread = threading.Thread(target=restart, daemon=True, name="restart")
    thread.start()
    return thread


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_import_whose_writer_opens_while_the_service_restarts_completes(
    fresh_db: str, sid: str, workers: str
) -> None:
    server = ServerProcess(fresh_db, env={"SESSIONLOG_WORKERS": workers}).start()
    restart: threading.Thread | None = None
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)  # the import created it; the service dies before its writer opens
            server.kill()
            eventually(lambda: refuses(server.target), bool)
            restart = restarted_later(server)
            append_planned(client, sid, planned(700), first_seq=0)
            events = list(client.read_events(sid))
            assert [e.event_id for e in events] == [f"imported-{n}" for n in range(700)]
            session = client.get_session(sid)
            assert session.lease is None, "the import's lease was not given back"
    finally:
        if restart is not None:
            restart.join(timeout=60)  # killed only once restarted: a failure must leave no server
        server.kill()


def test_an_open_whose_answer_was_lost_is_taken_over_by_its_own_command(fresh_db: str, sid: str) -> None:
    """The grant of an open whose answer never came (the service killed after its commit) holds
    the lease under the command's writer id: the next attempt takes it over, where it found it
    held until it lapsed. A lease another writer holds is still refused."""
    server = ServerProcess(fresh_db).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            own = command_writer_id()
            client.acquire_lease(sid, writer_id=own)  # the lost grant: its token never reached us
            writer = open_writer(client, sid, own)
            writer.append([note(0)]).result(timeout=30)
            writer.close()
            other = client.acquire_lease(sid, writer_id="someone-else")
            with pytest.raises(WriterHeld):
                open_writer(client, sid, own)
            client.release_lease(other)
    finally:
        server.kill()
