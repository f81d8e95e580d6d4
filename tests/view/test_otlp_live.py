"""`sessionlog otlp`: the session's spans reach a real OTLP/HTTP receiver through the official
SDK exporter, once or turn by turn while following; what arrives equals `otlp_traces`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bench.procs import free_port
from sessionlog.client import SessionLogClient
from sessionlog.core.costs import SessionCost
from sessionlog.core.formats.otlp import otlp_traces, span_id, trace_id
from tests.support.events import assistant, step_end, step_start, system, turn_end, turn_start, user
from tests.support.fixtures import pi_generated_sessions
from tests.support.otlp import Receiver, span_attr, spans_of
from tests.support.scripted import usage, write_scripted
from tests.support.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def expected(client: SessionLogClient, session_id: str) -> list[tuple[str, str, str, str]]:
    spans = otlp_traces(list(client.read_events(session_id)), session_id)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return [(s["traceId"], s["spanId"], s.get("parentSpanId", ""), s["name"]) for s in spans]


def command(server: ServerThread, *args: str) -> list[str]:
    return [sys.executable, "-m", "sessionlog", "--server", server.target, "otlp", *args]


@contextmanager
def following(server: ServerThread, sid: str, receiver: Receiver, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`sessionlog otlp SID --follow` sending to `receiver`, killed if the block leaves it running."""
    follower = subprocess.Popen(
        command(server, sid, "--endpoint", receiver.url, "--follow", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ},
    )
    try:
        yield follower
    finally:
        if follower.poll() is None:
            follower.kill()


