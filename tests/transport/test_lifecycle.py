"""Resume, fork and crash repair through a real server, on SQLite and PostgreSQL (issue 4)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sessionlog.aio import AsyncSessionLogClient
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, OwnershipLost, ValidationError, WriterHeld
from sessionlog.requests import ForkInfo
from sessionlog.session_info import SessionInfo
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service.leases import Grant
from sessionlog_server.service.lifecycle import FORK_SCAN_PAGE, FORK_SCAN_PAGES, repair_session
from sessionlog_server.storage.migrate import upgrade
from tests.support.events import (
    assistant,
    note,
    open_turn_log,
    system,
    tool_result,
    turn_end,
    turn_start,
    user,
)
from tests.support.servers import ServerThread, hold_writer
from tests.support.waiting import eventually


def test_resume_repairs_an_open_turn_and_marks_the_seed(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(open_turn_log()).result()
    with client.writer(sid, resume=True) as writer:
        resumed = writer.resumed
        assert resumed is not None and resumed.repair_seqs == [6, 7, 8, 9]
        assert resumed.end_seed_seq == 10 and resumed.next_seq == 11
        assert resumed.last_turn == 1  # the repaired turn: the harness's next is turn 2
        header = writer.report_header({"config": {"model": "m"}}).result()
        assert header.reason == "initial"
    events = list(client.read_events(sid))
    repair = events[6:]
    assert [e.type for e in repair] == [
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
        "session/end-seed",
        "request/header",
    ]
    assert repair[0].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN" and repair[0].source_event_seqs == (5,)
    assert repair[0].data["message"]["toolCallId"] == "a" and repair[0].data["message"]["isError"] is True
    assert repair[1].data["error"]["code"] == "TOOL_NOT_STARTED" and repair[1].source_event_seqs == ()
    assert repair[3].data == {"turn": 1, "reason": {"kind": "interrupted"}}
    assert {e.time for e in repair[:4]} == {events[5].time}  # repair takes the last event's time
    assert not client.get_session(sid).open_turn
    # the log ends with a header, so a new resume marks a new seed boundary...
    info = client.resume(sid)
    assert info.repair_seqs == [] and info.end_seed_seq == 12 and info.next_seq == 13
    client.release_lease(info.lease)
    # ...but resuming an untouched session does not grow the log
    again = client.resume(sid)
    assert again.end_seed_seq == 12 and again.next_seq == 13
    assert client.report_header(sid, again.lease, {"config": {"model": "m"}}).reason == "resume"


def test_read_only_projection_shows_repair_without_writing(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, open_turn_log())
    client.release_lease(lease)
    with_repair = client.model_history(sid, with_repair=True)
    assert [m["role"] for m in with_repair[-2:]] == ["toolResult", "toolResult"]
    assert len(client.model_history(sid)) == len(with_repair) - 2
    assert client.get_session(sid).next_seq == 6  # nothing written


def test_a_request_names_the_prefix_it_is_of(client: SessionLogClient, sid: str) -> None:
    """The request view names the seq its prefix ends at (as the TypeScript client's does): read
    at the head of a live session its sha256 could not be tied to a prefix to read again with
    `at_seq`, and read `with_repair` it did not say whether the repair was in it."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, open_turn_log())  # seqs 0-5, the turn left open
    assert client.request(sid)["atSeq"] == 5
    assert client.request(sid, at_seq=3)["atSeq"] == 3
    assert client.request(sid, with_repair=True)["atSeq"] == 5  # the writer's lease is live: no repair
    client.release_lease(lease)
    shown = client.request(sid, with_repair=True)
    assert shown["atSeq"] == 9  # two tool results, step/end and turn/end, in memory only
    assert client.get_session(sid).next_seq == 6


@pytest.mark.parametrize("page_size", [1, 2, 3, 4])
def test_a_repair_shown_in_memory_pages_like_any_prefix(client: SessionLogClient, sid: str, page_size: int) -> None:
    """A history or transcript read `with_repair` page by page: each page token pinned the
    repaired view's last seq, which the log does not hold, so the second page failed with
    SEQ_NOT_FOUND (a history over 1,000 messages, a transcript over 500 rows). Pages of any
    size, cut before or inside the repair, now add up to what one page shows."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, open_turn_log())
    client.release_lease(lease)
    scope = pb.ProjectionScope(session_id=sid, with_repair=True)
    messages: list[dict] = []
    rows: list[dict] = []
    token = ""
    while True:
        history = client.stub.GetModelHistory(
            pb.GetModelHistoryRequest(scope=scope, page_size=page_size, page_token=token)
        )
        messages += json.loads(history.messages_json)
        token = history.next_page_token
        if not token:
            break
    while True:
        transcript = client.stub.GetTranscript(
            pb.GetTranscriptRequest(scope=scope, page_size=page_size, page_token=token)
        )
        rows += json.loads(transcript.rows_json)
        token = transcript.next_page_token
        if not token:
            break
    assert messages == client.model_history(sid, with_repair=True) and len(messages) == 5
    assert rows == client.transcript(sid, with_repair=True) and [r["seq"] for r in rows] == list(range(1, 10))
    assert client.get_session(sid).next_seq == 6  # nothing written


def test_fork_shares_the_prefix_and_forks_of_forks(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([system("s"), user("one"), note(1), note(2)]).result()
    child = client.fork(sid, 2, f"{sid}-child")
    assert (child.parent_session_id, child.fork_seq, child.next_seq) == (sid, 2, 4)
    child_events = list(client.read_events(child.id))
    assert [e.seq for e in child_events] == [0, 1, 2, 3]
    assert child_events[3].type == "session/end-seed" and child_events[3].data == {"inherited": True}
    assert child_events[:3] == list(client.read_events(sid, to_seq=2))
    with client.writer(child.id) as writer:
        writer.append([user("two in child")]).result()
    grandchild = client.fork(child.id, 4, f"{sid}-grandchild")
    assert [m["content"] for m in client.model_history(grandchild.id)] == ["s", "one", "two in child"]
    assert [e.seq for e in client.read_events(grandchild.id)] == [0, 1, 2, 3, 4, 5]
    assert [s.id for s in client.list_sessions(parent_session_id=sid)] == [child.id]
    # the parent is untouched
    assert [e.seq for e in client.read_events(sid)] == [0, 1, 2, 3]
    with pytest.raises(NotFound):
        client.fork(sid, 99)


def test_fork_inside_an_open_turn_gets_forked_repair(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), note(9)]).result()
    child = client.fork(sid, 5)
    events = list(client.read_events(child.id))
    tail = events[6:]
    assert [e.type for e in tail] == ["session/end-seed", "tool/result", "tool/result", "step/end", "turn/end"]
    assert tail[-1].data["reason"] == {"kind": "forked"}
    assert "parent session may have completed" in tail[1].data["message"]["content"][0]["text"]
    assert not client.get_session(child.id).open_turn
    with client.writer(child.id) as writer:  # the child continues with a new turn
        writer.append([user("next"), turn_start(2), turn_end(2)]).result()


def test_fork_answers_the_repair_seqs_it_wrote_in_both_clients(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """A harness that forks mid-turn learns which events the service wrote to close the turn, as
    from a resume, without reading the child's log. The Python clients answered the new session
    alone (the TypeScript client's `repairSeqs` were dropped); the answer is still that session,
    field for field, so callers that read `.id`, `.next_seq` or `to_json()` are unchanged."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), note(9)]).result()
    child = client.fork(sid, 5, f"{sid}-child")
    assert child.repair_seqs == [7, 8, 9, 10]  # after the end-seed at 6: two results, step/end, turn/end
    repairs = list(client.read_events(child.id, from_seq=7))
    assert [e.type for e in repairs] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert isinstance(child, SessionInfo) and child.session == client.get_session(child.id)
    assert (child.id, child.parent_session_id, child.fork_seq, child.next_seq) == (f"{sid}-child", sid, 5, 11)
    assert child.to_json() == {**child.session.to_json(), "repairSeqs": [7, 8, 9, 10]}
    assert client.fork(sid, 5, f"{sid}-child").repair_seqs == [7, 8, 9, 10]  # asked for again: the same
    assert client.fork(sid, 1, f"{sid}-before").repair_seqs == []  # a cut before the turn repairs nothing

    async def fork_async() -> ForkInfo:
        async with AsyncSessionLogClient(server.target) as aio:
            return await aio.fork(sid, 4, f"{sid}-async")

    forked = asyncio.run(fork_async())
    assert forked.repair_seqs == [6, 7, 8, 9]  # cut at the assistant message: its two calls get results
    assert forked.session == client.get_session(f"{sid}-async")


def test_resume_names_the_last_turn_a_fork_inherited_too(client: SessionLogClient, sid: str) -> None:
    """A resumed harness numbers its next turn from the answer, without reading stats or the log."""
    client.create_session(sid)
    fresh = client.resume(sid)
    assert fresh.last_turn == 0 and fresh.to_json()["lastTurn"] == 0  # no turn yet: the next is 1
    client.append(sid, fresh.lease, [system("s"), turn_start(1), turn_end(1), user("u"), turn_start(2), turn_end(2)])
    client.release_lease(fresh.lease)
    child = client.fork(sid, 6, f"{sid}-child")  # inherits turns 1 and 2, writes none of its own
    with client.writer(child.id, resume=True) as writer:
        assert writer.resumed is not None and writer.resumed.last_turn == 2
        writer.append([turn_start(writer.resumed.last_turn + 1), turn_end(3)]).result()
    assert client.resume(child.id).last_turn == 3


def test_writers_may_not_write_reserved_turn_ends(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, [turn_start(1)])
    with pytest.raises(ValidationError) as refused:
        client.append(sid, lease, [turn_end(1, "interrupted")])
    assert refused.value.reason == "RESERVED_TURN_END_KIND"
    # a voice harness whose user barged in is told which kind to write instead
    assert "a turn the user interrupted ends with kind 'aborted'" in str(refused.value)
    assert client.get_session(sid).next_seq == 1


def _release_mid_turn(db: str, sid: str) -> None:
    """On a server that repairs nothing at start-up: a writer leaves `sid` with a turn open and
    releases its lease (a crash of the service would then leave it so), and the server stops."""
    first = ServerThread(db, repair_on_start=False)
    try:
        with SessionLogClient(first.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, open_turn_log())
            client.release_lease(lease)
            assert client.get_session(sid).open_turn
    finally:
        first.stop()


def test_start_up_repairs_abandoned_turns(fresh_db: str, sid: str) -> None:
    _release_mid_turn(fresh_db, sid)
    second = ServerThread(fresh_db)
    try:
        with SessionLogClient(second.target) as client:
            # Serving starts at once; the repair runs in the background and closes the turn.
            eventually(lambda: client.get_session(sid).open_turn, lambda open_turn: not open_turn)
            assert [e.type for e in client.read_events(sid, from_seq=6)] == [
                "tool/result",
                "tool/result",
                "step/end",
                "turn/end",
            ]
    finally:
        second.stop()


def test_a_start_up_repair_that_failed_is_retried_by_the_sweep(tmp_path: Path, sid: str) -> None:
    """A session released mid-turn before the crash is repaired only by a start-up pass (the
    expiry sweep leaves released sessions to their writers): when that pass fails on a database
    error, the sweep must do it again rather than leave the turn open until the next restart."""
    path = tmp_path / "busy.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    _release_mid_turn(url, sid)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock: repairs fail busy
    second = ServerThread(url, migrate=False, lease_ttl_ms=300, sqlite_busy_timeout_ms=100)
    try:
        with SessionLogClient(second.target) as client:
            # the start-up pass met the lock and gave up
            eventually(lambda: second.service._startup_repair.done(), bool, timeout=10)
            assert client.get_session(sid).open_turn
            blocker.execute("ROLLBACK")
            eventually(lambda: client.get_session(sid).open_turn, lambda open_turn: not open_turn, timeout=10)
            ends = [e for e in client.read_events(sid) if e.type == "turn/end"]
            assert [e.data["reason"]["kind"] for e in ends] == ["interrupted"]
    finally:
        blocker.close()
        second.stop()


def test_expired_lease_mid_turn_is_repaired(db_url: str, sid: str) -> None:
    server = ServerThread(db_url, lease_ttl_ms=300)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, open_turn_log())  # the writer then goes silent
            eventually(lambda: client.get_session(sid).open_turn, lambda open_turn: not open_turn, timeout=10)
            with pytest.raises(OwnershipLost):  # the silent writer is fenced out
                client.append(sid, lease, [note(1)])
            # Closed by repair (this server's sweep, or another instance's on a shared database).
            ends = [e for e in client.read_events(sid) if e.type == "turn/end"]
            assert [e.data["reason"]["kind"] for e in ends] == ["interrupted"]
    finally:
        server.stop()


def test_an_open_writer_stream_keeps_its_lease_past_the_ttl(db_url: str, sid: str) -> None:
    server = ServerThread(db_url, lease_ttl_ms=300)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            with client.writer(sid) as writer:
                writer.append([note(0)]).result()
                first = client.get_session(sid).lease.expire_time
                # Renewed every TTL/3 by the service while the stream is open, silent or not.
                eventually(lambda: client.get_session(sid).lease.expire_time, lambda at: at >= first + 600, timeout=10)
                with pytest.raises(WriterHeld):
                    client.acquire_lease(sid)
                writer.append([note(1)]).result()
            assert [e.seq for e in client.read_events(sid)] == [0, 1]
    finally:
        server.stop()


def test_resume_waits_for_a_repair_the_service_is_making(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """A harness that resumes while the service itself repairs the session (the start-up
    repair, or the sweep once the dead writer's lease lapsed) gets the repaired session. It got
    WRITER_HELD naming the service's repair writer, whose lease it was told to wait out (the
    whole TTL), though the repair gives the lease back within milliseconds."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.append(sid, lease, open_turn_log())
    client.release_lease(lease)
    queued = server.service.committer._queue
    gate = hold_writer(server)  # the repair's lease and the resume's wait in queue order
    try:
        repair = asyncio.run_coroutine_threadsafe(repair_session(server.service, sid), server.loop)
        eventually(lambda: len(queued), lambda n: n == 1)
        with ThreadPoolExecutor(1) as pool:
            resuming = pool.submit(client.resume, sid)
            eventually(lambda: len(queued), lambda n: n == 2)
            gate.set()
            assert repair.result(timeout=30)
            resumed = resuming.result(timeout=30)
    finally:
        gate.set()
    assert resumed.repair_seqs == [] and resumed.end_seed_seq == 10 and resumed.next_seq == 11
    kinds = [e.data["reason"]["kind"] for e in client.read_events(sid) if e.type == "turn/end"]
    assert kinds == ["interrupted"]  # repaired once, by the service
    assert client.report_header(sid, resumed.lease, {"config": {"model": "m"}}).reason == "initial"


def test_a_repair_lease_is_given_back_when_its_work_fails(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`RepairLease.around` holds a repair's lease where compiled code may not use `async with`
    (docs/architecture/compiled-build.md): the work's own exception leaves it, and only after
    the lease was given back, so a writer takes it at once."""
    client.create_session(sid)

    class Refused(Exception):
        pass

    async def work(grant: Grant) -> None:
        raise Refused(grant.record.id)

    with pytest.raises(Refused, match=sid):
        server.call(server.service.leases.repair_lease(sid).around(work))
    lease = client.acquire_lease(sid)
    client.release_lease(lease)


def test_resume_refused_while_another_writer_is_live(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid, writer_id="live"), pytest.raises(WriterHeld):
        client.resume(sid)


def test_fork_of_a_fork_cut_inside_its_inherited_prefix(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([system("s"), *[note(i) for i in range(18)]]).result()
    child = client.fork(sid, 18, f"{sid}-c")
    grandchild = client.fork(child.id, 6, f"{sid}-g")  # cut below the child's own events
    events = list(client.read_events(grandchild.id))
    assert [e.seq for e in events] == list(range(8))
    assert events[:7] == list(client.read_events(sid, to_seq=6))
    assert events[7].type == "session/end-seed"
    assert [m["content"] for m in client.model_history(grandchild.id)] == ["s"]


@pytest.mark.parametrize("turn_open", [False, True], ids=["after-the-last-turn", "inside-a-long-turn"])
def test_a_fork_far_past_the_last_turn_boundary_reads_a_bounded_tail(
    server: ServerThread, client: SessionLogClient, sid: str, monkeypatch: pytest.MonkeyPatch, turn_open: bool
) -> None:
    """A fork costs the same whatever the prefix (SPEC §8), also when its cut lies thousands of
    log-only events past the last `turn/start` or `turn/end`: the fork read every one of them
    back to the boundary (100,000 events: 6.7 s, where a short session forks in 15 ms). It
    reads a few pages back, then seeds the fork from the fold at the cut, which starts at the
    latest snapshot; the `forked` repair is the same."""
    client.create_session(sid)
    log = open_turn_log() if turn_open else [*open_turn_log()[:2], turn_start(1), turn_end(1)]
    with client.writer(sid) as writer:
        writer.append(log).result()
        for first in range(0, 5000, 1000):
            writer.append([note(n) for n in range(first, first + 1000)]).result()
    head = client.get_session(sid).next_seq - 1
    reader = server.service.reader
    read = reader.read
    fetched: list[int] = []

    async def counting(*args: object, **kwargs: object) -> list:
        events = await read(*args, **kwargs)
        fetched.append(len(events))
        return events

    monkeypatch.setattr(reader, "read", counting)
    fork = client.fork(sid, head, f"{sid}-f")
    monkeypatch.undo()
    # A few pages back, then at most the tail after a snapshot; never all 5,000.
    assert sum(fetched) <= FORK_SCAN_PAGES * FORK_SCAN_PAGE + server.settings.snapshot_every_events
    own = list(client.read_events(fork.id, from_seq=head + 1))
    expected = (
        ["session/end-seed", "tool/result", "tool/result", "step/end", "turn/end"]
        if turn_open
        else ["session/end-seed"]
    )
    assert [e.type for e in own] == expected and fork.repair_seqs == [e.seq for e in own[1:]]
    if turn_open:
        assert [e.data["error"]["code"] for e in own[1:3]] == ["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"]
        assert own[1].source_event_seqs == (5,) and own[4].data["reason"] == {"kind": "forked"}
    cut_time = next(iter(client.read_events(sid, from_seq=head))).time
    assert {e.time for e in own} == {cut_time}  # the time of the event at the cut


def heard(seq: int, calls: tuple[tuple[str, str], ...], *sources: int) -> dict:
    """A voice harness's replace of the assistant message at `seq` by the part the user heard,
    keeping the tool calls in `calls` (the ones it had not dropped)."""
    event = assistant(1, 1, "checking", calls=calls)
    event["data"]["interrupted"] = True
    return {**event, "surfaceOp": {"op": "replace", "startSeq": seq, "endSeq": seq}, "sourceEventSeqs": [seq, *sources]}


def answered_calls(history: list[dict]) -> tuple[list[str], list[str]]:
    """The toolCall ids of a history's assistant messages, and the ids its tool results answer."""
    asked = [
        block["id"]
        for message in history
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "toolCall"
    ]
    return asked, [message["toolCallId"] for message in history if message["role"] == "toolResult"]


def test_repair_answers_only_the_tool_calls_left_on_the_surface(client: SessionLogClient, sid: str) -> None:
    # The user barges in while call a runs: the harness replaces the answer by what was heard,
    # keeping a (already started) and dropping b (never started), twice, then crashes.
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), heard(4, (("a", "ls"),))]).result()
        writer.append([heard(6, (("a", "ls"),), 4)]).result()
    shown = client.model_history(sid, with_repair=True)
    child = client.fork(sid, 7)
    info = client.resume(sid, takeover=True)
    repair = list(client.read_events(sid, from_seq=8))[: len(info.repair_seqs)]
    assert [e.type for e in repair] == ["tool/result", "step/end", "turn/end"]
    assert repair[0].data["message"]["toolCallId"] == "a"
    assert repair[0].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    history = client.model_history(sid)
    assert answered_calls(history) == (["a"], ["a"])  # no result for b, which the model never saw
    assert shown == history
    forked = list(client.read_events(child.id, from_seq=8))
    assert [e.type for e in forked] == ["session/end-seed", "tool/result", "step/end", "turn/end"]
    assert answered_calls(client.model_history(child.id)) == (["a"], ["a"])


