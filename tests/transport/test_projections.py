"""Header reports and projections through a real server, on SQLite and PostgreSQL (issue 3)."""

from __future__ import annotations

import hashlib

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core import jsonvalue
from sessionlog.core.errors import NotFound, ValidationError
from sessionlog.v1 import session_service_pb2 as pb
from tests.support.events import (
    assistant,
    step_end,
    step_start,
    system,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user,
)
from tests.support.servers import ServerThread

USAGE = {
    "input": 100,
    "output": 20,
    "cacheRead": 50,
    "cacheWrite": 5,
    "totalTokens": 175,
    "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0.01, "cacheWrite": 0.02, "total": 0.33},
}
HEADER = {"config": {"provider": "acme", "model": "m-1", "maxTokens": 1000}, "tools": [{"name": "bash"}]}


def one_turn(turn: int, text: str) -> list[dict]:
    return [
        user(text),
        turn_start(turn),
        step_start(turn, 1),
        assistant(turn, 1, "", calls=((f"c{turn}", "bash"),), usage=USAGE),
        tool_call(turn, 1, f"c{turn}", "bash"),
        tool_result(turn, 1, f"c{turn}", f"out {turn}"),
        step_end(turn, 1),
        step_start(turn, 2),
        assistant(turn, 2, f"done {turn}", usage=USAGE),
        step_end(turn, 2),
        turn_end(turn),
    ]


