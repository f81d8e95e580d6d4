"""Batches committed just before a kill -9, their answers lost, sent again after the restart with
the seq each had to start at, are answered with the seqs they got (SPEC §7: an append is
idempotent by eventId).

A streaming writer keeps every batch not acknowledged and sends them all again once it has
reconnected, each with its `expected_next_seq` where the sender gave one (`sessionlog import`
and `ingest` always do). A restarted service remembers only the session's latest `RECENT_IDS`
eventIds, so a batch further back than that was planned as new, and its expected seq, behind
the log now, refused it with EXPECTED_SEQ_MISMATCH before its eventIds were looked up: an import
killed with more than ~1,000 events committed and unacknowledged failed, though every one of
them was stored.
"""

from __future__ import annotations

from sessionlog.client import SessionLogClient
from sessionlog_server.service.live import RECENT_IDS
from tests.support.events import note
from tests.support.servers import ServerProcess

BATCH = 300
BATCHES = RECENT_IDS // BATCH + 2  # the first ones fall out of what a restarted service remembers


def batch(index: int) -> list[dict[str, object]]:
    return [note(index * BATCH + k, eventId=f"b{index}-{k}") for k in range(BATCH)]


def test_batches_resent_after_a_restart_are_answered_with_their_seqs(fresh_db: str, sid: str) -> None:
    server = ServerProcess(fresh_db).start()
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid, writer_id="importer")
            first = [client.append(sid, lease, batch(i), expected_next_seq=i * BATCH) for i in range(BATCHES)]
            server.kill()  # the answers above were "lost": the writer sends every batch again
            server.start()
            again = [client.append(sid, lease, batch(i), expected_next_seq=i * BATCH) for i in range(BATCHES)]
            assert [r.seqs for r in again] == [r.seqs for r in first]
            events = list(client.read_events(sid))
        assert [e.event_id for e in events] == [f"b{i}-{k}" for i in range(BATCHES) for k in range(BATCH)]
    finally:
        server.kill()
