"""Long sessions: snapshots, exact eventId de-duplication without a per-event map, fast-forward,
paged reads. Real servers on loopback, SQLite and PostgreSQL.

Sessions here are made long enough to leave the live session's bounded set of recent eventIds
(`RECENT_IDS`), so a retry of an old id must be answered through the events' unique index.
"""

from __future__ import annotations

import zlib
from typing import Any

import grpc
import pytest
from sqlalchemy import create_engine, text

from sessionlog import convert
from sessionlog.client import SessionLogClient
from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.events import NewEvent
from sessionlog.core.projections.transcript import transcript
from sessionlog.core.snapshot import FOLD_VERSION
from sessionlog.requests import history_request, transcript_request
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service.live import INHERITED_IDS, RECENT_IDS
from tests.support import events as ev
from tests.support.servers import ServerThread
from tests.support.waiting import eventually

SNAPSHOT_EVERY = 50


def _turns(first_turn: int, count: int, prefix: str) -> list[dict[str, Any]]:
    """`count` small complete turns (user, assistant with a tool call, result), with eventIds."""
    out: list[dict[str, Any]] = []
    for turn in range(first_turn, first_turn + count):
        call = f"{prefix}-c{turn}"
        out += [
            ev.user(f"question {turn}"),
            ev.turn_start(turn),
            ev.step_start(turn, 1),
            ev.assistant(turn, 1, "looking", calls=((call, "read"),), usage={"input": turn, "output": 1}),
            ev.tool_result(turn, 1, call, f"result {turn}"),
            ev.step_end(turn, 1),
            ev.turn_end(turn),
        ]
    for index, event in enumerate(out):
        event["eventId"] = f"{prefix}-{first_turn}-{index}"
    return out


def _fill(
    client: SessionLogClient, sid: str, turns: int, prefix: str = "e", first_turn: int = 1, per_batch: int = 100
) -> None:
    lease = client.acquire_lease(sid)
    last = first_turn + turns
    for first in range(first_turn, last, per_batch):
        client.append(sid, lease, _turns(first, min(per_batch, last - first), prefix))
    client.release_lease(lease)


def _everything(client: SessionLogClient, sid: str, at_seq: int | None = None) -> tuple[Any, ...]:
    return (
        client.model_history(sid, at_seq=at_seq),
        client.transcript(sid, at_seq=at_seq),
        client.request(sid, at_seq=at_seq),
        client.stats(sid, at_seq=at_seq),
        client.surface(sid, at_seq=at_seq),
    )


