"""Several service instances on one PostgreSQL database (SPEC §7, issue 7).

Two `sessionlog serve` processes share one database. Nothing in one process knows what the
other holds in memory, so these tests prove that fencing lives in the commit transaction
(the compare-and-set on writer, epoch and next seq), not in any in-process lock:

- writers on both instances, a subscriber on the *other* instance seeing every event in order;
- a takeover from the other instance: the old writer's next append is refused with ABORTED
  (OWNERSHIP_LOST), and nothing it sends afterwards, through either instance, is stored;
- unary appends racing through both instances against one session while leases are taken
  over back and forth: seqs stay contiguous, every acknowledged event is stored exactly once
  at its acknowledged seq, batches never interleave, and epochs never go backwards in the log
  (once a newer lease has written, no older lease ever writes again).

PostgreSQL only (SQLite is a single-process embedded store), and never skipped: the
`pg_database` fixture fails when PostgreSQL is unreachable.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import (
    ExpectedSeqMismatch,
    OwnershipLost,
    SessionLogError,
    WriterHeld,
)
from sessionlog.core.events import Event
from sessionlog.requests import CaughtUp
from tests.support.events import note
from tests.support.servers import ServerProcess

RACE_SECONDS = 4.0
"""How long the racing writers run (each loop is also bounded in iterations)."""


@pytest.fixture(scope="module")
def instances(pg_database: str) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two service processes on the same PostgreSQL database (started one after the other, so
    the second finds the migrations done)."""
    first = ServerProcess(pg_database).start()
    try:
        second = ServerProcess(pg_database).start()
    except BaseException:
        first.kill()
        raise
    try:
        yield first, second
    finally:
        first.kill()
        second.kill()


def new_sid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def assert_contiguous(events: list[Event]) -> None:
    assert [e.seq for e in events] == list(range(len(events))), "seqs are not contiguous"


def stored_ids(events: list[Event]) -> dict[str, int]:
    """eventId -> seq, failing if an eventId is stored twice."""
    by_id: dict[str, int] = {}
    for event in events:
        if event.event_id is None:
            continue
        assert event.event_id not in by_id, f"{event.event_id} stored twice"
        by_id[event.event_id] = event.seq
    return by_id


def test_writers_on_both_instances_and_a_subscriber_on_the_other(
    instances: tuple[ServerProcess, ServerProcess],
) -> None:
    one, two = instances
    sids = [new_sid("both") for _ in range(4)]
    acked: dict[str, dict[str, int]] = {sid: {} for sid in sids}
    seen: list[Event] = []
    with SessionLogClient(one.target) as c1, SessionLogClient(two.target) as c2:
        c1.create_session(sids[0])
        watch = c2.subscribe(sids[0])  # instance 2 follows what instance 1 writes

        def follow() -> None:
            for item in watch:
                if isinstance(item, CaughtUp):
                    continue
                seen.append(item)
                if len(seen) >= 60:
                    return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        writers = [
            (c1 if i % 2 == 0 else c2).writer(sid, writer_id=f"w{i}", create_if_missing=True)
            for i, sid in enumerate(sids)
        ]
        for round_ in range(15):
            futures = []
            for writer, sid in zip(writers, sids, strict=True):
                batch = [note(round_ * 4 + k, eventId=f"{sid}-{round_}-{k}") for k in range(4)]
                futures.append((sid, batch, writer.append(batch)))
            for sid, batch, future in futures:
                result = future.result(timeout=30)
                acked[sid].update(zip((e["eventId"] for e in batch), result.seqs, strict=True))
        for writer in writers:
            writer.close()
        follower.join(timeout=15)
        watch.cancel()
        for sid in sids:
            for client in (c1, c2):  # both instances read the same log
                events = list(client.read_events(sid))
                assert_contiguous(events)
                assert stored_ids(events) == acked[sid]
        assert [e.seq for e in seen] == list(range(60)), "the subscriber on the other instance missed events"
        assert [e.event_id for e in seen] == [e.event_id for e in c1.read_events(sids[0])]


def test_takeover_from_the_other_instance_fences_the_old_writer(
    instances: tuple[ServerProcess, ServerProcess],
) -> None:
    one, two = instances
    sid = new_sid("takeover")
    with SessionLogClient(one.target) as c1, SessionLogClient(two.target) as c2:
        old = c1.writer(sid, writer_id="A", create_if_missing=True)
        old_batches = [[note(i * 3 + k, eventId=f"A-{i}-{k}") for k in range(3)] for i in range(5)]
        old_acked: dict[str, int] = {}
        for batch in old_batches:
            result = old.append(batch).result(timeout=30)
            old_acked.update(zip((e["eventId"] for e in batch), result.seqs, strict=True))

        new = c2.writer(sid, writer_id="B", takeover=True)
        assert new.lease.epoch > old.lease.epoch
        assert new.next_seq == len(old_acked)

        # Instance 1 still believes A holds the session: only the commit's fence can refuse it.
        with pytest.raises(OwnershipLost) as refused:
            old.append([note(100, eventId="A-late-stream")]).result(timeout=30)
        assert refused.value.reason == "OWNERSHIP_LOST"
        assert refused.value.grpc_code.name == "ABORTED"
        for client in (c1, c2):  # nothing A sends afterwards lands, through either instance
            for attempt in range(3):
                with pytest.raises(OwnershipLost):
                    client.append(sid, old.lease, [note(200 + attempt, eventId=f"A-late-{client.target}-{attempt}")])
        old.close()

        new_acked: dict[str, int] = {}
        for i in range(5):
            batch = [note(300 + i * 2 + k, eventId=f"B-{i}-{k}") for k in range(2)]
            result = new.append(batch).result(timeout=30)
            new_acked.update(zip((e["eventId"] for e in batch), result.seqs, strict=True))
        new.close()

        for client in (c1, c2):
            events = list(client.read_events(sid))
            assert_contiguous(events)
            by_id = stored_ids(events)
            assert by_id == {**old_acked, **new_acked}, "a late write of A landed, or an acknowledged one is missing"
            assert not any(eid.startswith("A-late") for eid in by_id)
            assert max(old_acked.values()) < min(new_acked.values())


