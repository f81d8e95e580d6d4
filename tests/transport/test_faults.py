"""Fault injection with real processes (issue 4): killed harnesses, a killed service, racing resumes.

The restart count of the service-kill test is `SESSIONLOG_FAULT_RESTARTS` (default 8, which keeps
the suite within its time budget; the soak smoke test kills the service too, and a longer run is
`SESSIONLOG_FAULT_RESTARTS=50 .venv/bin/pytest tests/transport/test_faults.py`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from sessionlog.client import SessionLogClient, Writer
from sessionlog.core.errors import SessionLogError, WriterHeld
from tests.support.events import note, turn_end, turn_start
from tests.support.servers import ROOT, ServerProcess, ServerThread
from tests.support.waiting import eventually, retrying

RESTARTS = int(os.environ.get("SESSIONLOG_FAULT_RESTARTS", "8"))


def test_killed_harness_is_repaired_exactly_on_resume(server: ServerThread, sid: str) -> None:
    harness = subprocess.Popen(
        [sys.executable, "-m", "tests.support.harness", server.target, sid],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert harness.stdout and harness.stdout.readline().strip() == "ready"
    finally:
        harness.kill()  # SIGKILL between the tool's start and its result
        harness.wait(timeout=10)
    resume = [sys.executable, "-m", "sessionlog", "--server", server.target, "resume", sid]
    resumer = eventually(  # another process resumes once the dead writer's stream is gone
        lambda: subprocess.run(resume, cwd=ROOT, capture_output=True, text=True, timeout=60),
        lambda done: done.returncode == 0 or "WRITER_HELD" not in done.stderr,
        timeout=15,
    )
    assert resumer.returncode == 0, resumer.stderr
    with SessionLogClient(server.target) as client:
        events = list(client.read_events(sid))
    assert [e.type for e in events[6:]] == ["tool/result", "tool/result", "step/end", "turn/end", "session/end-seed"]
    unknown, not_started, step_end, turn_end_event, seed = events[6:]
    assert unknown.data["turn"] == 1 and unknown.data["step"] == 1
    assert unknown.data["message"]["toolCallId"] == "call-ls"
    assert unknown.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN" and unknown.source_event_seqs == (5,)
    assert unknown.surface_op == "append" and unknown.data["message"]["isError"] is True
    assert "Do not retry blindly" in unknown.data["message"]["content"][0]["text"]
    assert not_started.data["message"]["toolCallId"] == "call-rm"
    assert not_started.data["error"]["code"] == "TOOL_NOT_STARTED" and not_started.source_event_seqs == ()
    assert step_end.data == {"turn": 1, "step": 1}
    assert turn_end_event.data == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert seed.data == {}
    assert {e.time for e in events[6:10]} == {events[5].time}


def test_racing_resumes_exactly_one_gets_the_lease(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
    cmd = [sys.executable, "-m", "sessionlog", "--server", server.target, "resume", sid, "--keep"]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    assert any("WRITER_HELD" in err for _, err in results)


class TurnWriter(threading.Thread):
    """Writes complete turns of ignorable notes to one session, riding out server restarts."""

    def __init__(self, target: str, sid: str) -> None:
        super().__init__(daemon=True)
        self.target, self.sid = target, sid
        self.acked: dict[str, int] = {}  # eventId -> seq, for every acknowledged event
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        turn = 0
        with SessionLogClient(self.target) as client:
            writer = self._open(client)
            while not self.stop.is_set():
                turn += 1
                batches = [
                    [turn_start(turn)],
                    *[[note(turn * 100 + i) for i in range(5)] for _ in range(3)],
                    [turn_end(turn)],
                ]
                for batch in batches:
                    events = [dict(e, eventId=f"{self.sid}-{turn}-{len(self.acked)}-{i}") for i, e in enumerate(batch)]
                    try:
                        result = writer.append(events).result(timeout=60)
                    except SessionLogError as exc:
                        self.errors.append(exc)
                        return
                    self.acked.update(zip((e["eventId"] for e in events), result.seqs, strict=True))
            writer.close()

    def _open(self, client: SessionLogClient) -> Writer:
        return retrying(
            lambda: client.writer(self.sid, writer_id=f"w-{self.sid}", create_if_missing=True, reconnect_attempts=200),
            SessionLogError,
            timeout=60,
        )


def wait_for_progress(writers: list[TurnWriter]) -> None:
    """Until every writer has had a batch acknowledged since now (or one has failed): a restart
    then always lands while writers are busy, however slow the machine is."""
    before = [len(w.acked) for w in writers]
    eventually(
        lambda: [(len(w.acked), bool(w.errors)) for w in writers],
        lambda now: all(count > then or failed for (count, failed), then in zip(now, before, strict=True)),
        timeout=120,
    )


def test_killed_service_loses_no_acknowledged_event(fresh_db: str, tmp_path: Path) -> None:
    # The default lease (30 s) outlives a restart, so writers reconnect to their own lease and
    # finish their turns; nothing is repaired under a writer that is coming back.
    server = ServerProcess(fresh_db).start()
    sids = [f"kill-{tmp_path.name[-6:]}-{i}" for i in range(16)]
    writers = [TurnWriter(server.target, sid) for sid in sids]
    try:
        for writer in writers:
            writer.start()
        for _ in range(RESTARTS):
            wait_for_progress(writers)
            server.kill()
            server.start()
        wait_for_progress(writers)
        for writer in writers:
            writer.stop.set()
        for writer in writers:
            writer.join(timeout=120)
        for writer in writers:
            assert not writer.errors, writer.errors
        # Leave turns open with no writer coming back, kill: start-up repair must close them.
        with SessionLogClient(server.target) as client:
            for writer in writers[:4]:
                lease = client.acquire_lease(writer.sid)
                last_turn = max(e.data["turn"] for e in client.read_events(writer.sid) if e.type == "turn/start")
                client.append(writer.sid, lease, [turn_start(last_turn + 1)])
                client.release_lease(lease)
        server.kill()
        server.start()
        with SessionLogClient(server.target) as client:
            for writer in writers[:4]:  # start-up repair runs in the background after serving starts
                eventually(lambda sid=writer.sid: client.get_session(sid).open_turn, lambda open_turn: not open_turn)
            for writer in writers:
                events = list(client.read_events(writer.sid))
                assert [e.seq for e in events] == list(range(len(events))), "seqs must be contiguous"
                by_id = {}
                for event in events:
                    if event.event_id is not None:
                        assert event.event_id not in by_id, f"{event.event_id} stored twice"
                        by_id[event.event_id] = event.seq
                for event_id, seq in writer.acked.items():
                    assert by_id.get(event_id) == seq, f"acknowledged {event_id} at {seq} is missing"
                assert not client.get_session(writer.sid).open_turn, f"{writer.sid} has an open turn"
                assert len(writer.acked) > 0
    finally:
        for writer in writers:
            writer.stop.set()
        server.kill()


def test_writer_refused_after_race_sees_holder(server: ServerThread, sid: str) -> None:
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        with client.writer(sid, writer_id="one"):
            try:
                client.writer(sid, writer_id="two")
            except WriterHeld as exc:
                assert exc.metadata["holder"] == "one"
            else:
                raise AssertionError("a second writer was admitted")