class Servers:
    """Servers of one test on its own database; each stopped once (by the test or at the end)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.running: list[ServerThread] = []

    def __call__(self, **settings: Any) -> ServerThread:
        server = ServerThread(self.db, **{"lease_ttl_ms": 5_000, "snapshot_every_events": SNAPSHOT_EVERY, **settings})
        self.running.append(server)
        return server

    def stop(self, server: ServerThread) -> None:
        self.running.remove(server)
        server.stop(grace=0.5)


@pytest.fixture
def own_server(fresh_db: str) -> Any:
    servers = Servers(fresh_db)
    yield servers
    for server in list(servers.running):
        servers.stop(server)


def test_a_retried_event_id_long_after_its_batch_returns_its_seqs_and_stores_nothing(own_server: Any, sid: str) -> None:
    turns = RECENT_IDS // 7 + 20  # more eventIds than the live session remembers
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, turns)
        head = client.get_session(sid).next_seq
        first = _turns(1, 1, "e")[:3]
        original = [e.seq for e in client.read_events(sid, to_seq=3) if e.event_id in {x["eventId"] for x in first}]
        lease = client.acquire_lease(sid)
        assert client.append(sid, lease, first).seqs == original  # found through the index
        assert client.get_session(sid).next_seq == head
    own_server.stop(server)
    again = own_server(session_cache_size=1)  # after a restart, then after an eviction
    with SessionLogClient(again.target) as client:
        lease = client.acquire_lease(sid, takeover=True)
        assert client.append(sid, lease, first).seqs == original
        other = f"{sid}-other"
        client.create_session(other)
        client.model_history(other)  # evicts `sid` from a one-session cache
        assert client.append(sid, lease, first).seqs == original
        assert client.get_session(sid).next_seq == head


def test_a_fork_answers_retries_of_its_own_ids_and_not_of_its_parents(own_server: Any, sid: str) -> None:
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 3, prefix="p")
        parent_first = _turns(1, 1, "p")[0]
        child = client.fork(sid, 0, f"{sid}-child")  # a fork at seq 0 is a fork
        lease = client.acquire_lease(child.id)
        reused = client.append(child.id, lease, [parent_first])  # the parent's id is not the child's
        assert reused.seqs == [child.next_seq]  # appended: the parent's id is not the child's
        _fill_after = _turns(1, RECENT_IDS // 7 + 10, "k")
        for start in range(0, len(_fill_after), 700):
            client.append(child.id, lease, _fill_after[start : start + 700])
        head = client.get_session(child.id).next_seq
        assert client.append(child.id, lease, [parent_first]).seqs == reused.seqs
        assert client.get_session(child.id).next_seq == head


@pytest.mark.parametrize("prefix_turns", [3, INHERITED_IDS // 7 + 10])  # the prefix's ids held, or looked up
def test_a_fork_answers_a_retry_of_an_event_it_inherited_with_its_seq(
    own_server: Any, sid: str, prefix_turns: int
) -> None:
    # A batch sent to a session whose outcome was lost, then sent again to a fork of it taken at
    # its head: the events are in the fork's log already (inherited), and were appended again,
    # so the fork read back every event of that batch twice.
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, prefix_turns, prefix="p")
        sent = [
            e
            for first in range(1, prefix_turns + 1, 100)
            for e in _turns(first, min(100, prefix_turns + 1 - first), "p")
        ]
        oldest, newest = sent[:3], sent[-3:]  # as `_fill` sent them
        seqs = {e.event_id: e.seq for e in client.read_events(sid) if e.event_id is not None}
        head = client.get_session(sid).next_seq
        child = client.fork(sid, head - 1, f"{sid}-child")
        lease = client.acquire_lease(child.id)
        for batch in (newest, oldest):
            assert client.append(child.id, lease, batch).seqs == [seqs[e["eventId"]] for e in batch]
        assert client.get_session(child.id).next_seq == child.next_seq  # nothing appended
        fresh = client.append(child.id, lease, _turns(prefix_turns + 1, 1, "k"))
        assert fresh.seqs == list(range(child.next_seq, child.next_seq + 7))
    own_server.stop(server)
    again = own_server()  # a cold load of the fork
    with SessionLogClient(again.target) as client:
        lease = client.acquire_lease(child.id, takeover=True)
        assert client.append(child.id, lease, oldest).seqs == [seqs[e["eventId"]] for e in oldest]
        assert client.append(child.id, lease, _turns(prefix_turns + 1, 1, "k")).seqs == fresh.seqs
        ids = [e.event_id for e in client.read_events(child.id) if e.event_id is not None]
        assert len(ids) == len(set(ids))  # each eventId once in the log the fork reads back


def test_snapshots_are_written_and_loading_starts_from_the_latest(own_server: Any, sid: str) -> None:
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 40)
        expected = _everything(client, sid)
        middle = client.get_session(sid).next_seq // 2
        expected_middle = _everything(client, sid, middle)
    record = server.call(server.service.reader.session(sid))
    loaded = server.call(server.service.loader.fold_at(record))
    assert loaded.snapshot_seq is not None
    assert loaded.folded_events <= SNAPSHOT_EVERY + 100  # the tail, never the whole log
    at_middle = server.call(server.service.loader.fold_at(record, middle))
    assert at_middle.folded_events <= SNAPSHOT_EVERY + 100
    own_server.stop(server)
    cold = own_server()
    with SessionLogClient(cold.target) as client:
        assert _everything(client, sid) == expected
        assert _everything(client, sid, middle) == expected_middle


def _current_snapshots(db: str, session_id: str) -> list[int]:
    """The seqs of the session's stored snapshots that this fold code can use."""
    engine = create_engine(db)
    with engine.connect() as conn:
        query = text("SELECT seq FROM fold_snapshots WHERE session_id = :s AND fold_version = :v ORDER BY seq")
        seqs = [seq for (seq,) in conn.execute(query, {"s": session_id, "v": FOLD_VERSION})]
    engine.dispose()
    return seqs