@dataclass
class Racer:
    """One writer thread: takes the lease over on its instance, appends unary batches."""

    name: str
    target: str
    sid: str
    deadline: float
    acked: list[tuple[int, str, list[int]]] = field(default_factory=list)  # (epoch, batch key, seqs)
    refusals: dict[str, int] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)

    def run(self) -> None:
        try:
            with SessionLogClient(self.target, timeout=30) as client:
                for lease_no in range(200):  # bounded in count and in time
                    if time.monotonic() > self.deadline:
                        return
                    self._one_lease(client, lease_no)
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def _one_lease(self, client: SessionLogClient, lease_no: int) -> None:
        try:
            lease = client.acquire_lease(self.sid, writer_id=f"{self.name}-{lease_no}", takeover=True)
        except WriterHeld:
            self._refused("WRITER_HELD")
            return
        for batch_no in range(4):
            key = f"{self.name}-{lease.epoch}-{batch_no}"
            batch = [
                {
                    "type": "test/note",
                    "ignorable": True,
                    "data": {"n": k, "epoch": lease.epoch},
                    "eventId": f"{key}-{k}",
                }
                for k in range(3)
            ]
            try:
                result = client.append(self.sid, lease, batch)
            except (OwnershipLost, ExpectedSeqMismatch) as exc:
                self._refused(exc.reason)
                return
            self.acked.append((lease.epoch, key, result.seqs))

    def _refused(self, reason: str) -> None:
        self.refusals[reason] = self.refusals.get(reason, 0) + 1


def test_racing_appends_through_both_instances_are_fenced(
    instances: tuple[ServerProcess, ServerProcess],
) -> None:
    one, two = instances
    sid = new_sid("race")
    with SessionLogClient(one.target) as client:
        client.create_session(sid)
    deadline = time.monotonic() + RACE_SECONDS
    racers = [Racer(f"r{i}", (one if i % 2 == 0 else two).target, sid, deadline) for i in range(4)]
    threads = [threading.Thread(target=r.run, daemon=True) for r in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=RACE_SECONDS + 60)
    assert not any(thread.is_alive() for thread in threads), "a racer did not stop"
    for racer in racers:
        assert not racer.errors, racer.errors

    acked = [batch for racer in racers for batch in racer.acked]
    refusals = sum(sum(r.refusals.values()) for r in racers)
    assert len(acked) >= 8, "too few batches were acknowledged to prove anything"
    assert refusals >= 1, "the racers never fenced each other out: the race did not happen"
    assert {r.target for r in racers if r.acked} == {one.target, two.target}, "one instance never wrote"
    print(f"race: {len(acked)} batches acknowledged, {refusals} refused", {r.name: r.refusals for r in racers})

    with SessionLogClient(one.target) as c1, SessionLogClient(two.target) as c2:
        events = list(c1.read_events(sid))
        assert [e.event_id for e in events] == [e.event_id for e in c2.read_events(sid)]
    assert_contiguous(events)
    by_id = stored_ids(events)
    for _epoch, key, seqs in acked:  # every acknowledged event, once, where it was acknowledged
        assert [by_id.get(f"{key}-{k}") for k in range(3)] == seqs, f"batch {key} is not stored as acknowledged"
        assert seqs == list(range(seqs[0], seqs[0] + 3)), f"batch {key} interleaved with another"
    # Every stored batch is whole and contiguous, and epochs never go backwards in the log.
    batches = [events[i : i + 3] for i in range(0, len(events), 3)]
    assert len(events) % 3 == 0
    epochs = []
    for batch in batches:
        keys = {e.event_id.rsplit("-", 1)[0] for e in batch if e.event_id}
        assert len(keys) == 1, f"a stored batch mixes writers: {keys}"
        epochs.append(batch[0].data["epoch"])
    assert epochs == sorted(epochs), "an older lease wrote after a newer one"
    assert len(by_id) == 3 * len(acked), "an unacknowledged batch was stored"


def test_a_stale_writer_cannot_reacquire_silently(instances: tuple[ServerProcess, ServerProcess]) -> None:
    """After a takeover on instance 2, the old holder's renew and release on instance 1 fail or
    do nothing: the new holder keeps the lease and can go on appending."""
    one, two = instances
    sid = new_sid("stale")
    with SessionLogClient(one.target) as c1, SessionLogClient(two.target) as c2:
        c1.create_session(sid)
        old = c1.acquire_lease(sid, writer_id="old")
        c1.append(sid, old, [note(0, eventId="old-0")])
        new = c2.acquire_lease(sid, writer_id="new", takeover=True)
        with pytest.raises(OwnershipLost):
            c1.renew_lease(old)
        try:
            c1.release_lease(old)  # must not release the new holder's lease
        except SessionLogError as exc:
            assert isinstance(exc, OwnershipLost), exc
        session = c1.get_session(sid)
        assert session.lease is not None and session.lease.writer_id == "new"
        assert c2.append(sid, new, [note(1, eventId="new-1")]).seqs == [1]
        assert [e.event_id for e in c1.read_events(sid)] == ["old-0", "new-1"]
