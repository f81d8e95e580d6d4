"""The recorder contract: one suite, run against every backend through the storage factory.

As eventsourcing's persistence tests do, `RecorderContract` states what any `EventRecorder`
must do and says nothing about SQL; each backend's class only says how to open a recorder
(`open_recorder`, the factory the service uses, on a migrated database). The service and gRPC
are not involved: this is storage tested from below, so a backend that breaks a rule fails
here with the rule's name, not somewhere behind a server.
"""

from __future__ import annotations

import os
import resource
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from sessionlog.core import jsonvalue
from sessionlog.core.errors import (
    AlreadyExists,
    ExpectedSeqMismatch,
    LimitExceeded,
    NotFound,
    OwnershipLost,
    Unavailable,
    ValidationError,
    WriterHeld,
)
from sessionlog.core.events import APPEND, Event, Replace
from sessionlog_server.storage.factory import open_recorder
from sessionlog_server.storage.migrate import upgrade
from sessionlog_server.storage.recorder import EventRecorder
from sessionlog_server.storage.records import EventIdsStored, PendingBatch, SessionRecord, StoredSnapshot
from tests.support.records import new_session, pending_batch
from tests.support.waiting import eventually

TTL = 10_000
NOW = 1_000_000
BLOB_THRESHOLD = 64


def session(sid: str, namespace: str = "ns", *, create_time: int = NOW, **fields: Any) -> SessionRecord:
    return new_session(sid, namespace, create_time=create_time, **fields)


def note(seq: int, data: dict[str, Any] | None = None, **fields: Any) -> Event:
    return Event(seq, NOW + seq, "test/note", data if data is not None else {"n": seq}, ignorable=True, **fields)


def batch(lease: SessionRecord, events: list[Event], **options: Any) -> PendingBatch:
    """A batch as the append planner hands it over: data as stored text, long strings as blobs."""
    return pending_batch(lease, events, lease_expires_at=NOW + TTL, blob_threshold=BLOB_THRESHOLD, **options)


AWKWARD_JSON = '{"z":1,"a":[123456789012345678901234567890,1.50,"é\\u2028😀"]}'


def awkward_events() -> list[Event]:
    """Events whose every column holds something a driver could get wrong: big numbers, key
    order, escapes, quotes and braces in ids and types, a NUL in data, NULL and set optional
    columns side by side."""
    return [
        note(0, jsonvalue.loads(AWKWARD_JSON), event_id='e0 "{a,b}" \\ NULL é'),
        Event(1, NOW + 1, "user/message", {"message": {"role": "user", "content": "x" * 500}}, surface_op=APPEND),
        note(2, {"nul": "a\x00b"}, source_event_seqs=(0, 1)),
        Event(3, NOW + 3, 'test/{"odd",type}', {}, surface_op=Replace(0, 1), event_id="e3"),
    ]