def test_a_read_at_an_old_seq_after_a_fold_version_bump_stores_snapshots_on_its_way(
    own_server: Any, fresh_db: str, sid: str
) -> None:
    """After a fold-version bump every stored snapshot is ignored: a read at an old seq folded
    the log from seq 0, and stored nothing, so every such read did it again. It now stores
    snapshots on its way at the policy's spacing, under the session whose rows hold their seq
    (the parent's for a fork's inherited prefix), replacing a stale one at the same seq."""
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 60, per_batch=5)  # 420 events; batches of 35 end at 34, 69, ...
        middle = 300
        expected = _everything(client, sid, middle)
    own_server.stop(server)
    engine = create_engine(fresh_db)
    with engine.begin() as conn:  # as an upgrade leaves them: written by the previous fold code
        rows = conn.execute(text("SELECT seq, state FROM fold_snapshots WHERE session_id = :s"), {"s": sid}).all()
        planted = [49, 320, 325, 330]  # where the first new one will go; and more than a load reads after 299
        assert rows and not set(planted) & {seq for seq, _ in rows}
        stale = FOLD_VERSION - 1
        for seq, state in [*rows, *((seq, rows[0][1]) for seq in planted)]:
            body = jsonvalue.loads(zlib.decompress(bytes(state)))
            body["v"] = stale
            conn.execute(text("DELETE FROM fold_snapshots WHERE session_id = :s AND seq = :q"), {"s": sid, "q": seq})
            conn.execute(
                text("INSERT INTO fold_snapshots (session_id, seq, fold_version, state) VALUES (:s, :q, :v, :b)"),
                {"s": sid, "q": seq, "v": stale, "b": zlib.compress(jsonvalue.dumps_bytes(body))},
            )
    engine.dispose()
    assert _current_snapshots(fresh_db, sid) == []
    cold = own_server()
    with SessionLogClient(cold.target) as client:
        child = client.fork(sid, 350, f"{sid}-fork")
        assert client.model_history(child.id, at_seq=middle) == expected[0]
        assert client.stats(child.id, at_seq=middle) == expected[3]
        # Stored where every fork of the parent finds them, one per SNAPSHOT_EVERY events.
        assert _current_snapshots(fresh_db, sid) == list(range(SNAPSHOT_EVERY - 1, middle, SNAPSHOT_EVERY))
        assert _current_snapshots(fresh_db, child.id) == []
        assert _everything(client, sid, middle) == expected
    record = cold.call(cold.service.reader.session(sid))
    again = cold.call(cold.service.loader.fold_at(record, middle))
    assert (again.snapshot_seq, again.folded_events, again.stored_snapshots) == (299, 1, 0)
    earlier = cold.call(cold.service.loader.fold_at(record, 120))
    assert (earlier.snapshot_seq, earlier.folded_events) == (99, 21)
    past_stale = cold.call(cold.service.loader.fold_at(record, 330))  # the stale ones are not even read
    assert (past_stale.snapshot_seq, past_stale.folded_events) == (299, 31)
    with SessionLogClient(cold.target) as client:
        client.model_history(sid)  # the head: a load from the snapshot at 299
    assert _current_snapshots(fresh_db, sid)[-2:] == [349, 399]
    head = cold.call(cold.service.loader.fold_at(record))
    assert head.snapshot_seq == 399 and head.folded_events == record.next_seq - 400
    with SessionLogClient(cold.target) as client:  # the appends count on from the latest snapshot
        _fill(client, sid, 5, prefix="more", first_turn=61)  # 20 events since 399, then 35 more
    assert _current_snapshots(fresh_db, sid)[-1] == record.next_seq + 34


def test_a_walk_over_large_payloads_stores_snapshots_by_their_bytes_too(own_server: Any, sid: str) -> None:
    """A cold fold storing snapshots on its way applied only the policy's events rule: events
    whose strings went to blobs had no stored length at hand, so a session of large payloads got
    a walk snapshot every `snapshot_every_events` events rather than every `snapshot_every_bytes`."""
    server = own_server(blob_threshold_bytes=1024, snapshot_every_events=1000, snapshot_every_bytes=300_000)
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        for first in range(0, 200, 50):  # 200 events of 10,000 bytes each, in blobs
            client.append(sid, lease, [ev.user(f"{n:05d}" + "x" * 9_995) for n in range(first, first + 50)])
        expected = _everything(client, sid)
    own_server.stop(server)
    engine = create_engine(own_server.db)
    with engine.begin() as conn:  # as after a fold-version bump: a walk from seq 0
        conn.execute(text("DELETE FROM fold_snapshots WHERE session_id = :s"), {"s": sid})
    engine.dispose()
    cold = own_server(blob_threshold_bytes=1024, snapshot_every_events=1000, snapshot_every_bytes=300_000)
    record = cold.call(cold.service.reader.session(sid))
    walked = cold.call(cold.service.loader.fold_at(record))
    assert walked.snapshot_seq is None
    # The 30th large one (seq 30, after a small first event) brings the payload past 300,000
    # bytes, and so on every 30.
    assert _current_snapshots(own_server.db, sid) == [30, 60, 90, 120, 150, 180]
    assert (walked.stored_snapshots, walked.events_since_snapshot) == (6, 20)
    assert 200_000 <= walked.bytes_since_snapshot < 210_000
    again = cold.call(cold.service.loader.fold_at(record, 100))
    assert (again.snapshot_seq, again.folded_events) == (90, 10)
    with SessionLogClient(cold.target) as client:
        assert _everything(client, sid) == expected


