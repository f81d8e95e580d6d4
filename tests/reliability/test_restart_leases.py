"""A service stopped for longer than a lease's time to live keeps its writers' open turns
(service/app.py `_repair_at_start`, recorder `extend_lapsed_leases`).

The leases of open writer streams outlive a graceful stop, so their writers reconnect into the
same lease (docs/leases.md). A restart that took longer than the lease's time to live found
those leases lapsed: the start-up repair completed their open turns as interrupted at once, and
each writer, reconnecting all the while, found its lease gone (OWNERSHIP_LOST). A lease that
lapsed while no service ran now gets one more time to live at the start; the sweep completes
the turns of the writers that do not come back.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionlog.client import SessionLogClient
from tests.conftest import scratch_pg
from tests.support.events import turn_end, turn_start, user
from tests.support.servers import ServerProcess
from tests.support.waiting import eventually

TTL_MS = 2500
"""Long enough for a writer to reconnect within once the service is back (its reconnect
policy waits up to 0.5 s between attempts, and the service takes a while to start)."""
DOWN_S = 3.5
"""How long the service stays down: more than the lease's time to live."""


@pytest.fixture()
def own_db(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A database no other server uses (`serve` migrates it): on the PostgreSQL database the
    tests share, another test's server, up while this one was down, swept the lapsed leases and
    completed the turns first, as another instance on one database does (its writers reconnect
    to a live instance, within the lease's time)."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'own.db'}"
        return
    with scratch_pg("sessionlog_restart") as url:
        yield url


def test_a_turn_outlives_a_restart_longer_than_its_lease(own_db: str, sid: str) -> None:
    server = ServerProcess(own_db, env={"SESSIONLOG_LEASE_TTL_MS": str(TTL_MS)}).start()
    gone = f"{sid}-gone"
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            client.create_session(gone)
            writer = client.writer(sid)
            writer.append([user("hi"), turn_start(1)]).result(timeout=30)
            # A writer that never comes back: its lease lapses while the service is down too.
            lease = client.acquire_lease(gone)
            client.append(gone, lease, [user("hi"), turn_start(1)])
            assert server.terminate(signal.SIGTERM) == 0  # a kill -9 leaves the leases as they are too
            time.sleep(DOWN_S)
            server.start()
            # The writer reconnects into its lease: its turn ends as it ends it.
            assert writer.append([turn_end(1)]).result(timeout=60).seqs == [3]
            writer.close()
            ends = [e.data["reason"]["kind"] for e in client.read_events(sid) if e.type == "turn/end"]
            assert ends == ["completed"]
            # The other's turn is completed as interrupted once its extended lease lapses.
            interrupted = eventually(
                lambda: [e.data["reason"]["kind"] for e in client.read_events(gone) if e.type == "turn/end"],
                lambda kinds: kinds == ["interrupted"],
                timeout=30,
            )
            assert interrupted == ["interrupted"]
        assert any("lapsed while the service was down" in line for line in server.log)
    finally:
        server.kill()