def test_header_reasons_initial_nothing_change_series_resume(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        first = writer.report_header(HEADER).result()
        assert (first.reason, first.appended, first.starts_series) == ("initial", True, False)
        writer.append([system("be brief"), *one_turn(1, "hi")]).result()
        same = writer.report_header(HEADER).result()
        assert (same.reason, same.appended, same.header_seq) == (None, False, first.header_seq)
        changed = writer.report_header({**HEADER, "config": {**HEADER["config"], "model": "m-2"}}).result()
        assert changed.reason == "change" and changed.changed_fields == ["model"]
        # a compaction: replace the range after node 0 by a summary
        history_seqs = client.surface(sid)["nodes"]
        summary = {
            "type": "user/message",
            "data": {"message": {"role": "user", "content": "summary"}, "source": {"kind": "compaction"}},
            "surfaceOp": {"op": "replace", "startSeq": history_seqs[1], "endSeq": history_seqs[-1]},
            "sourceEventSeqs": history_seqs[1:],
        }
        writer.append([summary]).result()
        series = writer.report_header({**HEADER, "config": {**HEADER["config"], "model": "m-2"}}).result()
        assert (series.reason, series.starts_series) == ("series", True)
    with client.writer(sid) as again:
        resumed = again.report_header(HEADER).result()
        assert resumed.reason == "resume" and resumed.changed_fields == ["model"]
    kinds = [
        (e.data["reason"], e.data.get("startsSeries")) for e in client.read_events(sid) if e.type == "request/header"
    ]
    assert kinds == [("initial", None), ("change", None), ("series", None), ("resume", None)]


@pytest.mark.parametrize("key", ["tools", "messages"])
def test_a_config_holding_the_requests_own_keys_is_refused(client: SessionLogClient, sid: str, key: str) -> None:
    """The request is `{...config, messages, tools}`: a `config.tools` was accepted, logged as a
    `change`, and then dropped from the request (a `config.messages` replaced by the history), so
    two different headers gave the same request and sha256. Such a header is refused now."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    client.report_header(sid, lease, HEADER)
    with pytest.raises(ValidationError) as refused:
        client.report_header(sid, lease, {"config": {**HEADER["config"], key: [{"name": "read"}]}})
    assert (refused.value.reason, refused.value.field) == ("HEADER_CONFIG_RESERVED_KEY", f"header.config.{key}")
    assert [e.type for e in client.read_events(sid)] == ["request/header"]  # nothing logged
    assert client.request(sid)["request"]["tools"] == HEADER["tools"]


def test_projections_follow_the_log_and_at_seq(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.report_header(HEADER).result()
        writer.append([system("be brief"), *one_turn(1, "hi")]).result()
        writer.append(one_turn(2, "again")).result()
    events = list(client.read_events(sid))
    history = client.model_history(sid)
    assert [m["role"] for m in history] == ["system", "user", "assistant", "toolResult", "assistant"] * 1 + [
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]
    at = next(e.seq for e in events if e.type == "turn/end")
    assert len(client.model_history(sid, at_seq=at)) == 5
    view = client.request(sid)
    assert view["request"]["model"] == "m-1" and view["request"]["tools"] == HEADER["tools"]
    assert view["request"]["messages"] == history
    assert hashlib.sha256(jsonvalue.canonical(view["request"])).hexdigest() == view["sha256"]
    assert client.request(sid) == view  # same prefix, same bytes
    earlier = client.request(sid, at_seq=at)
    assert earlier["request"]["messages"] == history[:5]  # the later request extends the earlier one
    stats = client.stats(sid)
    assert stats["turns"] == 2 and stats["steps"] == 4 and stats["toolCalls"] == 2
    assert stats["inputTokens"] == 400 and stats["cacheReadTokens"] == 200 and stats["costUsd"] == pytest.approx(1.32)
    assert stats["model"] == "m-1" and stats["provider"] == "acme" and stats["events"] == len(events)
    rows = client.transcript(sid)
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert all(r["replacedBy"] is None for r in rows)
    with pytest.raises(NotFound):
        client.model_history(sid, at_seq=len(events) + 5)


def test_replaced_events_leave_history_but_stay_in_transcript(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([system("sys"), *one_turn(1, "hi")]).result()
        nodes = client.surface(sid)["nodes"]
        result_seq = next(e.seq for e in client.read_events(sid) if e.type == "tool/result")
        trimmed = tool_result(1, 1, "c1", "[trimmed]")
        trimmed["surfaceOp"] = {"op": "replace", "startSeq": result_seq, "endSeq": result_seq}
        trimmed["sourceEventSeqs"] = [result_seq]
        trim_seq = writer.append([trimmed]).result().seqs[0]
    history = client.model_history(sid)
    assert history[3]["content"][0]["text"] == "[trimmed]"
    assert client.surface(sid) == {
        "nodes": [*nodes[:3], trim_seq, *nodes[4:]],
        "replaceGeneration": 1,
        "atSeq": trim_seq,
    }
    rows = {r["seq"]: r for r in client.transcript(sid)}
    assert rows[result_seq]["replacedBy"] == trim_seq
    assert client.stats(sid)["replaces"] == 1


def test_bad_surface_ops_are_refused(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append([system("sys"), user("a")]).result()
    lease = client.acquire_lease(sid)
    bad = user("x")
    bad["surfaceOp"] = {"op": "replace", "startSeq": 0, "endSeq": 1}
    bad["sourceEventSeqs"] = [0, 1]
    with pytest.raises(ValidationError):  # node 0 can only be replaced by a system/message
        client.append(sid, lease, [bad])
    missing = user("y")
    missing["surfaceOp"] = {"op": "replace", "startSeq": 1, "endSeq": 1}
    with pytest.raises(ValidationError):  # no sourceEventSeqs
        client.append(sid, lease, [missing])
    assert client.get_session(sid).next_seq == 2


def test_history_copy_fetches_only_the_tail_until_a_replace(client: SessionLogClient, sid: str) -> None:
    client.create_session(sid)
    copy = client.history_copy(sid)
    with client.writer(sid) as writer:
        writer.append([system("sys"), user("one")]).result()
        assert [m["content"] for m in client.refresh_history(copy)] == ["sys", "one"]
        writer.append([user("two")]).result()
        request = copy.request()
        assert request.from_index == 2 and request.if_generation == 0
        response = client.stub.GetModelHistory(request)
        assert (response.from_index, response.message_count) == (2, 3)
        assert jsonvalue.loads(response.messages_json) == [{"role": "user", "content": "two"}]
        assert [m["content"] for m in client.refresh_history(copy)] == ["sys", "one", "two"]
        summary = user("summary")
        summary["surfaceOp"] = {"op": "replace", "startSeq": 1, "endSeq": 2}
        summary["sourceEventSeqs"] = [1, 2]
        writer.append([summary]).result()
    assert [m["content"] for m in client.refresh_history(copy)] == ["sys", "summary"]
    assert copy.generation == 1
    assert client.refresh_history(copy) == client.model_history(sid)


def test_history_copy_rereads_only_from_the_first_message_a_replace_changed(client: SessionLogClient, sid: str) -> None:
    # A voice harness replaces the tail (what the user heard) every few turns: its copy fetches
    # the messages from the first one a replace changed, not the whole history again.
    client.create_session(sid)
    copy = client.history_copy(sid)

    def heard(seq: int, text: str) -> dict:
        return {**user(text), "surfaceOp": {"op": "replace", "startSeq": seq, "endSeq": seq}, "sourceEventSeqs": [seq]}

    def refetched() -> tuple[int, list[str]]:
        response = client.stub.GetModelHistory(copy.request())
        copy.apply(response)
        assert copy.complete and copy.messages == client.model_history(sid)
        return response.from_index, [m["content"] for m in jsonvalue.loads(response.messages_json)]

    with client.writer(sid) as writer:
        writer.append([system("sys"), *(user(f"u{n}") for n in range(1, 9))]).result()  # seqs 0..8
        assert refetched() == (0, ["sys", *(f"u{n}" for n in range(1, 9))])
        writer.append([heard(8, "u8 heard"), user("u9")]).result()  # seqs 9, 10
        assert refetched() == (8, ["u8 heard", "u9"])
        writer.append([heard(9, "u8 heard twice"), heard(3, "u3 fixed")]).result()  # seqs 11, 12
        assert refetched() == (3, ["u3 fixed", "u4", "u5", "u6", "u7", "u8 heard twice", "u9"])
        assert copy.generation == 3
        writer.append([user("u10"), heard(1, "u1 fixed"), heard(13, "u10 heard")]).result()  # seqs 13..15
        stale = client.history_copy(sid)  # a copy read at generation 3 that holds its 2 first messages
        stale.messages, stale.generation = copy.messages[:2], 3
        response = client.stub.GetModelHistory(stale.request())
        assert response.from_index == 1  # the first changed message, never past the copy's end
        assert refetched()[0] == 1


def test_a_history_copy_after_a_restart_rereads_only_from_the_first_changed_message(fresh_db: str, sid: str) -> None:
    # The fold remembers where its latest replaces started; a fold loaded from a snapshot (after
    # a restart, on another instance) remembered none, and a copy read before a replace was
    # answered with the whole history again.
    def heard(seq: int, text: str) -> dict:
        return {**user(text), "surfaceOp": {"op": "replace", "startSeq": seq, "endSeq": seq}, "sourceEventSeqs": [seq]}

    server = ServerThread(fresh_db, snapshot_every_events=1)  # a snapshot after every batch
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            copy = client.history_copy(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, [system("sys"), *(user(f"u{n}") for n in range(1, 9))])  # seqs 0..8
            client.refresh_history(copy)
            client.append(sid, lease, [heard(6, "u6 heard"), user("u9")])  # seqs 9, 10: stored with a snapshot
    finally:
        server.stop(grace=0.5)
    again = ServerThread(fresh_db, snapshot_every_events=1)  # loads the session from that snapshot
    try:
        with SessionLogClient(again.target) as client:
            response = client.stub.GetModelHistory(copy.request())
            assert response.from_index == 6  # where it was 0: the whole history again
            assert [m["content"] for m in jsonvalue.loads(response.messages_json)] == ["u6 heard", "u7", "u8", "u9"]
            copy.apply(response)
            assert copy.complete and copy.messages == client.model_history(sid)
    finally:
        again.stop(grace=0.5)


def test_every_projection_of_an_empty_session_ends_at_no_seq(client: SessionLogClient, sid: str) -> None:
    """A session without events covers no seq: every projection's `at_seq` is unset (None in the
    clients), as GetRequest's was alone, where the history, transcript, stats and surface said
    0, the seq of an event that does not exist (`at_seq=0` is SEQ_NOT_FOUND there). With
    events, each covers the head, and `at_seq=0` covers seq 0."""
    client.create_session(sid)

    def covered() -> list[int | None]:
        scope = pb.ProjectionScope(session_id=sid)
        responses = [
            client.stub.GetModelHistory(pb.GetModelHistoryRequest(scope=scope)),
            client.stub.GetTranscript(pb.GetTranscriptRequest(scope=scope)),
            client.stub.GetRequest(pb.GetRequestRequest(scope=scope)),
            client.stub.GetStats(pb.GetStatsRequest(scope=scope)),
            client.stub.GetSurface(pb.GetSurfaceRequest(scope=scope)),
        ]
        return [r.at_seq if r.HasField("at_seq") else None for r in responses]

    copy = client.history_copy(sid)
    client.refresh_history(copy)
    assert covered() == [None] * 5
    assert client.surface(sid)["atSeq"] is None and client.request(sid)["atSeq"] is None
    assert copy.at_seq is None
    with pytest.raises(NotFound):
        client.surface(sid, at_seq=0)
    with client.writer(sid) as writer:
        head = writer.append([user("one")]).result().seqs[-1]
    client.refresh_history(copy)
    assert covered() == [head] * 5
    assert client.surface(sid)["atSeq"] == copy.at_seq == head
    assert client.surface(sid, at_seq=0)["atSeq"] == 0