def test_appends_of_large_payloads_store_snapshots_by_their_bytes(own_server: Any, sid: str) -> None:
    """The appends counted a batch's bytes as its stored text with the blob strings taken out,
    so payloads that went to blobs counted a few bytes each: a session of them got a snapshot
    every `snapshot_every_events` events only, however many MB they held."""
    server = own_server(blob_threshold_bytes=1024, snapshot_every_events=1000, snapshot_every_bytes=300_000)
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        for first in range(0, 120, 40):  # batches of 40 events of 10,000 bytes each, in blobs
            client.append(sid, lease, [ev.user(f"{n:05d}" + "x" * 9_995) for n in range(first, first + 40)])
    # 400 kB a batch: the first one past 300 kB since the last snapshot ends where one is taken.
    assert _current_snapshots(own_server.db, sid) == [40, 80, 120]


def _damaged(state: bytes, damage: str) -> bytes:
    """A stored snapshot's state made unusable: its bytes cut ("bytes"), or a body of a format
    this code does not read under its column's fold version ("version")."""
    if damage == "bytes":
        return state[:-7] + b"garbage"
    body = jsonvalue.loads(zlib.decompress(state))
    body["v"] = 999
    return zlib.compress(jsonvalue.dumps_bytes(body))


@pytest.mark.parametrize("damage", ["bytes", "version"])
def test_damaged_or_foreign_snapshots_are_ignored_and_answers_do_not_change(
    own_server: Any, fresh_db: str, sid: str, damage: str
) -> None:
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 30)
        expected = _everything(client, sid)
    own_server.stop(server)
    engine = create_engine(fresh_db)
    with engine.begin() as conn:
        rows = conn.execute(text("SELECT seq, state FROM fold_snapshots WHERE session_id = :s"), {"s": sid}).all()
        assert rows, "the policy wrote snapshots"
        for seq, state in rows:
            conn.execute(
                text("UPDATE fold_snapshots SET state = :b WHERE session_id = :s AND seq = :q"),
                {"b": _damaged(bytes(state), damage), "s": sid, "q": seq},
            )
    engine.dispose()
    cold = own_server()
    with SessionLogClient(cold.target) as client:
        assert _everything(client, sid) == expected
        lease = client.acquire_lease(sid)  # and it can still be written
        client.append(sid, lease, [ev.user("after the damage")])


@pytest.mark.parametrize("damage", ["bytes", "version"])
def test_a_damaged_snapshot_is_replaced_by_the_next_one_stored_at_its_seq(
    own_server: Any, fresh_db: str, sid: str, damage: str
) -> None:
    """A damaged snapshot of the current fold version was kept as "equal" when a walk stored a
    new one at its seq, so every load there ignored it and folded from the one before."""
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 30, per_batch=5)  # 210 events
        expected = client.model_history(sid, at_seq=120)
    own_server.stop(server)
    engine = create_engine(fresh_db)
    with engine.begin() as conn:  # no snapshot: a read at 120 walks from seq 0, storing 49 and 99
        conn.execute(text("DELETE FROM fold_snapshots WHERE session_id = :s"), {"s": sid})
    cold = own_server()
    record = cold.call(cold.service.reader.session(sid))
    walked = cold.call(cold.service.loader.fold_at(record, 120))
    assert (walked.snapshot_seq, walked.stored_snapshots) == (None, 2)
    assert _current_snapshots(fresh_db, sid) == [49, 99]
    with engine.begin() as conn:
        (state,) = conn.execute(
            text("SELECT state FROM fold_snapshots WHERE session_id = :s AND seq = 99"), {"s": sid}
        ).one()
        conn.execute(
            text("UPDATE fold_snapshots SET state = :b WHERE session_id = :s AND seq = 99"),
            {"b": _damaged(bytes(state), damage), "s": sid},
        )
    engine.dispose()
    past_damage = cold.call(cold.service.loader.fold_at(record, 120))  # ignores 99, walks from 49
    assert (past_damage.snapshot_seq, past_damage.folded_events, past_damage.stored_snapshots) == (49, 71, 1)
    again = cold.call(cold.service.loader.fold_at(record, 120))  # the one it stored at 99 replaced it
    assert (again.snapshot_seq, again.folded_events) == (99, 21)
    with SessionLogClient(cold.target) as client:
        assert client.model_history(sid, at_seq=120) == expected