def test_repair_writes_no_result_for_calls_replaced_away(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), heard(4, ())]).result()
    assert answered_calls(client.model_history(sid, with_repair=True)) == ([], [])
    info = client.resume(sid, takeover=True)
    assert [e.type for e in client.read_events(sid, from_seq=7)][: len(info.repair_seqs)] == ["step/end", "turn/end"]
    assert answered_calls(client.model_history(sid)) == ([], [])


def test_a_result_for_a_call_a_replace_dropped_is_refused(client: SessionLogClient, sid: str) -> None:
    # The answer is cut to what the user heard, keeping a and dropping b: the model history no
    # longer holds b's toolCall block, so a result for b would stand in it with no call before it.
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), heard(4, (("a", "ls"),))]).result()
        with pytest.raises(ValidationError) as refused:
            writer.append([tool_result(1, 1, "a", "ok"), tool_result(1, 1, "b", "done")]).result()
    error = refused.value
    assert error.reason == "TOOL_RESULT_CALL_DROPPED"
    assert error.metadata["replaced_by"] == "6" and error.metadata["event_index"] == "1"
    assert "seq 6" in error.message and "'b'" in error.message
    assert client.get_session(sid).next_seq == 7  # nothing of the batch was written
    with client.writer(sid) as writer:
        writer.append([tool_result(1, 1, "a", "ok")]).result()
    assert answered_calls(client.model_history(sid)) == (["a"], ["a"])


