"""Planning runs no further ahead of the commits than `commit_backlog_bytes` (service/backlog.py).

With the writer thread held, a stream's batches are read in and planned until the backlog is
over its bound, and no further: the rest wait in the transport. Once the writer goes on, every
batch commits, in order, and is acknowledged with its seqs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sessionlog.client import SessionLogClient
from sessionlog_server.service.backlog import BACKLOG_EVENT_BYTES
from tests.support.servers import ServerThread, hold_writer, planned_next_seq
from tests.support.waiting import eventually

BOUND = 64 * 1024
TEXT = "x" * 20_000
BATCHES = 12


@pytest.fixture
def bounded_backlog(fresh_db: str) -> Iterator[ServerThread]:
    with ServerThread(fresh_db, commit_backlog_bytes=BOUND) as server:
        yield server


def _note(n: int) -> dict[str, Any]:
    return {"type": "test/note", "data": {"n": n, "text": TEXT}, "ignorable": True}


def test_planning_stops_at_the_backlog_bound_until_the_commits_go_on(bounded_backlog: ServerThread, sid: str) -> None:
    server = bounded_backlog
    per_batch = len(TEXT) + BACKLOG_EVENT_BYTES  # and a few bytes of JSON around the text
    admitted = BOUND // per_batch + 1  # a batch is admitted while the backlog is at or under the bound
    assert admitted == 4
    with SessionLogClient(server.target, timeout=30) as client:
        client.create_session(sid)
        with client.writer(sid) as writer:
            gate = hold_writer(server)
            try:
                futures = [writer.append([_note(n)]) for n in range(BATCHES)]
                eventually(lambda: planned_next_seq(server, sid), lambda planned: planned == admitted, timeout=10)
                time.sleep(0.3)  # the transport holds the rest: nothing more is planned meanwhile
                assert planned_next_seq(server, sid) == admitted
                assert server.service.committer.backlog.bytes > BOUND
                assert (server.service.metrics.registry.get_sample_value("sessionlog_backlog_waits_total") or 0) >= 1
                assert not any(f.done() for f in futures)
            finally:
                gate.set()
            assert [f.result(timeout=30).seqs for f in futures] == [[n] for n in range(BATCHES)]
        assert [e.data["n"] for e in client.read_events(sid)] == list(range(BATCHES))
    assert server.service.committer.backlog.bytes == 0


def test_a_batch_larger_than_the_bound_is_admitted(bounded_backlog: ServerThread, sid: str) -> None:
    """The bound delays batches, it never refuses one: a batch over it alone gets in when the
    backlog is empty, and the next one once that batch is settled."""
    with SessionLogClient(bounded_backlog.target, timeout=30) as client:
        client.create_session(sid)
        with client.writer(sid) as writer:
            big = [_note(n) for n in range(5)]  # about 105 KiB against a 64 KiB bound
            first, second = writer.append(big), writer.append(big)
            assert (first.result(timeout=30).seqs, second.result(timeout=30).seqs) == ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    assert bounded_backlog.service.committer.backlog.bytes == 0
