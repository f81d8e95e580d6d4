"""Tenants and auth (issue 7): a token reaches only its namespace, read-only tokens only read."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest
from structlog.testing import capture_logs

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import NotFound, PermissionDenied, Unauthenticated, WriterHeld
from sessionlog.errors import from_rpc_error
from sessionlog.v1 import session_service_pb2 as pb
from sessionlog_server.service import access
from sessionlog_server.tokens import config_line, hash_token, new_token
from tests.support.events import note, system, turn_start, user
from tests.support.servers import ServerThread

ALICE, BOB, AUDITOR = new_token(), new_token(), new_token()


@pytest.fixture(scope="module")
def secured(db_url: str) -> Iterator[ServerThread]:
    lines = [
        config_line(ALICE, "team-a", read_only=False, name="alice"),
        config_line(BOB, "team-b", read_only=False, name="bob"),
        config_line(AUDITOR, "team-a", read_only=True, name="auditor"),
    ]
    server = ServerThread(db_url, tokens="[" + ",".join(lines) + "]")
    yield server
    server.stop()


def connect(server: ServerThread, token: str | None) -> SessionLogClient:
    return SessionLogClient(server.target, token=token)


def test_calls_without_a_valid_token_are_unauthenticated(secured: ServerThread, sid: str) -> None:
    with connect(secured, None) as anonymous, pytest.raises(Unauthenticated) as missing:
        anonymous.create_session(sid)
    assert missing.value.reason == "TOKEN_MISSING"
    with connect(secured, "slt_not-a-real-token") as forged, pytest.raises(Unauthenticated) as unknown:
        list(forged.list_sessions())
    assert unknown.value.reason == "TOKEN_UNKNOWN"


def test_no_rpc_reaches_another_namespace(secured: ServerThread, sid: str) -> None:
    with connect(secured, ALICE) as alice, connect(secured, BOB) as bob:
        alice.create_session(sid)
        with alice.writer(sid) as writer:
            writer.append([system("s"), user("secret"), turn_start(1)]).result()
        assert sid not in {s.id for s in bob.list_sessions()}
        assert sid in {s.id for s in alice.list_sessions()}
        attempts = {
            "get": lambda: bob.get_session(sid),
            "read": lambda: list(bob.read_events(sid)),
            "subscribe": lambda: next(iter(bob.subscribe(sid))),
            "history": lambda: bob.model_history(sid),
            "transcript": lambda: bob.transcript(sid),
            "request": lambda: bob.request(sid),
            "stats": lambda: bob.stats(sid),
            "surface": lambda: bob.surface(sid),
            "fork": lambda: bob.fork(sid, 1),
            "resume": lambda: bob.resume(sid),
            "acquire": lambda: bob.acquire_lease(sid),
            "writer": lambda: bob.writer(sid),
        }
        for name, attempt in attempts.items():
            with pytest.raises(NotFound):
                attempt()
            assert name
        lease = alice.acquire_lease(sid, takeover=True)
        for name, attempt in {
            "append": lambda: bob.append(sid, lease, [note(1)]),
            "renew": lambda: bob.renew_lease(lease),
            "release": lambda: bob.release_lease(lease),
            "header": lambda: bob.report_header(sid, lease, {"config": {"model": "m"}}),
        }.items():
            with pytest.raises(NotFound):
                attempt()
            assert name
        assert [e.seq for e in alice.read_events(sid)] == [0, 1, 2]  # nothing Bob sent landed


def test_read_only_tokens_read_and_change_nothing(secured: ServerThread, sid: str) -> None:
    with connect(secured, ALICE) as alice, connect(secured, AUDITOR) as auditor:
        alice.create_session(sid)
        with alice.writer(sid) as writer:
            writer.append([system("s"), user("hello")]).result()
        assert [m["content"] for m in auditor.model_history(sid)] == ["s", "hello"]
        assert auditor.stats(sid)["messages"] == 2
        assert len(list(auditor.read_events(sid))) == 2
        for attempt in (
            lambda: auditor.create_session(),
            lambda: auditor.acquire_lease(sid),
            lambda: auditor.writer(sid),
            lambda: auditor.fork(sid, 1),
            lambda: auditor.resume(sid),
        ):
            with pytest.raises(PermissionDenied) as denied:
                attempt()
            assert denied.value.reason == "READ_ONLY_TOKEN"
        assert alice.get_session(sid).next_seq == 2


def test_without_tokens_the_server_listens_on_loopback_only(db_url: str) -> None:
    with pytest.raises(ValueError, match="without bearer tokens"):
        ServerThread(db_url, listen_override="0.0.0.0:0")


def test_a_token_read_with_its_newline_authenticates(secured: ServerThread, sid: str) -> None:
    # A token read from a file or a secret keeps its trailing newline. gRPC refused the header
    # ("Illegal header value", logged by its C core at each of the 8 retries) and the call failed
    # with TRANSPORT_ERROR "Invalid metadata"; the service strips the token, so the client does.
    with connect(secured, f"  {ALICE}\r\n") as alice:
        alice.create_session(sid)
    env = {**os.environ, "SESSIONLOG_SERVER": secured.target, "SESSIONLOG_TOKEN": BOB + "\n"}
    cli = [sys.executable, "-m", "sessionlog", "sessions"]
    listed = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    # A character no header can carry, inside the token, is refused at once, naming the problem.
    with pytest.raises(ValueError, match="the token holds a character"):
        connect(secured, ALICE[:10] + "\n" + ALICE[10:])
    env["SESSIONLOG_TOKEN"] = "two words"
    refused = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "sessionlog: error: the token holds a character a header cannot carry (whitespace or a control "
        "character); pass the token alone"
    ]


def test_a_tokens_file_line_names_the_token_only_when_it_has_a_name() -> None:
    token = new_token()
    named = json.loads(config_line(token, "team-a", read_only=True, name="ci"))
    assert named == {"name": "ci", "namespace": "team-a", "sha256": hash_token(token), "readOnly": True}
    assert json.loads(config_line(token, "team-a", read_only=False, name="")) == {  # not "name": ""
        "namespace": "team-a",
        "sha256": hash_token(token),
        "readOnly": False,
    }


def test_each_call_is_logged_with_its_caller_and_refused_tokens_too(secured: ServerThread, sid: str) -> None:
    # A call with a missing or unknown token left no log line at all, and the others said
    # nothing of who called: the token's name (`token new --name`, "a label for logs") and
    # namespace were never logged, so an operator could not tell tenants, or probes, apart.
    with capture_logs() as logs:
        with connect(secured, ALICE) as alice:
            alice.create_session(sid)
        with connect(secured, AUDITOR) as auditor, pytest.raises(PermissionDenied):
            auditor.create_session()
        with connect(secured, "slt_not-a-real-token") as forged, pytest.raises(Unauthenticated):
            forged.get_session(sid)
        with connect(secured, None) as anonymous, pytest.raises(Unauthenticated):
            anonymous.get_session(sid)
    lines = [
        (e.get("method"), e.get("status"), e.get("caller"), e.get("namespace")) for e in logs if e["event"] == "rpc"
    ]
    assert lines == [
        ("CreateSession", "OK", "alice", "team-a"),
        ("CreateSession", "PERMISSION_DENIED", "auditor", "team-a"),
        ("GetSession", "UNAUTHENTICATED", None, None),
        ("GetSession", "UNAUTHENTICATED", None, None),
    ]
    refused = [e for e in logs if e.get("status") == "UNAUTHENTICATED"]
    assert [e["reason"] for e in refused] == ["TOKEN_UNKNOWN", "TOKEN_MISSING"]
    assert all("not-a-real-token" not in repr(e) for e in logs)  # the token presented is not logged


def test_each_calls_log_line_names_its_session_by_the_callers_id(secured: ServerThread, sid: str) -> None:
    # An operator finds a session's calls by `session_id` beside `namespace`: the writer
    # stream's line said `team-a:<id>` (the service's key) where every other call said `<id>`,
    # and a fork's `child` was the key too, so filtering on the id missed every Write.
    with capture_logs() as logs, connect(secured, ALICE) as alice:
        alice.create_session(sid)
        with alice.writer(sid) as writer:
            writer.append([system("s"), user("u")]).result()
        alice.fork(sid, 1, f"{sid}-f")
    lines = {e["method"]: e for e in logs if e["event"] == "rpc"}
    assert {m: lines[m].get("session_id") for m in ("CreateSession", "Write", "ForkSession")} == {
        "CreateSession": sid,
        "Write": sid,
        "ForkSession": sid,
    }
    assert lines["ForkSession"]["child"] == f"{sid}-f"
    assert all(line.get("namespace") == "team-a" for line in lines.values())


def test_a_failure_on_a_line_outside_calls_names_the_session_by_the_callers_id() -> None:
    # "repair failed", "snapshot not stored" and the like log what failed, and storage's words
    # name the session by its key: the line's session_id said "s1" while its error said
    # "session 'team-a:s1'".
    failed = WriterHeld("WRITER_HELD", "session 'team-a:s1' is held by writer 'w' until 5", session_id="team-a:s1")
    assert access.session_log_fields("team-a:s1", failed) == {
        "session_id": "s1",
        "namespace": "team-a",
        "error": "session 's1' is held by writer 'w' until 5",
    }
    assert access.session_log_fields("s1", RuntimeError("exporter down"))["error"] == "exporter down"


def test_lines_outside_calls_name_a_session_by_the_callers_id_and_namespace(secured: ServerThread, sid: str) -> None:
    # The service's own lines (a lease granted, a fork, a repair, a writer stream that broke)
    # said `session_id="team-a:<id>"` (the service's key) and no `namespace`, so filtering a
    # tenant's log on `session_id` and `namespace`, as its calls' lines are found, missed them.
    broken = "writer stream ended without close; its lease is left to a reconnect or to lapse"
    with capture_logs() as logs:
        with connect(secured, ALICE) as alice:
            alice.create_session(sid)
            writer = alice.writer(sid)
            writer.append([system("s"), user("u"), turn_start(1)]).result()
            alice.fork(sid, 2, f"{sid}-f")  # the child's open turn is repaired
        deadline = time.monotonic() + 10  # the client closed with its stream open: it broke
        while not any(e["event"] == broken for e in logs) and time.monotonic() < deadline:
            time.sleep(0.05)
        with connect(secured, ALICE) as alice:
            alice.resume(sid, takeover=True)  # the open turn is repaired
    named = [e for e in logs if e["event"] != "rpc" and "session_id" in e]
    assert {e["event"] for e in named} >= {"lease granted", broken, "forked", "repaired on resume"}
    assert {(e["session_id"], e.get("namespace")) for e in named} == {(sid, "team-a"), (f"{sid}-f", "team-a")}
    assert [e["parent"] for e in named if e["event"] == "forked"] == [sid]


def test_a_session_listing_token_continues_only_its_namespaces_listing(secured: ServerThread, sid: str) -> None:
    # AIP-158: a ListSessions token continues its own request. Tied to its parent filter only,
    # one handed to another tenant set a position in that tenant's own listing.
    with connect(secured, ALICE) as alice, connect(secured, BOB) as bob, connect(secured, AUDITOR) as auditor:
        alice.create_session(sid)
        alice.create_session(f"{sid}-2")
        first = alice.stub.ListSessions(pb.ListSessionsRequest(page_size=1))
        assert first.next_page_token
        with pytest.raises(grpc.RpcError) as refused:
            bob.stub.ListSessions(pb.ListSessionsRequest(page_size=1, page_token=first.next_page_token))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        error = from_rpc_error(refused.value)
        assert error.reason == "BAD_PAGE_TOKEN" and error.metadata["field"] == "page_token"
        assert "namespace" in error.message and "team-a" not in error.message
        # Another token of the namespace lists the same sessions: the token goes on for it.
        second = auditor.stub.ListSessions(pb.ListSessionsRequest(page_size=1, page_token=first.next_page_token))
        assert len(second.sessions) == 1 and second.sessions[0].id != first.sessions[0].id


def test_a_session_listing_token_carries_the_callers_id_not_the_services_key(secured: ServerThread, sid: str) -> None:
    # A token is opaque, not secret: base64 of one showed the service's key ("team-a:<id>"),
    # where a caller sees only its ids. It holds the id; the key is rebuilt from the caller's.
    with connect(secured, ALICE) as alice:
        made = [sid, f"{sid}-2", f"{sid}-3"]
        for session_id in made:
            alice.create_session(session_id)
        listed: list[str] = []
        token = ""
        while True:
            page = alice.stub.ListSessions(pb.ListSessionsRequest(page_size=1, page_token=token))
            listed += [s.id for s in page.sessions]
            token = page.next_page_token
            if not token:
                break
            fields = json.loads(base64.urlsafe_b64decode(token))
            assert "team-a" not in json.dumps(fields), fields
            assert fields[1] == page.sessions[0].id
        assert len(listed) == len(set(listed)) and set(made) <= set(listed), "the tokens go on where they left off"
        # A token whose id is not a valid id (one altered, or the key an older token held) is
        # BAD_PAGE_TOKEN, as any token the service did not issue, never another error.
        first = alice.stub.ListSessions(pb.ListSessionsRequest(page_size=1))
        created, _, tag = json.loads(base64.urlsafe_b64decode(first.next_page_token))
        for bad_id in ["", f"team-a:{sid}", "not url safe", "x" * 300, 7]:
            forged = base64.urlsafe_b64encode(json.dumps([created, bad_id, tag]).encode()).decode()
            with pytest.raises(grpc.RpcError) as refused:
                alice.stub.ListSessions(pb.ListSessionsRequest(page_size=1, page_token=forged))
            error = from_rpc_error(refused.value)
            assert (error.reason, error.metadata.get("field")) == ("BAD_PAGE_TOKEN", "page_token"), (bad_id, error)


def test_a_history_token_continues_only_its_namespaces_session(secured: ServerThread, sid: str) -> None:
    # Two tenants may each have a session `sid`: a history token tied to the id alone, handed
    # to the other tenant, read that tenant's session from the first one's seq and index.
    with connect(secured, ALICE) as alice, connect(secured, BOB) as bob:
        for client in (alice, bob):
            client.create_session(sid)
            with client.writer(sid) as writer:
                writer.append([system("s"), user("u")]).result()
        scope = pb.ProjectionScope(session_id=sid)
        first = alice.stub.GetModelHistory(pb.GetModelHistoryRequest(scope=scope, page_size=1))
        assert first.next_page_token
        with pytest.raises(grpc.RpcError) as refused:
            bob.stub.GetModelHistory(pb.GetModelHistoryRequest(scope=scope, page_token=first.next_page_token))
        assert from_rpc_error(refused.value).reason == "BAD_PAGE_TOKEN"
        second = alice.stub.GetModelHistory(pb.GetModelHistoryRequest(scope=scope, page_token=first.next_page_token))
        assert second.from_index == 1 and second.messages_json != first.messages_json