def test_replacing_a_replaced_seq_names_the_replace_that_took_it(client: SessionLogClient, sid: str) -> None:
    # A voice harness that keeps the seq of the answer it first logged replaces it a second
    # time: the refusal says which replace took that seq off the surface, and which node stands
    # for it now.
    client.create_session(sid)

    def refused(batch: list[dict]) -> ValidationError:
        with client.writer(sid) as writer, pytest.raises(ValidationError) as info:
            writer.append(batch).result()
        return info.value

    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), heard(4, (("a", "ls"),))]).result()
    once = refused([heard(4, ())])
    with client.writer(sid) as writer:
        writer.append([heard(6, (("a", "ls"),), 4)]).result()
    twice = refused([note(1), heard(4, ())])
    log_only = refused([heard(2, ())])
    assert once.reason == "SURFACE_RANGE_NOT_FOUND" and once.metadata["replaced_by"] == "6"
    assert "start seq 4 is not on the surface: the replace at seq 6 took it off; replace seq 6" in once.message
    assert twice.metadata["replaced_by"] == "6" and twice.metadata["event_index"] == "1"
    assert "the replace at seq 6 took it off, then the one at seq 7 took seq 6 off; replace seq 7" in twice.message
    assert "replaced_by" not in log_only.metadata
    assert "seq 2 is a log-only event, never on the surface" in log_only.message
    assert client.get_session(sid).next_seq == 8  # nothing of the refused batches was written


