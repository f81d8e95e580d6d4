"""What a server that runs for weeks keeps of the sessions it served: no more than its bounds.

A service serves new sessions all the time (each agent run is one, each candidate plan a fork),
reads them for a while and never again. Whatever it remembers per session, per writer or per
page must be capped (and the cap documented), else it grows with every session ever served
until the process is restarted. Each test here serves many more sessions than the cap and
counts what the server holds afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sessionlog.client import SessionLogClient
from tests.support.events import system, user
from tests.support.servers import ServerThread

CACHE = 4
"""The session cache of the servers here (`session_cache_size`): far fewer than they serve."""
SESSIONS = 5 * CACHE


@pytest.fixture
def small_cache_server(db_url: str) -> Iterator[ServerThread]:
    with ServerThread(db_url, session_cache_size=CACHE) as server:
        yield server


def test_the_origins_it_remembers_are_bounded_by_the_session_cache(small_cache_server: ServerThread) -> None:
    """Every session looked up left its origin (parent and cut) in the reader, never dropped:
    a service that served a million sessions kept a million entries."""
    run = uuid.uuid4().hex[:8]
    with SessionLogClient(small_cache_server.target) as client:
        for n in range(SESSIONS):
            sid = f"o-{run}-{n}"
            client.create_session(sid)
            with client.writer(sid) as writer:
                writer.append([system("s"), user(f"hello {n}")]).result()
            fork = client.fork(sid, 1, f"{sid}-f")
            client.model_history(fork.id)
        reader = small_cache_server.service.reader
        assert reader.origins_kept <= CACHE
        # A fork whose parent's origin was dropped long ago still reads its inherited prefix.
        first = f"o-{run}-0-f"
        assert [m["content"] for m in client.model_history(first)] == ["s", "hello 0"]
        assert [e.seq for e in client.read_events(first)] == [0, 1, 2]