class RecorderContract:
    """What every recorder does. A backend's test class sets `recorder` (through the factory)."""

    recorder: EventRecorder
    data_type_sql: str
    """The backend's SQL for an event's stored column type and text (one parameter: the session)."""
    metadata_type_sql: str
    """The backend's SQL for a session's metadata column type and text (one parameter: the session)."""

    @pytest.fixture
    def sid(self) -> str:
        return f"c-{uuid.uuid4().hex[:12]}"

    def writer(self, sid: str, writer: str = "w1", **fields: Any) -> SessionRecord:
        """A new session held by `writer`."""
        self.recorder.create_session(session(sid, **fields))
        return self.recorder.acquire_lease(sid, writer, takeover=False, now=NOW, ttl_ms=TTL, token_hash=f"h-{writer}")

    # --- sessions -------------------------------------------------------------------------

    def test_a_session_reads_back_as_created_and_its_id_is_taken(self, sid: str) -> None:
        created = session(sid, cwd="/w", metadata={"k": [1, "二"]})
        self.recorder.create_session(created)
        assert self.recorder.get_session(sid) == created
        with pytest.raises(AlreadyExists) as taken:
            self.recorder.create_session(session(sid))
        assert taken.value.reason == "SESSION_EXISTS"
        with pytest.raises(NotFound) as missing:
            self.recorder.get_session(sid + "-none")
        assert missing.value.reason == "SESSION_NOT_FOUND"

    def test_session_metadata_is_stored_and_read_as_its_exact_text(self, sid: str) -> None:
        text = '{"z":-0.0,"a":1e308,"one":1.0,"h":1E+2,"big":123456789012345678901234567890,"u":"é😀\\u00e9" }'
        self.recorder.create_session(session(sid, metadata=jsonvalue.loads(text), metadata_text=text))
        self.recorder.create_session(session(f"{sid}-plain", parent_id=sid, metadata={"k": 1.0}))
        read = self.recorder.get_session(sid)
        assert (read.metadata_text, read.metadata) == (text, jsonvalue.loads(text))
        listed = self.recorder.list_sessions("ns", 10, parent_id=sid)
        assert [(s.metadata_text, s.metadata) for s in listed] == [('{"k":1.0}', {"k": 1.0})]  # serialised once
        with self.recorder.read_engine.connect() as conn:
            kind, stored = conn.exec_driver_sql(self.metadata_type_sql, (sid,)).one()
        assert (kind, stored) == ("text", text)

    def test_sessions_list_in_pages_per_namespace_and_parent(self, sid: str) -> None:
        namespace = f"ns-{sid}"
        for index in range(5):
            self.recorder.create_session(session(f"{sid}-{index}", namespace, create_time=NOW + index % 2))
        self.recorder.create_session(session(f"{sid}-other", f"{namespace}-b"))
        self.recorder.create_session(session(f"{sid}-fork", namespace, create_time=NOW + 9, parent_id=f"{sid}-0"))
        first = self.recorder.list_sessions(namespace, 3)
        rest = self.recorder.list_sessions(namespace, 10, after=(first[-1].create_time, first[-1].id))
        ids = [s.id for s in first + rest]
        assert ids == [f"{sid}-{i}" for i in (0, 2, 4, 1, 3)] + [f"{sid}-fork"]  # by (create_time, id)
        assert [s.id for s in self.recorder.list_sessions(namespace, 10, parent_id=f"{sid}-0")] == [f"{sid}-fork"]
        with pytest.raises(LimitExceeded) as over:  # the namespace holds 6: a quota of 6 is full
            self.recorder.create_session(session(f"{sid}-7", namespace), quota=6)
        assert over.value.reason == "SESSION_QUOTA_EXCEEDED" and over.value.metadata["limit"] == "6"
        self.recorder.create_session(session(f"{sid}-7", namespace), quota=7)

    def test_a_fork_is_created_with_its_own_first_events_in_one_commit(self, sid: str) -> None:
        self.recorder.create_session(session(sid))
        child = session(f"{sid}-child", parent_id=sid, fork_seq=4, next_seq=7, last_time=NOW)
        seed = [Event(5, NOW, "session/end-seed", {"inherited": True}), note(6)]
        self.recorder.create_session(child, seed)
        assert self.recorder.get_session(child.id).parent_id == sid
        assert self.recorder.read_events(child.id, 0, None, 10) == seed  # only its own events

    # --- leases -----------------------------------------------------------------------------

    def test_a_lease_bumps_the_epoch_and_a_live_one_is_refused_to_another_writer(self, sid: str) -> None:
        held = self.writer(sid, "w1")
        assert (held.writer_id, held.epoch, held.lease_expires_at) == ("w1", 1, NOW + TTL)
        assert held.lease_token_hash == "h-w1"
        for writer in ("w2", "w1"):  # the writer id is a label: naming the holder takes nothing
            with pytest.raises(WriterHeld) as refused:
                self.recorder.acquire_lease(sid, writer, takeover=False, now=NOW + 1, ttl_ms=TTL, token_hash="h-x")
            assert refused.value.metadata["holder"] == "w1"
            assert refused.value.metadata["expires_at"] == str(NOW + TTL)
            assert "h-w1" not in str(refused.value) + repr(refused.value.metadata)
        again = self.recorder.acquire_lease(
            sid, "w1", takeover=False, now=NOW + 2, ttl_ms=TTL, token_hash="h-new", presented_hashes=["h-x", "h-w1"]
        )
        # The holder reconnecting (it presents its token) fences its old connection, keeps its token.
        assert (again.epoch, again.lease_token_hash) == (2, "h-w1")
        taken = self.recorder.acquire_lease(sid, "w2", takeover=True, now=NOW + 3, ttl_ms=TTL, token_hash="h-w2")
        assert (taken.writer_id, taken.epoch, taken.lease_token_hash) == ("w2", 3, "h-w2")
        expired = self.recorder.acquire_lease(
            sid, "w3", takeover=False, now=NOW + 3 + TTL, ttl_ms=TTL, token_hash="h-w3"
        )
        assert (expired.writer_id, expired.epoch) == ("w3", 4)

    def test_renew_and_release_need_the_current_token_and_epoch(self, sid: str) -> None:
        held = self.writer(sid)
        renewed = self.recorder.renew_lease(sid, "h-w1", held.epoch, now=NOW + 5, ttl_ms=TTL)
        assert renewed.lease_expires_at == NOW + 5 + TTL
        with pytest.raises(OwnershipLost):
            self.recorder.renew_lease(sid, "w1", held.epoch, now=NOW + 6, ttl_ms=TTL)  # a writer id is no token
        self.recorder.acquire_lease(sid, "w2", takeover=True, now=NOW + 6, ttl_ms=TTL, token_hash="h-w2")
        with pytest.raises(OwnershipLost):
            self.recorder.renew_lease(sid, "h-w1", held.epoch, now=NOW + 7, ttl_ms=TTL)
        assert self.recorder.release_lease(sid, "h-w1", held.epoch) is False
        assert self.recorder.release_lease(sid, "h-w2", held.epoch) is False  # the token, at its epoch
        assert self.recorder.release_lease(sid, "h-w2", held.epoch + 1) is True
        released = self.recorder.get_session(sid)
        assert released.writer_id is None and released.lease_token_hash is None

    def test_many_leases_are_renewed_in_one_go_and_lost_ones_are_named(self, sid: str) -> None:
        first, second = self.writer(sid), self.writer(f"{sid}-b")
        self.recorder.acquire_lease(second.id, "w2", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w2")
        held = self.recorder.renew_leases(
            [(first.id, "h-w1", first.epoch), (second.id, "h-w1", second.epoch)], now=NOW + 9, ttl_ms=TTL
        )
        assert held == [True, False]  # the second was taken over: its old token renews nothing
        assert self.recorder.get_session(first.id).lease_expires_at == NOW + 9 + TTL
        assert self.recorder.get_session(second.id).lease_expires_at == NOW + 1 + TTL
        third = self.writer(f"{sid}-c")
        leases = [(first.id, "h-w1", first.epoch), (third.id, "h-w1", third.epoch)]
        assert self.recorder.renew_leases(leases, now=NOW + 20, ttl_ms=TTL) == [True, True]  # all held
        for lease in (first, third):
            assert self.recorder.get_session(lease.id).lease_expires_at == NOW + 20 + TTL
        assert self.recorder.get_session(second.id).lease_expires_at == NOW + 1 + TTL
        assert self.recorder.renew_leases([], now=NOW + 30, ttl_ms=TTL) == []

    # --- appends ----------------------------------------------------------------------------

    def test_a_committed_batch_reads_back_exactly(self, sid: str) -> None:
        lease = self.writer(sid)
        events = awkward_events()
        for event in events:  # one event a commit: on PostgreSQL, rows of parameters
            assert self.recorder.commit_batches([batch(lease, [event])]) == [None]
        stored = self.recorder.read_events(sid, 0, None, 10)
        assert stored == events
        assert jsonvalue.dumps(stored[0].data) == jsonvalue.dumps(jsonvalue.loads(AWKWARD_JSON))  # key order, big ints
        assert list(stored[0].data) == ["z", "a"]
        assert self.recorder.get_session(sid).next_seq == len(events)

    def test_a_group_of_many_sessions_reads_back_exactly(self, sid: str) -> None:
        # Many sessions in one group: on PostgreSQL a group this large travels as one array
        # per column, so quotes, braces, backslashes, NULLs and non-ASCII text must survive
        # that form as they do rows of parameters.
        leases = [self.writer(f"{sid}-{index}") for index in range(6)]
        events = awkward_events()
        assert self.recorder.commit_batches([batch(lease, events) for lease in leases]) == [None] * 6
        for lease in leases:
            assert self.recorder.read_events(lease.id, 0, None, 10) == events
            assert self.recorder.get_session(lease.id).next_seq == len(events)

    def test_a_fenced_batch_writes_nothing(self, sid: str) -> None:
        lease = self.writer(sid)
        assert self.recorder.commit_batches([batch(lease, [note(0)])]) == [None]
        (wrong_seq,) = self.recorder.commit_batches([batch(lease, [note(5)], expected=5)])
        assert isinstance(wrong_seq, ExpectedSeqMismatch) and wrong_seq.metadata["next_seq"] == "1"
        self.recorder.acquire_lease(sid, "w2", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w2")
        (stale,) = self.recorder.commit_batches([batch(lease, [note(1)])])
        assert isinstance(stale, OwnershipLost)
        assert stale.message.endswith("now epoch 2, writer 'w2'; reopen the writer")
        assert [e.seq for e in self.recorder.read_events(sid, 0, None, 10)] == [0]
        assert self.recorder.get_session(sid).next_seq == 1
        assert self.recorder.release_lease(sid, "h-w2", 2)
        (released,) = self.recorder.commit_batches([batch(lease, [note(1)])])
        assert isinstance(released, OwnershipLost)
        assert released.message.endswith("now epoch 2, the lease released; reopen the writer")  # not "writer None"

    def test_a_group_commit_fences_each_session_on_its_own(self, sid: str) -> None:
        good = self.writer(sid)
        other = self.writer(f"{sid}-b")
        self.recorder.acquire_lease(other.id, "w9", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w9")
        results = self.recorder.commit_batches(
            [batch(good, [note(0)]), batch(other, [note(0)]), batch(good, [note(1), note(2)])]
        )
        assert results[0] is None and isinstance(results[1], OwnershipLost) and results[2] is None
        assert [e.seq for e in self.recorder.read_events(sid, 0, None, 10)] == [0, 1, 2]
        assert self.recorder.read_events(other.id, 0, None, 10) == []

    def test_open_turn_is_the_last_committed_batch_s_and_a_fenced_batch_leaves_it(self, sid: str) -> None:
        # open_turn decides which sessions are repaired after a crash (`sessions_to_repair`): in
        # one group, a turn that opens and closes, one that opens, one fenced out; then one that
        # stays open and closes.
        closes, opens, fenced = self.writer(sid), self.writer(f"{sid}-b"), self.writer(f"{sid}-c")
        self.recorder.acquire_lease(fenced.id, "w9", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w9")
        results = self.recorder.commit_batches(
            [
                batch(closes, [note(0)], open_turn=True, open_turn_before=False),
                batch(opens, [note(0)], open_turn=True, open_turn_before=False),
                batch(fenced, [note(0)], open_turn=True, open_turn_before=False),
                batch(closes, [note(1)], open_turn=False, open_turn_before=True),
            ]
        )
        assert results[:2] == [None, None] and isinstance(results[2], OwnershipLost) and results[3] is None
        assert [self.recorder.get_session(s).open_turn for s in (sid, f"{sid}-b", f"{sid}-c")] == [False, True, False]
        assert self.recorder.commit_batches([batch(opens, [note(1)], open_turn=True)]) == [None]
        assert self.recorder.get_session(opens.id).open_turn
        assert self.recorder.commit_batches([batch(opens, [note(2)], open_turn=False, open_turn_before=True)]) == [None]
        assert not self.recorder.get_session(opens.id).open_turn

    def test_a_row_whose_open_turn_disagrees_with_the_log_takes_the_batch_s(self, sid: str) -> None:
        # SQLite fences a batch that neither opens nor closes a turn without writing open_turn
        # (`EventRecorder._fence`). Rows that disagree with their batch (as a restore or an older
        # release could leave them) still take its value, in a group and one by one: left
        # closed, an open turn was never repaired after a crash.
        opened, closed = self.writer(sid, open_turn=True), self.writer(f"{sid}-b")
        alone = self.writer(f"{sid}-c", open_turn=True)
        fenced = self.writer(f"{sid}-d")
        self.recorder.acquire_lease(fenced.id, "w9", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w9")
        results = self.recorder.commit_batches(
            [
                batch(opened, [note(0)], open_turn=False),
                batch(closed, [note(0)], open_turn=True),
                batch(fenced, [note(0)], open_turn=True),
            ]
        )
        assert results[:2] == [None, None] and isinstance(results[2], OwnershipLost)
        # Not contiguous (the second expects seq 2, the first ends at 1): fenced batch by batch.
        results = self.recorder.commit_batches(
            [batch(alone, [note(0)], open_turn=False), batch(alone, [note(2)], open_turn=True, expected=2)]
        )
        assert results[0] is None and results[1] is not None
        states = [self.recorder.get_session(s).open_turn for s in (sid, f"{sid}-b", f"{sid}-c", f"{sid}-d")]
        assert states == [False, True, False, False]

    def test_a_group_larger_than_one_statement_commits_whole(self, sid: str) -> None:
        # 9,000 events: more than one PostgreSQL statement could carry as one parameter per
        # value (65,535); the group is still one statement (one array per column), and a
        # fenced-out session in it still writes nothing.
        first, second, fenced = self.writer(sid), self.writer(f"{sid}-b"), self.writer(f"{sid}-c")
        self.recorder.acquire_lease(fenced.id, "w9", takeover=True, now=NOW + 1, ttl_ms=TTL, token_hash="h-w9")
        events = [note(i) for i in range(3000)]
        results = self.recorder.commit_batches([batch(first, events), batch(fenced, events), batch(second, events)])
        assert results[0] is None and isinstance(results[1], OwnershipLost) and results[2] is None
        for session_id in (sid, f"{sid}-b"):
            assert [e.seq for e in self.recorder.read_events(session_id, 0, None, 5000)] == list(range(3000))
            assert self.recorder.get_session(session_id).next_seq == 3000
        assert self.recorder.read_events(fenced.id, 0, None, 10) == []

    @pytest.mark.parametrize("others", [0, 1, 5], ids=["alone", "small-group", "large-group"])
    def test_a_stored_event_id_fails_its_own_batch_only_and_names_its_seq(self, sid: str, others: int) -> None:
        # An eventId the service could not vouch for from memory (`verify_ids`) that the session
        # stores already: the unique index refuses the group, which is committed again with the
        # ids looked up: the batch holding the stored id writes nothing and names its seq, the
        # others commit. Unvouched ids that are new commit in the group like any other.
        goods = [self.writer(f"{sid}-{index}") for index in range(others)]
        retried = self.writer(sid)
        assert self.recorder.commit_batches([batch(retried, [note(0, event_id="old"), note(1, event_id="x")])]) == [
            None
        ]
        first = [batch(good, [note(0, event_id="new")]) for good in goods]
        for pending in first:
            pending.verify_ids = ["new"]
        assert self.recorder.commit_batches(first) == [None] * others
        again = batch(retried, [note(2, event_id="fresh"), note(3, event_id="old")])
        again.verify_ids = ["fresh", "old"]
        results = self.recorder.commit_batches([*(batch(good, [note(1)]) for good in goods), again])
        assert results[:-1] == [None] * others
        assert isinstance(results[-1], EventIdsStored) and results[-1].found == {"old": 0}
        assert [e.event_id for e in self.recorder.read_events(sid, 0, None, 10)] == ["old", "x"]  # nothing of it
        for good in goods:
            assert [e.event_id for e in self.recorder.read_events(good.id, 0, None, 10)] == ["new", None]
        follow = batch(retried, [note(2, event_id="fresh")])
        follow.verify_ids = ["fresh"]
        assert self.recorder.commit_batches([follow]) == [None]

    @pytest.mark.parametrize("good_sessions", [1, 5], ids=["small-group", "large-group"])
    def test_a_value_the_database_cannot_hold_fails_its_own_batch_only(self, sid: str, good_sessions: int) -> None:
        goods = [self.writer(f"{sid}-{index}") for index in range(good_sessions)]
        bad = self.writer(f"{sid}-b")
        unstorable = Event(0, 2**70, "test/note", {}, ignorable=True)  # a time beyond 64 bits
        results = self.recorder.commit_batches([*(batch(good, [note(0)]) for good in goods), batch(bad, [unstorable])])
        assert results[:-1] == [None] * good_sessions
        assert isinstance(results[-1], ValidationError) and results[-1].reason == "UNSTORABLE_VALUE"
        for good in goods:
            assert [e.seq for e in self.recorder.read_events(good.id, 0, None, 10)] == [0]
        assert self.recorder.get_session(bad.id).next_seq == 0  # rolled back: nothing of it stayed
        assert self.recorder.commit_batches([batch(bad, [note(0)])]) == [None]  # and the writer goes on

    def test_event_data_is_stored_as_text(self, sid: str) -> None:
        # The insert binds UTF-8 bytes and makes them TEXT in SQL: the column must hold text.
        lease = self.writer(sid)
        self.recorder.commit_batches([batch(lease, [note(0, {"é": "😀"})])])
        with self.recorder.read_engine.connect() as conn:
            kind, text = conn.exec_driver_sql(self.data_type_sql, (sid,)).one()
        assert (kind, text) == ("text", '{"é":"😀"}')

    def test_open_turns_without_a_live_writer_are_found_for_repair(self, sid: str) -> None:
        lease = self.writer(sid)
        self.recorder.commit_batches([batch(lease, [note(0)], open_turn=True)])
        held = {s.id for s in self.recorder.sessions_to_repair(NOW)}
        lapsed = {s.id for s in self.recorder.sessions_to_repair(NOW + TTL)}
        assert sid not in held and sid in lapsed

    # --- reads ------------------------------------------------------------------------------

    def test_reads_by_range_by_seqs_and_by_event_id(self, sid: str) -> None:
        lease = self.writer(sid)
        events = [note(seq, event_id=f"id-{seq}") for seq in range(6)]
        self.recorder.commit_batches([batch(lease, events)])
        assert [e.seq for e in self.recorder.read_events(sid, 2, 4, 10)] == [2, 3, 4]
        assert [e.seq for e in self.recorder.read_events(sid, 1, None, 2)] == [1, 2]
        assert [e.seq for e in self.recorder.read_events_at(sid, [5, 0, 3])] == [0, 3, 5]
        assert self.recorder.find_event_ids(sid, ["id-4", "id-9"]) == {"id-4": 4}
        assert self.recorder.recent_event_ids(sid, 2) == [("id-5", 5), ("id-4", 4)]

    def test_snapshots_are_kept_once_per_seq_and_read_newest_first(self, sid: str) -> None:
        self.recorder.create_session(session(sid))
        self.recorder.save_snapshots([StoredSnapshot(sid, seq, 2, f"state-{seq}".encode()) for seq in (3, 7, 12)])
        self.recorder.save_snapshots([StoredSnapshot(sid, 7, 2, b"again")])  # already there: kept, no error
        found = self.recorder.snapshots_before(sid, 10, 2, 5)
        assert [(s.seq, s.state) for s in found] == [(7, b"state-7"), (3, b"state-3")]

    def test_a_snapshot_replaces_one_of_older_fold_code_at_its_seq_only(self, sid: str) -> None:
        # After a fold-version bump a stale snapshot held its seq: the new one was not stored,
        # and every load there folded from further back.
        self.recorder.create_session(session(sid))
        self.recorder.save_snapshots([StoredSnapshot(sid, 3, 1, b"old-3"), StoredSnapshot(sid, 5, 3, b"newer-5")])
        self.recorder.save_snapshots([StoredSnapshot(sid, 3, 2, b"new-3"), StoredSnapshot(sid, 5, 2, b"new-5")])
        assert [(s.seq, s.state) for s in self.recorder.snapshots_before(sid, 10, 2, 5)] == [(3, b"new-3")]
        assert [(s.seq, s.state) for s in self.recorder.snapshots_before(sid, 10, 3, 5)] == [(5, b"newer-5")]
        assert self.recorder.snapshots_before(sid, 10, 1, 5) == []

    def test_a_discarded_snapshot_makes_room_for_the_next_at_its_seq_unless_it_changed(self, sid: str) -> None:
        # A damaged one of the current fold code was kept as equal: loads ignored it forever.
        self.recorder.create_session(session(sid))
        self.recorder.save_snapshots([StoredSnapshot(sid, 3, 2, b"damaged"), StoredSnapshot(sid, 5, 2, b"good-5")])
        self.recorder.discard_snapshots([StoredSnapshot(sid, 3, 2, b"damaged"), StoredSnapshot(sid, 5, 2, b"read")])
        self.recorder.save_snapshots([StoredSnapshot(sid, 3, 2, b"new-3"), StoredSnapshot(sid, 5, 2, b"new-5")])
        found = self.recorder.snapshots_before(sid, 10, 2, 5)
        assert [(s.seq, s.state) for s in found] == [(5, b"good-5"), (3, b"new-3")]


class TestSQLiteRecorder(RecorderContract):
    data_type_sql = "SELECT typeof(data), data FROM events WHERE session_id = ?"
    metadata_type_sql = "SELECT typeof(metadata), metadata FROM sessions WHERE id = ?"

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _recorder(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        url = f"sqlite:///{tmp_path_factory.mktemp('contract') / 'recorder.db'}"
        upgrade(url)  # a fresh file, migrated: the chain is tested here too
        cls.recorder = open_recorder(url)
        yield
        cls.recorder.close()


class TestPostgresRecorder(RecorderContract):
    data_type_sql = "SELECT pg_typeof(data)::text, data FROM events WHERE session_id = %s"
    metadata_type_sql = "SELECT pg_typeof(metadata)::text, metadata FROM sessions WHERE id = %s"

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _recorder(cls, pg_database: str) -> Iterator[None]:
        cls.recorder = open_recorder(pg_database)  # the suite's migrated database (conftest)
        cls.url = pg_database
        yield
        cls.recorder.close()

    def test_a_commit_after_the_connection_was_dropped_runs_on_a_new_one(self, sid: str) -> None:
        lease = self.writer(sid)
        assert self.recorder.commit_batches([batch(lease, [note(0)])]) == [None]
        with psycopg.connect(self.url, autocommit=True) as admin:  # what a database restart does
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        # The writer's kept connection died while idle: the commit finds out and runs on a new one.
        assert self.recorder.commit_batches([batch(lease, [note(1)])]) == [None]
        assert [e.seq for e in self.recorder.read_events(sid, 0, None, 10)] == [0, 1]

    def _writer_backend(self, admin: psycopg.Connection[Any], pid: int | None = None) -> tuple[str, str]:
        """The state and last statement of this recorder's group-commit connection (other
        servers of the suite may share the database, so it is found by its backend pid)."""
        if pid is None:
            pid = self.recorder._commits._connection().info.backend_pid  # type: ignore[attr-defined]
        row = admin.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        assert row is not None
        return str(row[0]), str(row[1])

    def test_a_connection_lost_at_the_commit_of_a_transaction_leaves_its_outcome_unknown(self) -> None:
        """A transaction (a group with a blob or a snapshot, a lease) whose connection breaks at
        its COMMIT may have been made durable before the answer was lost: COMMIT_OUTCOME_UNKNOWN,
        where it said STORAGE_UNAVAILABLE, "nothing was committed"."""
        commits = self.recorder._commits
        pid = commits._connection().info.backend_pid  # type: ignore[attr-defined]

        def work(tx: Any) -> None:
            tx.exec_driver_sql("SELECT 1")
            with psycopg.connect(self.url, autocommit=True) as admin:  # the backend goes before COMMIT
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

        with pytest.raises(Unavailable) as lost:
            commits.run(work)
        assert lost.value.reason == "COMMIT_OUTCOME_UNKNOWN"
        assert commits.run(lambda tx: 7) == 7  # and the next transaction has a new connection

    def test_a_plain_group_commits_as_one_statement_without_a_transaction_around_it(self, sid: str) -> None:
        """BEGIN, the statement and COMMIT were three round trips; the statement alone is one. The
        writer's connection is left idle with the group statement as its last, no COMMIT after."""
        lease = self.writer(sid)
        assert self.recorder.commit_batches([batch(lease, [note(0), note(1)])]) == [None]
        with psycopg.connect(self.url, autocommit=True) as admin:
            state, last = self._writer_backend(admin)
            assert state == "idle" and last.startswith("WITH fence")
        assert [e.seq for e in self.recorder.read_events(sid, 0, None, 10)] == [0, 1]

    def test_a_connection_lost_during_the_statement_is_settled_by_reading_the_fence(self, sid: str) -> None:
        """The statement is its own commit: when its connection breaks while it is out, the
        sessions' fences are read back. Here it had not committed (its backend was stopped while
        it waited for a row lock), so the group runs again on a new connection."""
        lease = self.writer(sid)
        assert self.recorder.commit_batches([batch(lease, [note(0)])]) == [None]
        outcome: list[BaseException | list[Any]] = []
        writer_pid = self.recorder._commits._connection().info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(self.url) as blocker, psycopg.connect(self.url, autocommit=True) as admin:
            blocker.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (sid,))  # the fence waits for it
            committing = threading.Thread(
                target=lambda: outcome.append(_outcome(lambda: self.recorder.commit_batches([batch(lease, [note(1)])])))
            )
            committing.start()
            eventually(lambda: self._writer_backend(admin, writer_pid), lambda found: found[0] == "active")
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (writer_pid,))
            blocker.rollback()
            committing.join(30)
        assert outcome == [[None]]
        assert [e.seq for e in self.recorder.read_events(sid, 0, None, 10)] == [0, 1]

    def test_the_fence_read_back_tells_committed_from_not_and_from_unknown(self, sid: str) -> None:
        lease = self.writer(sid)
        pending = batch(lease, [note(0), note(1)])
        runs = [[0]]
        read_back = self.recorder._moved_after_loss  # type: ignore[attr-defined]
        assert read_back([pending], runs) == set()  # still at the expected seq: not committed
        assert self.recorder.commit_batches([pending]) == [None]
        assert read_back([pending], runs) == {sid}  # at the batch's new next seq: committed
        self.recorder.acquire_lease(sid, "w2", takeover=True, now=NOW, ttl_ms=TTL, token_hash="h-w2")
        assert read_back([pending], runs) is None  # taken over: before or after, nobody can tell


def _outcome(call: Callable[[], list[Any]]) -> BaseException | list[Any]:
    try:
        return call()
    except BaseException as exc:  # the outcome under test
        return exc


def test_a_commit_on_a_connection_numbered_past_1023_works(pg_database: str) -> None:
    """A server with many client connections opens the database's past descriptor 1,023, where
    `select.select` refuses to look (the idle check before a one-statement commit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    recorder = open_recorder(pg_database)
    try:
        sid = f"fd-{uuid.uuid4().hex[:12]}"
        recorder.create_session(session(sid))
        lease = recorder.acquire_lease(sid, "w1", takeover=False, now=NOW, ttl_ms=TTL, token_hash="h-w1")
        assert recorder.commit_batches([batch(lease, [note(0)])]) == [None]
        assert [e.seq for e in recorder.read_events(sid, 0, None, 10)] == [0]
    finally:
        recorder.close()
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_commit_while_the_database_refuses_connections_says_storage_unavailable() -> None:
    """A database that refuses new connections (restarting, failing over, at `max_connections`)
    while the writer's kept connection is gone: the commit sent nothing, so it is
    STORAGE_UNAVAILABLE (nothing written, retry). The driver's error escaped the recorder
    unmapped, and the committer took it for an unexpected failure: an error with a traceback
    in the log for every group, and COMMIT_OUTCOME_UNKNOWN to writers whose batch never left."""
    from tests.conftest import PG_ADMIN_URL, scratch_pg

    with scratch_pg("sessionlog_refusing") as url:
        upgrade(url)
        recorder = open_recorder(url)
        try:
            sid = f"rf-{uuid.uuid4().hex[:12]}"
            recorder.create_session(session(sid))
            lease = recorder.acquire_lease(sid, "w1", takeover=False, now=NOW, ttl_ms=TTL, token_hash="h-w1")
            assert recorder.commit_batches([batch(lease, [note(0)])]) == [None]
            name = url.rsplit("/", 1)[1]
            with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                admin.execute(  # each gone before it returns (the kept connection's too)
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = %s", (name,)
                )
            # One group alone (one statement) and one with a blob (a transaction).
            for pending in (batch(lease, [note(1)]), batch(lease, [note(1, {"blob": "x" * 100})])):
                with pytest.raises(Unavailable) as refused:
                    recorder.commit_batches([pending])
                assert refused.value.reason == "STORAGE_UNAVAILABLE", refused.value
                assert "not currently accepting connections" in refused.value.message
        finally:
            recorder.close()
