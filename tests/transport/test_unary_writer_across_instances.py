"""A unary writer whose calls reach more than one instance (or worker) of one database.

A unary writer's calls are independent RPCs: behind a load balancer, or after a reconnect that
lands on another `serve --workers` process, each may reach a different instance. An instance
that cached the session earlier holds a fold and a lease holder that another instance has
since moved on. Whatever it cached, the lease holder's calls must be answered on the log as it
stands: its lease honoured, its header reports decided on the latest header, its appends
planned at the session's real next seq.

Two in-process instances on one database stand for two machines (PostgreSQL) or two workers
(SQLite, `workers=2`: other processes share the file).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog.requests import append_request, with_event_ids
from tests.support import events as ev
from tests.support.servers import ServerThread

H1: dict[str, Any] = {"config": {"provider": "acme", "model": "m-1"}}
H2: dict[str, Any] = {"config": {"provider": "acme", "model": "m-2"}}


@contextmanager
def instances(db: str, **extra: Any) -> Iterator[tuple[SessionLogClient, SessionLogClient]]:
    """Clients of two instances serving one database (`extra`: settings of both)."""
    settings: dict[str, Any] = {"workers": 2, "lease_ttl_ms": 5_000, **extra}
    first, second = ServerThread(db, **settings), ServerThread(db, **settings)
    try:
        with SessionLogClient(first.target) as one, SessionLogClient(second.target) as other:
            yield one, other
    finally:
        first.stop(grace=0.5)
        second.stop(grace=0.5)


@pytest.fixture
def two(fresh_db: str) -> Iterator[tuple[SessionLogClient, SessionLogClient]]:
    """Clients of two instances serving one database."""
    with instances(fresh_db) as clients:
        yield clients


def logged(client: SessionLogClient, sid: str) -> list[tuple[str, Any]]:
    """Each event's type and, for a header, its reason and model."""
    return [
        (e.type, (e.data["reason"], e.data["header"]["config"]["model"]) if e.type == "request/header" else None)
        for e in client.read_events(sid)
    ]


def test_a_lease_granted_on_another_instance_is_honoured_where_an_older_one_was_granted(
    two: tuple[SessionLogClient, SessionLogClient], sid: str
) -> None:
    one, other = two
    one.create_session(sid)
    crashed = other.acquire_lease(sid, writer_id="crashed")  # `other` notes this holder
    other.report_header(sid, crashed, H1)
    other.append(sid, crashed, [ev.user("before the crash")])

    lease = one.acquire_lease(sid, writer_id="next", takeover=True)
    # `other` still believes `crashed` holds the session: the new holder is not fenced out.
    report = other.report_header(sid, lease, H1)
    assert (report.reason, report.appended) == ("resume", True)
    assert other.append(sid, lease, [ev.user("after")]).seqs == [4]
    assert logged(one, sid)[3:] == [("request/header", ("resume", "m-1")), ("user/message", None)]


def test_header_reports_through_either_instance_are_decided_on_the_latest_header(
    two: tuple[SessionLogClient, SessionLogClient], sid: str
) -> None:
    one, other = two
    one.create_session(sid)
    lease = one.acquire_lease(sid, writer_id="w")
    assert one.report_header(sid, lease, H1).reason == "initial"
    assert other.report_header(sid, lease, H1).appended is False  # `other` caches the session
    assert one.report_header(sid, lease, H2).reason == "change"
    # Back to m-1 through `other`, whose fold still ends at the first header: it is a change.
    back = other.report_header(sid, lease, H1)
    assert (back.reason, back.header_seq, back.changed_fields) == ("change", 2, ["model"])
    assert [entry for entry in logged(one, sid) if entry[0] == "request/header"] == [
        ("request/header", ("initial", "m-1")),
        ("request/header", ("change", "m-2")),
        ("request/header", ("change", "m-1")),
    ]


def test_appends_through_either_instance_land_at_the_next_seq(
    two: tuple[SessionLogClient, SessionLogClient], sid: str
) -> None:
    one, other = two
    one.create_session(sid)
    lease = one.acquire_lease(sid, writer_id="w")
    assert other.append(sid, lease, [ev.note(0)]).seqs == [0]  # `other` caches the session
    seqs = []
    for n in range(1, 7):  # alternating: each instance's fold is behind the other's writes
        client = one if n % 2 == 0 else other
        seqs += client.append(sid, lease, [ev.note(n)]).seqs
    assert seqs == [1, 2, 3, 4, 5, 6]
    # The writer's own expectation, right about the log, holds whatever an instance cached.
    one.append(sid, lease, [ev.note(7)])
    assert other.append(sid, lease, [ev.note(8)], expected_next_seq=8).seqs == [8]
    assert [e.data.get("n") for e in other.read_events(sid)] == list(range(9))