def test_a_replace_that_leaves_a_result_without_its_call_is_refused(client: SessionLogClient, sid: str) -> None:
    # Call a was answered, then the answer is cut to what the user heard without a: the result
    # would stay in the model history with no call before it. Refused, nothing written, and a
    # cut that keeps a goes in.
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), tool_result(1, 1, "a", "ok")]).result()
        with pytest.raises(ValidationError) as refused:
            writer.append([heard(4, ())]).result()
    error = refused.value
    assert error.reason == "REPLACE_ORPHANS_TOOL_RESULT"
    assert error.metadata["result_seq"] == "6" and "'a'" in error.message
    assert client.get_session(sid).next_seq == 7
    with client.writer(sid) as writer:
        writer.append([heard(4, (("a", "ls"),))]).result()
    assert answered_calls(client.model_history(sid)) == (["a"], ["a"])


def test_a_replace_that_takes_a_result_off_while_its_call_stays_is_refused(client: SessionLogClient, sid: str) -> None:
    # Call a was answered, then its result alone is summarised into a user message: the model
    # history would hold call a with no result after it. Refused, nothing written, and a trim
    # of the result goes in.
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([*open_turn_log(), tool_result(1, 1, "a", "ok")]).result()
        summary = {**user("a listed the files"), "surfaceOp": {"op": "replace", "startSeq": 6, "endSeq": 6}}
        with pytest.raises(ValidationError) as refused:
            writer.append([{**summary, "sourceEventSeqs": [6]}]).result()
    error = refused.value
    assert error.reason == "REPLACE_DROPS_TOOL_RESULT"
    assert error.metadata["result_seq"] == "6" and "'a'" in error.message
    assert client.get_session(sid).next_seq == 7
    trim = {**tool_result(1, 1, "a", "[trimmed]"), "surfaceOp": {"op": "replace", "startSeq": 6, "endSeq": 6}}
    with client.writer(sid) as writer:
        writer.append([{**trim, "sourceEventSeqs": [6]}]).result()
    assert answered_calls(client.model_history(sid)) == (["a", "b"], ["a"])