def test_one_shot_export_sends_every_span_once(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    write_scripted(client, sid)  # the session, not its fork: a fork's trace holds its own events only
    done = subprocess.run(
        command(server, sid, "--endpoint", receiver.url), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert sorted(receiver.spans()) == sorted(expected(client, sid))
    assert done.stdout.strip() == f'{{"spans":{len(receiver.spans())}}}'
    chat = next(
        s
        for r in receiver.requests
        for rs in r.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        if s.name == "chat m-1"
    )
    keys = {kv.key for kv in chat.attributes}
    assert {"gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.provider.name"} <= keys
    # A service without tokens keeps every session in the default namespace, and says so.
    resources = receiver.resources(trace_id(sid))
    assert resources and all(r == {"service.name": "sessionlog", "sessionlog.namespace": "default"} for r in resources)


def test_a_dead_endpoint_is_one_line_of_the_cli_not_the_exporters_retries(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """The SDK exporter printed a "Transient error ... retrying in 0.87s." line per retry and its
    own failure line before the command's error: its lines are held, and the one
    `sessionlog: error:` line says what it said last and its last error."""
    write_scripted(client, sid)
    endpoint = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    done = subprocess.run(
        command(server, sid, "--endpoint", endpoint),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3"},  # retries for 3 s, not 10
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(
        f"sessionlog: error: the OTLP exporter refused 6 span(s) (FAILURE) sending to {endpoint}: "
    )
    assert "retried, the last error: " in done.stderr and "Connection refused" in done.stderr
    assert "Transient error" not in done.stderr


@pytest.mark.parametrize("endpoint", ["notaurl", "collector:4318/v1/traces", "http://:4318/x", "http://h:99999/x"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_anything_is_read(
    server: ServerThread, sid: str, endpoint: str
) -> None:
    """The exporter takes any string and fails on every export; the service's own setting was
    already checked at start-up, the command's option was not. A usage mistake: status 2."""
    done = subprocess.run(
        command(server, sid, "--endpoint", endpoint), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 2
    assert f"--endpoint {endpoint!r} is not an http(s) URL" in done.stderr
    assert done.stdout == ""


def append_turn(client: SessionLogClient, sid: str, lease: Any, n: int, *, ended: bool = True) -> None:
    """Turn `n` of a session (the first with the system prompt): a question and its answer."""
    answer = assistant(n, 1, text=f"answer {n}", usage=usage(100 * n, 50 * n, 10))
    events = [user(f"question {n}"), turn_start(n), step_start(n, 1), answer, step_end(n, 1)]
    client.append(sid, lease, ([system("prompt")] if n == 1 else []) + events + ([turn_end(n)] if ended else []))


def wait_for_turns(receiver: Receiver, count: int) -> None:
    deadline = time.monotonic() + 30
    # Distinct spans: an export the exporter retried (a slow receiver) arrives twice, and two
    # copies of turn 1 must not pass for turn 2 (the stop would then come before it was sent).
    while len({s[1] for s in receiver.spans() if s[3] == "invoke_agent"}) < count:
        assert time.monotonic() < deadline, receiver.spans()
        time.sleep(0.05)


def test_follow_sends_each_turn_as_it_ends(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    client.create_session(sid)
    lease = client.acquire_lease(sid)

    def turn(n: int) -> None:
        append_turn(client, sid, lease, n)

    def wait_for(count: int) -> None:
        wait_for_turns(receiver, count)

    turn(1)
    with following(server, sid, receiver) as follower:
        wait_for(1)  # replayed
        turn(2)
        wait_for(2)  # live
        assert not any(name.startswith("session ") for *_, name in receiver.spans())  # the root comes last
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert receiver.spans()[-1][3] == f"session {sid}"
    assert sorted(receiver.spans()) == sorted(expected(client, sid))
    # Root, two turns, two model calls; a next run would go on from the session's end.
    assert json.loads(out) == {"spans": 5, "resume_from": client.get_session(sid).next_seq}


def test_a_follower_outlives_a_collector_that_refuses_and_goes_on_where_it_stopped(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    """A collector that answers 500 (the SDK exporter does not retry that), or is down longer
    than the exporter's own retries, ended the follower (status 1) at the first turn it
    refused. Now the turn is tried again, with a warning, until it is taken. A stop leaves the
    open turn unsent (it went out cut short, then again whole under the same span id from the
    next run) and says where to go on from: the next run, given it, sends no turn twice."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    append_turn(client, sid, lease, 1)
    with following(server, sid, receiver) as follower:
        wait_for_turns(receiver, 1)
        receiver.refuse = 2
        append_turn(client, sid, lease, 2)
        wait_for_turns(receiver, 2)  # after two refusals
        turn3_seq = client.get_session(sid).next_seq
        append_turn(client, sid, lease, 3, ended=False)
        time.sleep(1)
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert receiver.refused == 2
    warnings = err.splitlines()
    assert len(warnings) == 2 and all(
        w.startswith("sessionlog: warning: the OTLP endpoint refused 2 span(s)") for w in warnings
    )
    assert "trying again in 1 s" in warnings[0] and "trying again in 2 s" in warnings[1]
    stopped = json.loads(out)
    assert stopped == {"spans": 5, "resume_from": turn3_seq}  # two turns, two model calls, the root
    assert [name for *_, name in receiver.spans()].count("invoke_agent") == 2  # not the open turn 3
    first_run = {span_id for _, span_id, parent, _ in receiver.spans() if parent}  # the root comes again
    receiver.requests.clear()
    client.append(sid, lease, [turn_end(3)])
    with following(server, sid, receiver, "--from", str(stopped["resume_from"])) as follower:
        wait_for_turns(receiver, 1)
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    want = [span for span in expected(client, sid) if span[1] not in first_run]  # turn 3 whole, the root
    assert sorted(receiver.spans()) == sorted(want) and len(want) == 3
    assert json.loads(out) == {"spans": 3, "resume_from": client.get_session(sid).next_seq}


def test_a_stop_while_a_turn_is_being_sent_sends_it_once(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    # SIGTERM while the exporter waits for the endpoint's answer to a turn: the endpoint has
    # the turn, and it must not come again with the root (it did, after it, before the fix).
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    events = [user("question"), turn_start(1), step_start(1, 1), assistant(1, 1, text="answer")]
    client.append(sid, lease, [system("prompt"), *events, step_end(1, 1)])
    receiver.answer_after_s = 2.0
    with following(server, sid, receiver) as follower:
        time.sleep(3)  # most likely subscribed by now; if not, its replay sends the turn alike
        client.append(sid, lease, [turn_end(1)])
        deadline = time.monotonic() + 30
        while not receiver.requests:  # kept, and not answered for two seconds
            assert time.monotonic() < deadline
            time.sleep(0.02)
        follower.send_signal(signal.SIGTERM)
        receiver.answer_after_s = 0.0
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert [s[3] for s in receiver.spans()][-1] == f"session {sid}"
    assert sorted(receiver.spans()) == sorted(expected(client, sid))
    assert json.loads(out)["spans"] == len(receiver.spans())


def test_the_service_sends_each_turn_as_it_ends(db_url: str, sid: str, receiver: Receiver) -> None:
    server = ServerThread(db_url, otlp_endpoint=receiver.url)
    try:
        with SessionLogClient(server.target) as client:
            write_scripted(client, sid)  # four turns, the last closed by the resume's repair
            deadline = time.monotonic() + 30
            # This session's trace only: the server's start-up repair may close another test's
            # abandoned turn on the shared PostgreSQL database, and send that turn's spans too.
            while sum(1 for s in receiver.spans(trace=trace_id(sid)) if s[3] == "invoke_agent") < 4:
                assert time.monotonic() < deadline, receiver.spans()
                time.sleep(0.05)
            want = [span for span in expected(client, sid) if span[3] != f"session {sid}"]
    finally:
        server.stop()
    got = receiver.spans(trace=want[0][0])  # the parent's trace
    assert sorted(got) == sorted(want)  # each span once, as the export has it; the root is not sent live
    # Under the resource clients send it under: the default namespace, on a service without tokens.
    resources = receiver.resources(want[0][0])
    assert resources and all(r == {"service.name": "sessionlog", "sessionlog.namespace": "default"} for r in resources)


def test_the_service_sends_an_imported_sessions_turns_on_pis_times(db_url: str, sid: str, receiver: Receiver) -> None:
    """An imported session's turns go out as the import's batches commit them, each span laid on
    the times Pi recorded, as the whole export lays it (the import commits at one instant)."""
    session = next(s for s in pi_generated_sessions() if s.name.startswith("2025-10-07"))
    server = ServerThread(db_url, otlp_endpoint=receiver.url)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sessionlog", "--server", server.target, "import", str(session), "--id", sid],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        with SessionLogClient(server.target) as client:
            document = otlp_traces(list(client.read_events(sid)), sid)
        spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
        want = sorted(
            (s["spanId"], s.get("parentSpanId", ""), s["name"], int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]))
            for s in spans
            if "parentSpanId" in s  # the root is not sent live
        )
        deadline = time.monotonic() + 30
        while len(receiver.timed(trace_id(sid))) < len(want):
            assert time.monotonic() < deadline, receiver.timed(trace_id(sid))
            time.sleep(0.05)
    finally:
        server.stop()
    assert sorted(receiver.timed(trace_id(sid))) == want
    assert sum(end > start for *_, start, end in want) > len(want) // 2  # not the import's one instant


def test_after_a_restart_the_open_turn_is_sent_whole(fresh_db: str, sid: str, receiver: Receiver) -> None:
    # Only this session's trace counts: on the shared PostgreSQL database the servers' repairs
    # may close another test's abandoned turn, and that turn's spans go out too.
    def spans() -> list[tuple[str, str, str, str]]:
        return receiver.spans(trace=trace_id(sid))

    first = ServerThread(fresh_db, otlp_endpoint=receiver.url)
    try:
        with SessionLogClient(first.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid, writer_id="w")
            turn1 = [system("prompt"), user("q1"), turn_start(1), step_start(1, 1)]
            turn1 += [assistant(1, 1, text="a1", usage=usage(100, 0, 5)), step_end(1, 1), turn_end(1)]
            client.append(sid, lease, turn1)
            client.append(sid, lease, [user("q2"), turn_start(2), step_start(2, 1)])
    finally:
        first.stop()
    assert [s[3] for s in spans()] == ["invoke_agent", "chat"]  # turn 1 (no model on the route)
    receiver.requests.clear()
    second = ServerThread(fresh_db, otlp_endpoint=receiver.url, repair_on_start=False)
    try:
        with SessionLogClient(second.target) as client:
            lease = client.acquire_lease(sid, writer_id="w", takeover=True)
            answer = assistant(2, 1, text="a2", usage=usage(100, 100, 5))
            client.append(sid, lease, [answer, step_end(2, 1), turn_end(2)])
            deadline = time.monotonic() + 30
            while not any(s[3] == "invoke_agent" for s in spans()):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            want = expected(client, sid)
    finally:
        second.stop()
    # Turn 2 went out whole, its start included, though it began before the restart; turn 1
    # was not sent again.
    assert sorted(spans()) == sorted(s for s in want if s[1] in {g[1] for g in spans()})
    turn_spans = [s for s in spans() if s[3] == "invoke_agent"]
    assert len(turn_spans) == 1 and len(spans()) == 2
    assert {s[1] for s in want if s[3] == "invoke_agent"} >= {turn_spans[0][1]}


def test_the_services_export_failure_names_the_seqs_left_unsent(db_url: str, sid: str, receiver: Receiver) -> None:
    """The warning of a live export the collector refused named the session only: which turn
    went unsent (for `sessionlog otlp --from` to send it) was for the operator to guess."""
    receiver.refuse = 1000  # every attempt of the exporter's
    server = ServerThread(db_url, otlp_endpoint=receiver.url)
    try:
        with capture_logs() as logs, SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            append_turn(client, sid, lease, 1)
            deadline = time.monotonic() + 30
            while not (failed := [e for e in logs if e["event"] == "live OTLP export failed"]):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            head, end = client.get_session(sid).next_seq - 7, client.get_session(sid).next_seq - 1
    finally:
        server.stop()
    assert failed[0]["session_id"] == sid
    assert failed[0]["seqs"] == [head, end]  # the turn's batch: its system prompt to its turn/end
    assert "refused" in failed[0]["error"]


def test_a_follower_stopped_while_the_collector_refuses_says_why_and_where_to_go_on(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    """A stop during the waits between attempts ends with status 1, the collector's last answer
    (the error said only "FAILURE" once each warning had taken its words), and the resume point."""
    client.create_session(sid)
    lease = client.acquire_lease(sid)
    receiver.refuse = 1000
    with following(server, sid, receiver) as follower:
        append_turn(client, sid, lease, 1)
        deadline = time.monotonic() + 30
        while receiver.refused < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=30)
    assert (follower.returncode, out) == (1, "")
    error = err.splitlines()[-1]
    assert error.startswith("sessionlog: error: the OTLP exporter refused"), err
    assert "500" in error and error.endswith("; --from 0 goes on from the turn not sent"), error


def test_sending_from_past_the_logs_end_is_refused_as_a_read_from_there_is(
    server: ServerThread, client: SessionLogClient, sid: str, receiver: Receiver
) -> None:
    """`--from` past the session's next seq skipped every turn up to it without a word (a typo,
    another session's seq); `tail --from` and `events --from` refuse it."""
    client.create_session(sid)
    append_turn(client, sid, client.acquire_lease(sid), 1)
    next_seq = client.get_session(sid).next_seq
    done = subprocess.run(
        command(server, sid, "--endpoint", receiver.url, "--from", str(next_seq + 5)),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f"sessionlog: error: FROM_SEQ_PAST_HEAD: cannot send session {sid!r} from seq {next_seq + 5}: "
        f"its next seq is {next_seq}"
    ), done.stderr
    assert receiver.requests == []


def test_a_forks_spans_are_one_set_whoever_sends_them(db_url: str, sid: str, receiver: Receiver) -> None:
    """A fork cut inside a turn with a call pending: the export and `sessionlog otlp` sent the
    parent's spans again in the fork's trace, with a root costing the whole log, and the
    service's live export never sent the turn the fork cut (ForkSession wrote its closers, not an
    append). Now all three send the fork's own spans, the cut turn among them, under the same ids;
    the root costs what `costs` counts as the fork's own and links to the parent's root."""
    collector = Receiver()
    server = ServerThread(db_url, otlp_endpoint=receiver.url)
    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            append_turn(client, sid, lease, 1)
            asking = assistant(2, 1, calls=(("c2", "bash"),), usage=usage(200, 100, 10))
            client.append(sid, lease, [user("q2"), turn_start(2), step_start(2, 1), asking])
            cut = client.get_session(sid).next_seq - 1
            child = client.fork(sid, cut, f"{sid}-f").id
            own = client.acquire_lease(child)
            append_turn(client, child, own, 3)
            trace = trace_id(child)
            deadline = time.monotonic() + 30
            while sum(1 for s in receiver.spans(trace=trace) if s[3] == "invoke_agent") < 2:  # the cut turn, 3
                assert time.monotonic() < deadline, receiver.spans(trace=trace)
                time.sleep(0.05)
            sent = subprocess.run(
                command(server, child, "--endpoint", collector.url), capture_output=True, text=True, cwd=ROOT
            )
            assert sent.returncode == 0, sent.stderr
            export = [sys.executable, "-m", "sessionlog", "--server", server.target, "export", child]
            written = subprocess.run([*export, "--format", "otlp-json"], capture_output=True, text=True, cwd=ROOT)
            assert written.returncode == 0, written.stderr
            own_cost = SessionCost.of(child, sid, cut, client.stats(child), client.stats(sid, at_seq=cut)).own
            parent_trace = client.get_session(sid).trace_id
    finally:
        server.stop()
        collector.close()
    spans = spans_of(json.loads(written.stdout))
    ids = {(s["traceId"], s["spanId"], s.get("parentSpanId", ""), s["name"]) for s in spans}
    assert set(collector.spans()) == ids  # `sessionlog otlp` and the export: one set of spans
    assert set(receiver.spans(trace=trace)) == {span for span in ids if span[2]}  # live: all but the root
    root = spans[0]
    assert span_attr(root, "sessionlog.cost_usd") == own_cost["costUsd"]
    assert span_attr(root, "sessionlog.fork.seq") == cut
    assert root["links"] == [{"traceId": parent_trace, "spanId": span_id(str(parent_trace), "session", 0)}]
    chats = [span_attr(s, "sessionlog.seq") for s in spans if s["name"].startswith("chat")]
    assert chats and all(seq > cut for seq in chats)
    ends = sorted(span_attr(s, "sessionlog.turn.end_kind") for s in spans if s["name"] == "invoke_agent")
    assert ends == ["completed", "forked"]