def test_a_cached_session_catches_up_with_what_another_instance_wrote(own_server: Any, sid: str) -> None:
    a, b = own_server(), own_server()
    with SessionLogClient(a.target) as on_a, SessionLogClient(b.target) as on_b:
        on_a.create_session(sid)
        _fill(on_a, sid, 5, prefix="a")
        on_a.model_history(sid)  # cached on A
        _fill(on_b, sid, 5, prefix="b", first_turn=6)  # B writes; A's cache is behind
        assert _everything(on_a, sid) == _everything(on_b, sid)
        live = a.service.live.peek(sid)
        assert live is not None and live.fold.next_seq == on_b.get_session(sid).next_seq
        _fill(on_a, sid, 2, prefix="a2", first_turn=11)  # A takes the lease again and appends on the caught-up fold
        assert _everything(on_a, sid) == _everything(on_b, sid)


def test_history_and_transcript_come_in_pages_read_at_one_seq(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    _fill(client, sid, 12)
    full_history = client.model_history(sid)
    full_transcript = client.transcript(sid)
    stub = client.stub
    request = history_request(sid, None, False)
    request.page_size = 5
    response = stub.GetModelHistory(request)
    pages = [jsonvalue.loads(response.messages_json)]
    assert len(pages[0]) == 5 and response.next_page_token
    _fill_more = _turns(13, 2, "later")  # the session grows between pages
    lease = client.acquire_lease(sid)
    client.append(sid, lease, _fill_more)
    while response.next_page_token:
        response = stub.GetModelHistory(
            pb.GetModelHistoryRequest(scope=request.scope, page_size=5, page_token=response.next_page_token)
        )
        pages.append(jsonvalue.loads(response.messages_json))
    assert [m for page in pages for m in page] == full_history  # one prefix, the one page 1 saw
    rows: list[Any] = []
    treq = transcript_request(sid, None, False)
    treq.page_size = 7
    tresp = stub.GetTranscript(treq)
    rows += jsonvalue.loads(tresp.rows_json)
    read_at = tresp.at_seq
    client.append(sid, lease, _turns(15, 1, "later"))  # grows again between transcript pages
    while tresp.next_page_token:
        follow = pb.GetTranscriptRequest(scope=treq.scope, page_size=7, page_token=tresp.next_page_token)
        tresp = stub.GetTranscript(follow)
        page = jsonvalue.loads(tresp.rows_json)
        assert len(page) <= 7
        rows += page
    assert rows == client.transcript(sid, at_seq=read_at)
    assert rows[: len(full_transcript)] == full_transcript
    assert client.model_history(sid)[: len(full_history)] == full_history


def _compacting(turns: int, every: int) -> list[dict[str, Any]]:
    """A system prompt, then `turns` user messages with a note each; every `every` messages a
    compaction summary replaces all of them (sourceEventSeqs cite each replaced node)."""
    out: list[dict[str, Any]] = [ev.system("be brief")]
    nodes: list[int] = []
    for turn in range(1, turns + 1):
        nodes.append(len(out))
        out += [ev.user(f"question {turn}"), ev.note(turn)]
        if turn % every == 0:
            summary = ev.user(f"summary up to {turn}")
            summary["surfaceOp"] = {"op": "replace", "startSeq": nodes[0], "endSeq": nodes[-1]}
            summary["sourceEventSeqs"] = list(nodes)
            nodes = [len(out)]
            out.append(summary)
    return out


def _transcript_pages(client: SessionLogClient, sid: str, page_size: int) -> list[Any]:
    request = transcript_request(sid, None, False)
    request.page_size = page_size
    response = client.stub.GetTranscript(request)
    rows = list(jsonvalue.loads(response.rows_json))
    while response.next_page_token:
        follow = pb.GetTranscriptRequest(scope=request.scope, page_size=page_size, page_token=response.next_page_token)
        response = client.stub.GetTranscript(follow)
        rows += jsonvalue.loads(response.rows_json)
    return rows


@pytest.mark.parametrize("every", [4, 300, 0])
def test_a_transcript_page_scans_the_log_after_it_only_until_its_rows_were_replaced(
    own_server: Any, sid: str, every: int
) -> None:
    """Following a transcript's pages costs the transcript, not pages times the log: past its
    own events a page reads light rows only until the last replace of one of its rows (none
    when its rows are still on the surface at the read seq), where it read up to the head."""
    server = own_server()
    light_rows: list[int] = []
    surface_ops = server.service.reader.surface_ops

    async def counted(*args: Any, **kwargs: Any) -> Any:
        async for events in surface_ops(*args, **kwargs):
            light_rows.extend(event.seq for event in events)
            yield events

    server.service.reader.surface_ops = counted
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        events = _compacting(1500, every or 10**6)
        for start in range(0, len(events), 100):  # snapshots land after batches
            client.append(sid, lease, events[start : start + 100])
        expected = transcript(list(client.read_events(sid)))
        first = transcript_request(sid, None, False)
        first.page_size = 10
        assert client.stub.GetTranscript(first).next_page_token
        if every:  # a first page of light rows, or twice the surface events up to the summary
            assert len(light_rows) <= 250 + 2 * (every + 1)  # that replaced page 1's last row
        else:  # every row of page 1 is still on the surface: nothing after the page is read
            assert light_rows == []
        assert _transcript_pages(client, sid, 9) == jsonvalue.loads(jsonvalue.dumps(expected))


def test_a_forged_page_token_is_refused(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    for token in ("nonsense", "WyJ0cmFuc2NyaXB0IiwxLDIsM10="):  # the second is a transcript token
        with pytest.raises(grpc.RpcError) as caught:
            client.stub.GetModelHistory(
                pb.GetModelHistoryRequest(scope=pb.ProjectionScope(session_id=sid), page_token=token)
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_fork_loads_from_its_parents_snapshot_before_the_cut(own_server: Any, sid: str) -> None:
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        _fill(client, sid, 30, per_batch=5)  # batches of 35 events: a snapshot about every other one
        cut = client.get_session(sid).next_seq - 40
        child = client.fork(sid, cut, f"{sid}-fork")
        assert client.model_history(child.id, at_seq=cut) == client.model_history(sid, at_seq=cut)
        assert client.stats(child.id, at_seq=cut) == client.stats(sid, at_seq=cut)
    record = server.call(server.service.reader.session(child.id))
    loaded = server.call(server.service.loader.fold_at(record))
    assert loaded.snapshot_seq is not None and loaded.snapshot_seq <= cut  # the parent's snapshot
    assert loaded.folded_events <= SNAPSHOT_EVERY + 100


def _past_recent_ids(client: SessionLogClient, sid: str, lease: Any) -> list[dict[str, Any]]:
    """Append notes with eventIds, 50 more than a live session remembers (so the oldest are
    found only through the unique index); the notes as sent."""
    notes = [ev.note(n, eventId=f"n-{n}") for n in range(RECENT_IDS + 50)]
    for start in range(0, len(notes), 500):
        client.append(sid, lease, notes[start : start + 500])
    return notes


def test_an_old_retry_that_fits_the_log_is_caught_by_the_commit(own_server: Any, sid: str) -> None:
    """Ignorable events retried long after their batch plan as new events; the commit checks
    their eventIds against the unique index, writes nothing and says EVENT_IDS_STORED; the
    retry the client makes then returns the original seqs (raw stubs show both steps)."""
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        notes = _past_recent_ids(client, sid, lease)
        head = client.get_session(sid).next_seq
        old = [dict(notes[0]), dict(notes[1])]
        request = pb.AppendEventsRequest(
            session_id=sid,
            lease_token=lease.token,
            events=[convert.new_event_to_pb(NewEvent.from_json(e)) for e in old],
        )
        with pytest.raises(grpc.RpcError) as caught:
            client.stub.AppendEvents(request)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "EVENT_IDS_STORED" in str(caught.value.trailing_metadata())
        assert client.get_session(sid).next_seq == head  # nothing written
        assert list(client.stub.AppendEvents(request).seqs) == [0, 1]  # the retry: original seqs
        assert client.get_session(sid).next_seq == head


def test_an_old_or_inherited_event_id_sent_with_another_event_is_refused(own_server: Any, sid: str) -> None:
    """An id the session no longer remembers (found through the unique index), one of a fork's
    inherited prefix, and one after a restart: each names a stored event, and a different
    event under it is refused (EVENT_ID_REUSED), never answered with the stored event's seq."""
    server = own_server()
    with SessionLogClient(server.target) as client:
        client.create_session(sid)
        lease = client.acquire_lease(sid)
        notes = _past_recent_ids(client, sid, lease)
        head = client.get_session(sid).next_seq
        child = client.fork(sid, head - 1, f"{sid}-child")
        child_lease = client.acquire_lease(child.id)
        for session, held in ((sid, lease), (child.id, child_lease)):
            with pytest.raises(ValidationError) as reused:
                client.append(session, held, [ev.note(-1, eventId="n-0")])
            assert reused.value.reason == "EVENT_ID_REUSED" and reused.value.metadata["seq"] == "0"
            assert client.append(session, held, [notes[0]]).seqs == [0]  # the true retry still is one
        assert client.get_session(sid).next_seq == head
        assert client.get_session(child.id).next_seq == child.next_seq
    own_server.stop(server)
    again = own_server()
    with SessionLogClient(again.target) as client:
        lease = client.acquire_lease(sid, takeover=True)
        with pytest.raises(ValidationError, match=f"names the test/note at seq {head - 1}"):
            client.append(sid, lease, [ev.note(-1, eventId=notes[-1]["eventId"])])
        assert client.get_session(sid).next_seq == head


def test_a_session_with_an_open_writer_stream_stays_cached_past_the_cache_size(own_server: Any, sid: str) -> None:
    # More open writer streams than the cache holds: each session stays folded while its
    # stream is open (else every append would load it again); once closed, the cache shrinks.
    server = own_server(session_cache_size=2)
    live = server.running.service.live
    ids = [f"{sid}-{i}" for i in range(4)]
    with SessionLogClient(server.target) as client:
        writers = [client.writer(session_id, create_if_missing=True) for session_id in ids]
        for round_no in range(2):
            for writer in writers:
                assert writer.append([ev.note(round_no)]).result(timeout=30).seqs == [round_no]
        assert all(live.peek(session_id) is not None for session_id in ids)
        for writer in writers:
            writer.close()
        eventually(lambda: len(server.service.writer_streams), lambda n: n == 0)  # the streams ended
        client.create_session(f"{sid}-unary")
        client.append(f"{sid}-unary", client.acquire_lease(f"{sid}-unary"), [ev.note(0)])  # a load
        assert len(live) == 2 and live.peek(f"{sid}-unary") is not None


def test_batches_in_flight_keep_no_undo_journal_in_the_live_fold(fresh_db: str, sid: str) -> None:
    """A writer's pipelined batches are each checked against the ones before them in the live
    fold, but none keeps an undo journal there while it commits (a failed commit drops the
    fold instead): the memory of a batch in flight is the batch."""
    server = ServerThread(fresh_db)
    seen: list[tuple[int, int, int]] = []

    def tap(session_id: str, _events: Any) -> None:
        if session_id != sid:  # the start-up repair's closers of other tests' sessions (PostgreSQL)
            return
        live = server.service.live.peek(session_id)
        seen.append((live.in_flight, len(live.fold._marks), len(live.fold._journal)))

    server.service.appends.commit_taps.append(tap)
    try:
        with SessionLogClient(server.target, timeout=30) as client, client.writer(sid, create_if_missing=True) as w:
            batches = [[ev.note(n), ev.user(f"m{n}")] if n % 2 else [ev.user(f"m{n}")] for n in range(200)]
            for future in [w.append(batch) for batch in batches]:
                future.result(timeout=30)
    finally:
        server.stop()
    assert len(seen) == 200
    assert max(in_flight for in_flight, _, _ in seen) > 1  # later batches were planned meanwhile
    assert [(marks, journal) for _, marks, journal in seen] == [(0, 0)] * 200
