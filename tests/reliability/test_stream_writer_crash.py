"""A streaming writer killed mid-turn ends in the same repair as a unary one (SPEC §8).

The writer is a real process holding a real writer stream; it is killed with SIGKILL inside a
turn (a tool call started, no result). Nobody resumes and the server is not restarted: once
the dead writer's lease lapses, the service itself must write the closers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from sessionlog.client import SessionLogClient
from tests.support.servers import ROOT, ServerThread

TTL_MS = 1_000

WRITER = textwrap.dedent(
    """
    import sys, time
    from sessionlog.client import SessionLogClient
    from tests.support.events import assistant, step_start, tool_call, turn_start, user

    target, sid = sys.argv[1], sys.argv[2]
    with SessionLogClient(target) as client:
        writer = client.writer(sid, writer_id="doomed", create_if_missing=True)
        writer.append([turn_start(1), user("run it"), step_start(1, 1)]).result()
        writer.append([assistant(1, 1, calls=(("c1", "bash"), ("c2", "read")))]).result()
        writer.append([tool_call(1, 1, "c1", "bash")]).result()
        print("ready", flush=True)
        time.sleep(600)
    """
)


def doomed_writer(target: str, sid: str) -> subprocess.Popen[bytes]:
    """A writer process holding `sid`'s stream inside a turn (a tool call started, no result)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, target, sid],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


@pytest.fixture
def short_lease_server(db_url: str) -> Iterator[ServerThread]:
    running = ServerThread(db_url, lease_ttl_ms=TTL_MS)
    yield running
    running.stop()


def test_a_killed_streaming_writer_is_repaired_when_its_lease_lapses(
    short_lease_server: ServerThread, sid: str
) -> None:
    proc = doomed_writer(short_lease_server.target, sid)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with SessionLogClient(short_lease_server.target) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.get_session(sid).open_turn:
            time.sleep(0.2)
        info = client.get_session(sid)
        assert not info.open_turn, "the dead streaming writer's turn was never repaired"
        events = list(client.read_events(sid))
    tail = events[-4:]
    assert [e.type for e in tail] == ["tool/result", "tool/result", "step/end", "turn/end"]
    first, second = (e.data for e in tail[:2])
    assert first["message"]["toolCallId"] == "c1" and first["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert second["message"]["toolCallId"] == "c2" and second["error"]["code"] == "TOOL_NOT_STARTED"
    assert tail[-1].data["reason"] == {"kind": "interrupted"}
    assert all(e.time == tail[0].time for e in tail)  # repair takes the last event's time
    assert not any(e.type == "session/end-seed" for e in events)  # no resume happened


def test_a_silent_streaming_writer_loses_its_lease_and_is_repaired(db_url: str, sid: str) -> None:
    """A writer whose host went silent (here its process stopped, so nothing answers on its
    connection, as after a power loss or a dropped network: no FIN) held its lease for as long as
    the service saw its stream open, which a quiet stream gave it no reason to doubt: the lease
    was renewed, and the turn never repaired. The service's PINGs (`client_ping_ms`) end that
    stream; the lease lapses and the sweep repairs the turn."""
    running = ServerThread(db_url, lease_ttl_ms=TTL_MS, client_ping_ms=500)
    proc = doomed_writer(running.target, sid)
    try:
        proc.send_signal(signal.SIGSTOP)
        with SessionLogClient(running.target) as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and client.get_session(sid).open_turn:
                time.sleep(0.2)
            assert not client.get_session(sid).open_turn, "the silent writer's lease never lapsed"
            assert list(client.read_events(sid))[-1].data["reason"] == {"kind": "interrupted"}
    finally:
        proc.kill()
        proc.wait(timeout=30)
        running.stop()