def test_a_batch_valid_on_the_log_is_not_refused_by_a_stale_instance(
    two: tuple[SessionLogClient, SessionLogClient], sid: str
) -> None:
    """The instance that granted the lease caches the session; the turn its holder then starts
    through the other instance is not in that cache, and the `turn/end` sent back through the
    first was refused NO_OPEN_TURN (not retryable) on every try, though valid on the log. A
    batch invalid on the log itself is still refused."""
    one, other = two
    one.create_session(sid)
    lease = one.acquire_lease(sid, writer_id="w")  # `one` caches the session, and knows the holder
    assert other.append(sid, lease, [ev.turn_start(1)]).seqs == [0]
    assert one.append(sid, lease, [ev.turn_end(1)]).seqs == [1]
    with pytest.raises(ValidationError) as refused:
        other.append(sid, lease, [ev.turn_end(1)])  # no turn is open on the log either
    assert refused.value.reason == "NO_OPEN_TURN"
    assert [e.type for e in one.read_events(sid)] == ["turn/start", "turn/end"]


def test_takeovers_through_both_instances_at_once_all_take_the_lease(fresh_db: str, sid: str) -> None:
    """Two instances granting at once both read the same epoch (PostgreSQL's READ COMMITTED),
    and the compare-and-set of the later one took nothing: a takeover failed with WRITER_HELD
    "taken by another writer meanwhile", naming nobody, one try in five. It reads the row again
    and takes the lease from that grant, as it would a moment later. (SQLite's writes are one
    at a time: no two grants read the same epoch there.)"""
    if fresh_db.startswith("sqlite"):
        pytest.skip("SQLite serialises writes: grants cannot interleave")
    tries = 100
    with instances(fresh_db) as (one, other):
        one.create_session(sid)
        failures: list[BaseException] = []

        def take_over(client: SessionLogClient) -> None:
            for _ in range(tries):
                try:
                    client.acquire_lease(sid, takeover=True)
                except SessionLogError as exc:
                    failures.append(exc)

        threads = [threading.Thread(target=take_over, args=(client,)) for client in (one, other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        lease = one.get_session(sid).lease
        assert lease is not None and lease.epoch == 2 * tries  # every takeover took it once


def test_acknowledgements_another_instance_gave_are_not_taken_for_a_restored_log(
    two: tuple[SessionLogClient, SessionLogClient], sid: str
) -> None:
    """A writer says where the acknowledgements it got end (`acknowledged_next_seq`), some of
    them another instance's: an instance whose fold is behind them looks at the session's row
    before it refuses the writer as one of a restored database (and releases its lease)."""
    one, other = two
    one.create_session(sid)
    lease = one.acquire_lease(sid, writer_id="w")
    one.append(sid, lease, [ev.note(0)])  # `one` caches the session at next seq 1
    acknowledged = other.append(sid, lease, [ev.note(1), ev.note(2)])
    request = append_request(sid, lease, with_event_ids([ev.note(3)]), None, acknowledged.next_seq)
    assert list(one.stub.AppendEvents(request).seqs) == [3]
    assert [e.data.get("n") for e in one.read_events(sid)] == [0, 1, 2, 3]


def test_an_append_planned_again_on_the_caught_up_log_is_charged_once(fresh_db: str, sid: str) -> None:
    # Planned on `other`'s stale fold, the batch is refused by the commit's fence and planned
    # once more on the log as it stands: the one call spent its events twice, so a batch of
    # seven (of a burst of ten) was refused RATE_LIMITED on its second planning.
    with instances(fresh_db, max_events_per_second=10) as (one, other):
        one.create_session(sid)
        lease = one.acquire_lease(sid, writer_id="w")
        assert other.append(sid, lease, [ev.note(0)]).seqs == [0]  # `other` caches the session
        assert one.append(sid, lease, [ev.note(1)]).seqs == [1]  # and is now behind the log
        batch = [ev.note(n) for n in range(2, 9)]
        assert other.append(sid, lease, batch).seqs == list(range(2, 9))
        assert [e.data.get("n") for e in other.read_events(sid)] == list(range(9))
