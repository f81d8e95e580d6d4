"""The `sessionlog` command line against a real server (issue 2's CLI)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.procs import free_port
from sessionlog.aio import AsyncSessionLogClient
from sessionlog.cli.hints import readable_time
from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, ValidationError
from sessionlog_server.tokens import config_line, new_token
from tests.support.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]


def run(server: ServerThread, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SESSIONLOG_SERVER": server.target}
    return subprocess.run(
        [sys.executable, "-m", "sessionlog", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def started(server: ServerThread, *args: str, stdin: bool = True) -> subprocess.Popen[str]:
    """`sessionlog ARGS` against `server`, running (text pipes; stdin only if asked)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sessionlog", *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SESSIONLOG_SERVER": server.target},
        cwd=ROOT,
    )


def lines(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def json_lines(output: str) -> list[Any]:
    """The JSON values a command printed, one a line. Its lines end at LF only (docs/formats.md):
    `str.splitlines` also breaks at the U+2028, U+2029 and NEL that JSON strings hold raw, and a
    listing of the shared PostgreSQL database's sessions held another test's metadata with one."""
    return [json.loads(line) for line in output.split("\n") if line]


USER = {"type": "user/message", "data": {"message": {"role": "user", "content": "hi"}}, "surfaceOp": "append"}


def test_create_append_events_sessions(server: ServerThread, sid: str) -> None:
    created = run(server, "create", "--id", sid, "--cwd", "/home/me/project")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["id"] == sid
    assert json.loads(created.stdout)["namespace"] == "default"  # what its OTLP exports name
    note = {"type": "test/note", "data": {"n": 1}, "ignorable": True, "seq": 99, "time": 5}
    appended = run(server, "append", sid, stdin=lines(USER, {**note, "eventId": "n1"}, note))
    assert appended.returncode == 0, appended.stderr
    # seq 0 is the empty system/message the service inserted before the first user message
    assert appended.stdout.split() == ["1", "2", "3"]
    listed = run(server, "events", sid)
    assert listed.returncode == 0, listed.stderr
    events = json_lines(listed.stdout)
    assert [e["seq"] for e in events] == [0, 1, 2, 3]
    assert events[2]["eventId"] == "n1" and events[2]["data"] == {"n": 1} and events[2]["time"] != 5
    assert [e["seq"] for e in json_lines(run(server, "events", sid, "--from", "1", "--to", "2").stdout)] == [1, 2]
    assert run(server, "events", sid, "--from", "4").stdout == ""  # the head: nothing since
    past = run(server, "events", sid, "--from", "40")  # printed nothing and exited 0, as for no events
    assert (past.returncode, past.stdout) == (1, "")
    assert "FROM_SEQ_PAST_HEAD" in past.stderr and "from seq 40: its next seq is 4" in past.stderr
    retry = run(server, "append", sid, stdin=lines({**note, "eventId": "n1"}))
    assert retry.stdout.split() == ["2"]
    breaks = f"{sid}-breaks"  # a session whose metadata holds each line break JSON keeps raw
    with SessionLogClient(server.target) as client:
        client.create_session(breaks, metadata={"text": "a\u2028b\u2029c\x85d"})
    listing = run(server, "sessions")
    assert listing.returncode == 0, listing.stderr
    sessions = {session["id"]: session for session in json_lines(listing.stdout)}
    assert sid in sessions and sessions[breaks]["metadata"] == {"text": "a\u2028b\u2029c\x85d"}


def test_bad_input_exits_non_zero_with_one_line(server: ServerThread, sid: str) -> None:
    run(server, "create", "--id", sid)
    malformed = run(server, "append", sid, stdin='{"type": "test/x", "ignorable": true}\n{not json\n')
    assert malformed.returncode != 0
    assert "line 2" in malformed.stderr and len(malformed.stderr.strip().splitlines()) == 1
    unknown = run(server, "append", sid, stdin=lines({"type": "who/knows", "data": {}}))
    assert unknown.returncode != 0 and "UNKNOWN_TYPE" in unknown.stderr
    missing = run(server, "events", "no-such-" + sid)
    assert missing.returncode != 0 and "SESSION_NOT_FOUND" in missing.stderr
    # Lines read before the bad one may have landed (append streams); nothing after it did.
    assert run(server, "events", sid).stdout.count("\n") <= 1


def test_an_empty_id_is_refused_not_a_generated_one(server: ServerThread, sid: str) -> None:
    # `create --id "$SID"` with SID unset made a session under a UUID (the wire cannot tell an
    # empty id from none), and `fork --id ''` forked to one; each exited 0.
    created = run(server, "create", "--id", "")
    assert created.returncode == 1 and created.stdout == ""
    assert created.stderr.startswith("sessionlog: error: BAD_SESSION_ID: session_id is empty"), created.stderr
    run(server, "create", "--id", sid)
    run(server, "append", sid, stdin=lines(USER))
    forked = run(server, "fork", sid, "--at", "1", "--id", "")
    assert forked.returncode == 1 and "BAD_SESSION_ID: new_session_id is empty" in forked.stderr, forked.stderr
    with SessionLogClient(server.target) as client:
        assert list(client.list_sessions(parent_session_id=sid)) == []
        assert client.fork(sid, 1).id != ""  # none still means a generated id
        with pytest.raises(ValidationError, match="empty"):
            client.create_session("")


def test_an_id_that_is_not_utf8_is_a_usage_error_not_a_traceback(server: ServerThread) -> None:
    # Bytes that are not UTF-8 reach Python as lone surrogates; protobuf raised UnicodeEncodeError
    # building the request, and the CLI printed its traceback. A session id is refused by the
    # service's own rule before anything is sent, as any id that is not URL-safe is.
    for args in [("events", "\udcff"), ("create", "--id", "a\udcff"), ("fork", "s\udcff", "--at", "0")]:
        done = run(server, *args)
        assert done.returncode == 1 and done.stdout == "", (args, done.stderr)
        assert done.stderr.startswith("sessionlog: error: BAD_SESSION_ID: session id '"), (args, done.stderr)
        assert "is not URL-safe" in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    # Text no rule of the service's checks first (a lease token) is named as the argument.
    done = run(server, "append", "any", "--lease-token", "t\udcff")
    assert done.returncode == 2 and done.stderr.startswith("sessionlog: error: the argument b't\\xff'"), done.stderr
    assert "is not valid UTF-8" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_last_line_without_lf_is_appended_when_it_is_whole(server: ServerThread, sid: str) -> None:
    # `printf '{...}' | sessionlog append` was refused as a truncated file.
    run(server, "create", "--id", sid)
    note = '{"type": "test/note", "data": {"n": %d}, "ignorable": true}'
    done = run(server, "append", sid, stdin=note % 0 + "\n" + note % 1)
    assert done.returncode == 0 and done.stdout.split() == ["0", "1"], done.stderr
    cut = run(server, "append", sid, stdin=note % 2 + "\n" + (note % 3)[:-1])
    assert cut.returncode == 1 and "TRUNCATED_LAST_LINE: line 2" in cut.stderr, cut.stderr
    with SessionLogClient(server.target) as client:
        assert [e.data["n"] for e in client.read_events(sid)] == [0, 1, 2]


def test_append_refuses_a_malformed_seq_or_time(server: ServerThread, sid: str) -> None:
    """The service assigns `seq` and `time`, so a well-formed one is ignored; a malformed one is
    refused with its documented reason, as a malformed eventId is, and nothing is written. So is
    a malformed `data.recordedTime`, which the projections would otherwise pass over in silence."""
    run(server, "create", "--id", sid)
    note = {"type": "test/note", "data": {}, "ignorable": True}
    for envelope, reason in [
        ({**note, "seq": "a", "time": "a"}, "BAD_SEQ"),
        ({**note, "seq": -1}, "BAD_SEQ"),
        ({**note, "time": "a"}, "BAD_TIME"),
        ({**note, "time": 1.5}, "BAD_TIME"),
        ({**note, "eventId": 5}, "BAD_EVENT_ID"),
    ]:
        refused = run(server, "append", sid, stdin=lines(envelope))
        assert refused.returncode != 0 and f"{reason}: line 1" in refused.stderr, (envelope, refused.stderr)
    for recorded in ["2025-10-07T04:39:45.501Z", 1.5, True]:  # epoch ms, an integer as `time` is
        refused = run(server, "append", sid, stdin=lines({**note, "data": {"recordedTime": recorded}}))
        assert refused.returncode != 0, recorded
        assert "BAD_TIME: batch starting at line 1: event 0: data.recordedTime" in refused.stderr, refused.stderr
    assert run(server, "events", sid).stdout == ""


def test_append_of_more_lines_than_a_batch_holds(server: ServerThread, sid: str, tmp_path: Path) -> None:
    """15,000 lines read at once (stdin is a file: one read takes a MiB) are cut into batches
    within the service's default limit of 10,000 events a batch, not refused as one batch."""
    run(server, "create", "--id", sid)
    note = {"type": "test/note", "data": {}, "ignorable": True}
    source = tmp_path / "events.jsonl"
    source.write_text(lines(*[note] * 15_000))
    with source.open("rb") as stdin:
        appended = subprocess.run(
            [sys.executable, "-m", "sessionlog", "append", sid],
            stdin=stdin,
            capture_output=True,
            text=True,
            env={**os.environ, "SESSIONLOG_SERVER": server.target},
            cwd=ROOT,
            timeout=60,
        )
    assert appended.returncode == 0, appended.stderr
    assert appended.stdout.split() == [str(seq) for seq in range(15_000)]


def test_append_streams_and_holds_the_lease(server: ServerThread, sid: str) -> None:
    run(server, "create", "--id", sid)
    proc = started(server, "append", sid)
    assert proc.stdin and proc.stdout
    proc.stdin.write(lines({"type": "test/n", "data": {}, "ignorable": True}))
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "0"  # committed while stdin is still open
    second = run(server, "append", sid, stdin=lines({"type": "test/n", "data": {}, "ignorable": True}))
    assert second.returncode != 0
    # one line: the reason, who holds the lease until when (a readable time), and the way out
    assert second.stderr.startswith(f"sessionlog: error: WRITER_HELD: session '{sid}' is held by writer ")
    assert " UTC (in " in second.stderr and "--takeover takes the session over" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    proc.stdin.write(lines({"type": "test/n", "data": {}, "ignorable": True}))
    proc.stdin.close()
    assert proc.stdout.read().split() == ["1"]
    assert proc.wait(timeout=30) == 0


def test_tail_follows_new_events(server: ServerThread, sid: str) -> None:
    run(server, "create", "--id", sid)
    run(server, "append", sid, stdin=lines({"type": "test/n", "data": {"i": 0}, "ignorable": True}))
    proc = started(server, "tail", sid, stdin=False)
    try:
        assert proc.stdout
        assert json.loads(proc.stdout.readline())["seq"] == 0
        # Whether the subscription is still replaying or already live, the next event reaches it.
        run(server, "append", sid, stdin=lines({"type": "test/n", "data": {"i": 1}, "ignorable": True}))
        assert json.loads(proc.stdout.readline())["data"] == {"i": 1}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fork_inside_an_open_turn_prints_the_repair_seqs(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`fork` printed the new session's id, parent and cut, not the events the service wrote into
    it to close the turn the cut fell in (which `resume` prints as `repairSeqs`)."""
    run(server, "create", "--id", sid)
    turn = [USER, {"type": "turn/start", "data": {"turn": 1}}, {"type": "step/start", "data": {"turn": 1, "step": 1}}]
    assert run(server, "append", sid, stdin=lines(*turn)).returncode == 0
    head = client.get_session(sid).next_seq - 1  # the step/start
    forked = run(server, "fork", sid, "--at", str(head), "--id", f"{sid}-f")
    assert forked.returncode == 0, forked.stderr
    # the child's end-seed follows the cut; then the service ends the step and the turn
    repairs = [head + 2, head + 3]
    assert json.loads(forked.stdout) == {"id": f"{sid}-f", "parent": sid, "forkSeq": head, "repairSeqs": repairs}
    assert [e.type for e in client.read_events(f"{sid}-f", from_seq=head + 2)] == ["step/end", "turn/end"]


def test_header_lines_projections_resume_and_fork(server: ServerThread, sid: str) -> None:
    run(server, "create", "--id", sid)
    header = {"type": "request/header", "data": {"header": {"config": {"model": "m-1"}}}}
    stdin = lines(header, USER, header, {"type": "turn/start", "data": {"turn": 1}})
    appended = run(server, "append", sid, stdin=stdin)
    assert appended.returncode == 0, appended.stderr
    # the first report is logged (seq 0); the same header again logs nothing and prints seq 0 again
    assert appended.stdout.split() == ["0", "2", "0", "3"]
    history = json.loads(run(server, "history", sid).stdout)
    assert history == {"messages": [{"role": "user", "content": "hi"}]}
    request = json.loads(run(server, "request", sid).stdout)
    assert request["request"] == {"model": "m-1", "messages": history["messages"]} and len(request["sha256"]) == 64
    assert (request["headerSeq"], request["atSeq"]) == (0, 3)
    stats = json.loads(run(server, "stats", sid).stdout)
    assert stats["model"] == "m-1" and stats["turns"] == 1
    rows = json.loads(run(server, "transcript", sid, "--at", "2").stdout)["rows"]
    assert [r["seq"] for r in rows] == [0, 2]
    assert json.loads(run(server, "surface", sid).stdout) == {"nodes": [1, 2], "replaceGeneration": 0, "atSeq": 3}
    resumed = json.loads(run(server, "resume", sid).stdout)
    assert resumed["repairSeqs"] == [4] and resumed["endSeedSeq"] == 5 and resumed["nextSeq"] == 6
    assert resumed["lastTurn"] == 1  # the next turn/start is turn 2
    # the lease was given back: no token of it is printed (it took nothing: OWNERSHIP_LOST)
    assert "leaseToken" not in resumed["lease"]
    kept = json.loads(run(server, "resume", sid, "--keep").stdout)
    assert len(kept["lease"]["leaseToken"]) > 20 and kept["endSeedSeq"] == 5  # the log ended with the seed
    forked = json.loads(run(server, "fork", sid, "--at", "2", "--id", f"{sid}-f").stdout)
    assert forked == {"id": f"{sid}-f", "parent": sid, "forkSeq": 2, "repairSeqs": []}
    children = [session["id"] for session in json_lines(run(server, "sessions", "--parent", sid).stdout)]
    assert children == [f"{sid}-f"]


def test_request_prints_the_bytes_its_sha256_is_of(server: ServerThread, sid: str) -> None:
    """`request` printed the request written again from its parsed value, and Python writes some
    numbers otherwise than RFC 8785 (1e21 for 1e+21): the text printed was not what was hashed.
    It prints the service's bytes now, and `--bytes` those alone; the clients give them too."""
    run(server, "create", "--id", sid)
    header = {"type": "request/header", "data": {"header": {"config": {"model": "m", "topP": 1e-6, "seed": 1e21}}}}
    assert run(server, "append", sid, stdin=lines(header, USER)).returncode == 0
    with SessionLogClient(server.target) as client:
        view = client.request(sid)
    exact = view["requestJson"]
    assert hashlib.sha256(exact).hexdigest() == view["sha256"] and b"1e+21" in exact
    env = {**os.environ, "SESSIONLOG_SERVER": server.target}
    command = [sys.executable, "-m", "sessionlog", "request", sid]
    printed = subprocess.run(command, capture_output=True, env=env, cwd=ROOT, timeout=60).stdout
    assert printed.startswith(b'{"request":' + exact + b',"sha256":') and printed.endswith(b"}\n")
    assert json.loads(printed)["sha256"] == view["sha256"]
    alone = subprocess.run([*command, "--bytes"], capture_output=True, env=env, cwd=ROOT, timeout=60).stdout
    assert alone == exact


def test_times_read_as_times() -> None:
    assert readable_time(1_764_524_525_000, now_ms=1_764_524_502_000) == "2025-11-30 17:42:05 UTC (in 23 s)"
    assert readable_time(1_764_524_525_000, now_ms=1_764_524_530_400) == "2025-11-30 17:42:05 UTC (5 s ago)"


def test_json_output_is_utf8_whatever_the_locale(server: ServerThread, sid: str) -> None:
    """A console whose encoding cannot hold CJK or emoji (Windows' cp1252, a C locale) still gets
    the JSON as UTF-8, as `export` writes its files, where `history` died in a UnicodeEncodeError."""
    run(server, "create", "--id", sid)
    message = {"role": "user", "content": "中文 🎉 naïve"}
    run(server, "append", sid, stdin=lines({**USER, "data": {"message": message}}))
    env = {**os.environ, "SESSIONLOG_SERVER": server.target, "PYTHONIOENCODING": "ascii"}
    for command in (["history", sid], ["events", sid, "--from", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "sessionlog", *command], capture_output=True, env=env, cwd=ROOT, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
        assert "中文 🎉 naïve".encode() in done.stdout and done.stdout.endswith(b"}\n")


def test_append_whose_reader_left_still_appends_every_line(server: ServerThread, sid: str) -> None:
    """`producer | sessionlog append ID | head -1`: once the seqs' reader is gone, the lines
    that follow are still appended and the exit status is 0, where the printer thread died in a
    BrokenPipeError traceback."""
    run(server, "create", "--id", sid)
    note = {"type": "test/n", "data": {}, "ignorable": True}
    proc = started(server, "append", sid)
    assert proc.stdin and proc.stdout and proc.stderr
    proc.stdin.write(lines(note))
    proc.stdin.flush()
    assert proc.stdout.readline() == "0\n"
    proc.stdout.close()  # `head -1` has its line and leaves
    proc.stdin.write(lines(note, note))
    proc.stdin.flush()
    proc.stdin.write(lines(note))
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert proc.stderr.read() == ""
    assert [event["seq"] for event in json_lines(run(server, "events", sid).stdout)] == [0, 1, 2, 3]


def test_a_port_past_65535_is_refused_not_dialled_modulo_65536() -> None:
    """gRPC took `127.0.0.1:99999` as port 34463 (another service's, perhaps): both clients
    refuse it, and the CLI says so in one line with the usage status 2, before any connection."""
    env = {**os.environ, "SESSIONLOG_SERVER": "127.0.0.1:99999"}
    done = subprocess.run(
        [sys.executable, "-m", "sessionlog", "stats", "s"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "sessionlog: error: '127.0.0.1:99999': the port must be from 1 to 65535 (HOST:PORT, e.g. 127.0.0.1:50051)\n"
    )
    for make in (SessionLogClient, AsyncSessionLogClient):
        with pytest.raises(ValueError, match="the port must be"):
            make("dns:///localhost:65536")
    SessionLogClient("127.0.0.1:65535").close()


@pytest.mark.parametrize(
    "args",
    [
        ["events", "s", "--from"],
        ["events", "s", "--to"],
        ["tail", "s", "--from"],
        ["history", "s", "--at"],
        ["stats", "s", "--at"],
        ["fork", "s", "--at"],
        ["view", "s", "--at"],
        ["diff", "s", "--to", "0", "--from"],
        ["diff", "s", "--from", "0", "--to"],
        ["otlp", "s", "--from"],
    ],
)
def test_a_seq_past_what_a_request_carries_is_a_usage_mistake(args: list[str]) -> None:
    """Seqs travel as uint64: one past 2**64 - 1 could not be put in the request, and the
    command ended in a traceback (ValueError: Value out of range)."""
    env = {**os.environ, "SESSIONLOG_SERVER": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "-m", "sessionlog", *args, str(2**64)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "Traceback" not in done.stderr and "a seq is at most 18446744073709551615" in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["option", "environment"])
def test_an_empty_server_address_is_a_usage_mistake(how: str) -> None:
    """`--server ""` (or `SESSIONLOG_SERVER=`, a variable set from an empty shell variable)
    dialled the default 127.0.0.1:50051, another server perhaps: it is refused in one line,
    usage status 2, before any connection, and so do both clients."""
    env = {**os.environ, "SESSIONLOG_SERVER": "" if how == "environment" else "127.0.0.1:1"}
    args = ["--server", ""] if how == "option" else []
    done = subprocess.run(
        [sys.executable, "-m", "sessionlog", *args, "stats", "s"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "sessionlog: error: the server address is empty: give HOST:PORT (e.g. 127.0.0.1:50051)\n"
    for make in (SessionLogClient, AsyncSessionLogClient):
        with pytest.raises(ValueError, match="the server address is empty"):
            make(" ")


def test_sessions_of_a_missing_parent_is_session_not_found(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`sessions --parent NO_SUCH` printed nothing and exited 0, as for a session without forks:
    the service refuses a filter naming a session that does not exist (SESSION_NOT_FOUND, as
    every call naming a missing session), and an existing parent without forks is still an
    empty list."""
    client.create_session(sid)
    missing = run(server, "sessions", "--parent", "no-such-" + sid)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith(f"sessionlog: error: SESSION_NOT_FOUND: session 'no-such-{sid}'")
    with pytest.raises(NotFound):
        list(client.list_sessions(parent_session_id="no-such-" + sid))
    alone = run(server, "sessions", "--parent", sid)
    assert (alone.returncode, alone.stdout, alone.stderr) == (0, "", "")


@pytest.fixture
def small_batches(db_url: str) -> Iterator[ServerThread]:
    """A server whose batches hold at most 3 events and 200 bytes of data, below the defaults
    the CLI cuts its input by."""
    server = ServerThread(db_url, max_batch_events=3, max_batch_bytes=200)
    try:
        yield server
    finally:
        server.stop()


def test_append_learns_a_lower_batch_limit_from_the_refusal(small_batches: ServerThread, sid: str) -> None:
    """Lines read at once were sent as one batch cut by the built-in limits (10,000 events), and
    a server configured for 3 refused it whole (BATCH_TOO_LARGE). The refusal states the limit:
    the batch goes again cut to fit, as do the batches and the header report sent after it, each
    line appended once, in order, and each seq printed. The last two lines are over the bytes
    a batch may carry: that refusal is learned too."""
    run(small_batches, "create", "--id", sid)
    notes = [{"type": "test/note", "data": {"n": n}, "ignorable": True} for n in range(10)]
    header = {"type": "request/header", "data": {"header": {"config": {"model": "m"}}}}
    wide = [{"type": "test/note", "data": {"n": n, "pad": "x" * 90}, "ignorable": True} for n in (10, 11, 12)]
    stdin = lines(*notes[:4], {**notes[4], "eventId": "e4"}, header, *notes[5:], *wide)
    appended = run(small_batches, "append", sid, stdin=stdin)
    assert appended.returncode == 0, appended.stderr
    assert appended.stdout.split() == [str(seq) for seq in range(14)]
    events = json_lines(run(small_batches, "events", sid).stdout)
    assert [e["type"] for e in events] == ["test/note"] * 5 + ["request/header"] + ["test/note"] * 8
    assert [e["data"]["n"] for e in events if e["type"] == "test/note"] == list(range(13))
    assert events[4]["eventId"] == "e4"
    assert len({e["eventId"] for e in events if e["type"] == "test/note"}) == 13  # none sent twice


def test_append_of_one_event_over_the_servers_batch_bytes_fails_with_its_error(
    small_batches: ServerThread, sid: str
) -> None:
    """An event alone over the server's batch bytes cannot be cut smaller: the server's
    refusal, in one line, exit status 1; the lines before it are appended."""
    run(small_batches, "create", "--id", sid)
    big = {"type": "test/note", "data": {"pad": "x" * 300}, "ignorable": True}
    note = {"type": "test/note", "data": {}, "ignorable": True}
    refused = run(small_batches, "append", sid, stdin=lines(note, note, note, note, big))
    assert refused.returncode == 1
    assert refused.stdout.split() == ["0", "1", "2", "3"]
    assert refused.stderr.startswith("sessionlog: error: BATCH_TOO_LARGE: batch starting at line 5: ")
    assert "over the limit of 200" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_append_and_import_wait_out_the_rate_limit(db_url: str, sid: str, tmp_path: Path) -> None:
    """A namespace limited to 5 events a second: the command stopped at the first RATE_LIMITED
    refusal, 5 of 12 lines appended and the rest unsent. It now waits out each refusal's
    retry_after_ms and sends again, each line once, in order."""
    server = ServerThread(db_url, max_events_per_second=5)
    try:
        run(server, "create", "--id", sid)
        notes = [{"type": "test/note", "data": {"n": n}, "ignorable": True} for n in range(12)]
        appended = run(server, "append", sid, stdin=lines(*notes))
        assert appended.returncode == 0, appended.stderr
        assert appended.stdout.split() == [str(seq) for seq in range(12)]
        exported = tmp_path / "export.jsonl"
        assert run(server, "export", sid, "--format", "sessionlog", "-o", str(exported)).returncode == 0
        imported = run(server, "import", str(exported), "--id", f"{sid}-copy")
        assert imported.returncode == 0, imported.stderr
        events = json_lines(run(server, "events", f"{sid}-copy").stdout)
        assert [e["data"]["n"] for e in events] == list(range(12))
    finally:
        server.stop()


def test_import_of_an_empty_file_names_it_once(server: ServerThread, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    refused = run(server, "import", str(empty))
    assert refused.returncode == 2  # bad input, found before anything was sent
    # It said "empty.jsonl: empty.jsonl: the file holds no JSON line".
    assert refused.stderr == f"sessionlog: error: EMPTY_SESSION_FILE: {empty}: the file holds no JSON line\n"


def test_the_request_of_an_empty_session_ends_at_no_seq(
    server: ServerThread, client: SessionLogClient, sid: str
) -> None:
    """`request` of a session without events printed `"atSeq":0`, an event that does not exist
    (`request --at 0` is SEQ_NOT_FOUND): like its history and stats, the empty session has a
    request, `{"messages":[]}`, which ends at no seq (null, as its headerSeq). With one event,
    its request ends at seq 0, and reads again there."""
    run(server, "create", "--id", sid)
    empty = run(server, "request", sid)
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout) == {
        "request": {"messages": []},
        "sha256": hashlib.sha256(b'{"messages":[]}').hexdigest(),
        "headerSeq": None,
        "atSeq": None,
    }
    assert json.loads(run(server, "history", sid).stdout) == {"messages": []}
    assert json.loads(run(server, "stats", sid).stdout)["events"] == 0
    assert "SEQ_NOT_FOUND" in run(server, "request", sid, "--at", "0").stderr
    run(server, "append", sid, stdin=lines({"type": "test/note", "data": {}, "ignorable": True}))
    assert client.request(sid)["atSeq"] == client.request(sid, at_seq=0)["atSeq"] == 0


def test_no_server_at_the_address_says_how_to_start_one_or_name_another() -> None:
    # The error was gRPC's alone ("failed to connect to all addresses; ... Connection
    # refused"): what went wrong, not that the service is not started or is elsewhere.
    target = f"127.0.0.1:{free_port()}"
    refused = subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", target, "sessions"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("sessionlog: error: TRANSPORT_ERROR: ")
    assert f"nothing listens at {target}: start the service (`sessionlog serve`)" in refused.stderr
    assert "--server HOST:PORT (or SESSIONLOG_SERVER)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_missing_or_unknown_token_says_how_to_give_one(db_url: str) -> None:
    with ServerThread(db_url, tokens=f"[{config_line(new_token(), 'cli', read_only=False, name='cli')}]") as server:
        missing = run(server, "sessions")
        assert missing.returncode == 1 and missing.stderr.startswith("sessionlog: error: TOKEN_MISSING: ")
        assert "pass it with --token TOKEN (or set SESSIONLOG_TOKEN)" in missing.stderr
        unknown = run(server, "--token", "slt_not-one-of-the-servers", "sessions")
        assert unknown.returncode == 1 and unknown.stderr.startswith("sessionlog: error: TOKEN_UNKNOWN: ")
        assert "the server's tokens file holds no such token: check --token (or SESSIONLOG_TOKEN)" in unknown.stderr
        # A server without tokens is a plain "nothing listens" only when nothing does.
        assert "nothing listens" not in missing.stderr + unknown.stderr


def test_append_and_ingest_write_under_the_lease_resume_kept(server: ServerThread, sid: str) -> None:
    """`resume --keep` printed a lease token no command took: `append` found the session held by
    that very lease (WRITER_HELD) until it lapsed. `--lease-token` (or SESSIONLOG_LEASE_TOKEN)
    writes under it; once the append ends, the lease is given back."""
    run(server, "create", "--id", sid)
    token = json.loads(run(server, "resume", sid, "--keep").stdout)["lease"]["leaseToken"]
    held = run(server, "append", sid, stdin=lines(USER))
    assert held.returncode == 1 and "WRITER_HELD" in held.stderr, held.stderr
    appended = run(server, "append", sid, "--lease-token", token, stdin=lines(USER))
    assert appended.returncode == 0, appended.stderr
    assert appended.stdout.split() == ["2"]  # after the seed boundary resume wrote at seq 1
    assert run(server, "append", sid, stdin=lines(USER)).stdout.split() == ["3"]  # given back
    token = json.loads(run(server, "resume", sid, "--keep").stdout)["lease"]["leaseToken"]
    env = {**os.environ, "SESSIONLOG_SERVER": server.target, "SESSIONLOG_LEASE_TOKEN": token}
    ingested = subprocess.run(
        [sys.executable, "-m", "sessionlog", "ingest", sid, "--format", "pi-events"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert ingested.returncode == 0, ingested.stderr


def test_a_session_that_is_not_there_names_the_command_that_creates_it(server: ServerThread, sid: str) -> None:
    """SESSION_NOT_FOUND said only "session 'x' not found"; the command line names `create`,
    and not the Python writer's `create_if_missing`, which no command takes."""
    for args in (["append", sid], ["events", sid]):
        refused = run(server, *args, stdin=lines(USER))
        assert refused.returncode == 1, refused.stderr
        error = refused.stderr.strip().splitlines()[-1]
        assert error.startswith(f"sessionlog: error: SESSION_NOT_FOUND: session '{sid}' not found; "), error
        assert f"sessionlog create --id {sid}" in error and "create_if_missing" not in error, error


def test_health_says_serving_and_exits_0_as_a_probe_needs(server: ServerThread) -> None:
    done = run(server, "health")
    assert (done.returncode, done.stdout) == (0, "SERVING\n"), done.stderr
    service = run(server, "health", "--service", "sessionlog.v1.SessionService")
    assert (service.returncode, service.stdout) == (0, "SERVING\n"), service.stderr
    unknown = run(server, "health", "--service", "no.such.Service")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr == (
        "sessionlog: error: the server reports no health for service 'no.such.Service': ask about "
        "sessionlog.v1.SessionService or none (the server as a whole)\n"
    )
    nowhere = subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", f"127.0.0.1:{free_port()}", "health"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert nowhere.returncode == 1 and nowhere.stdout == ""
    assert nowhere.stderr.startswith("sessionlog: error: TRANSPORT_ERROR: "), nowhere.stderr
