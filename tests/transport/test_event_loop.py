"""`SESSIONLOG_EVENT_LOOP`: the server runs on the loop asked for (uvloop by default, where it
is installed), says which in its `serving` line, and serves the same on either."""

from __future__ import annotations

import json

import pytest

from sessionlog.client import SessionLogClient
from tests.support.events import note, user
from tests.support.servers import ServerProcess


def _serving(server: ServerProcess) -> dict[str, object]:
    lines = [json.loads(line) for line in server.log if line.startswith("{") and '"serving"' in line]
    assert len(lines) == 1, server.log
    record: dict[str, object] = lines[0]
    return record


@pytest.mark.parametrize(("choice", "expected"), [(None, "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_server_runs_on_the_loop_asked_for(fresh_db: str, sid: str, choice: str | None, expected: str) -> None:
    server = ServerProcess(fresh_db, env={"SESSIONLOG_EVENT_LOOP": choice} if choice else None).start()
    try:
        assert _serving(server)["event_loop"] == expected
        with SessionLogClient(server.target, timeout=30) as client:
            with client.writer(sid, create_if_missing=True) as writer:
                # seq 0 is the empty system head the service appends before the first message
                assert writer.append([user("hello")]).result(timeout=30).seqs == [1]
                assert writer.append([note(1), note(2)]).result(timeout=30).seqs == [2, 3]
            assert [e.seq for e in client.read_events(sid)] == [0, 1, 2, 3]
    finally:
        assert server.terminate() == 0
