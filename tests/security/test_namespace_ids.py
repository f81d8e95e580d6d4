"""CreateSession and ForkSession must not reveal that another namespace uses an id (issue 11 §3,
SPEC §13: ALREADY_EXISTS only for the caller's own namespace).

Session ids are scoped by namespace (service/access.py: a session's key is `namespace:id`), so
creating an id another namespace holds simply succeeds, and each namespace sees its own.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sessionlog.client import SessionLogClient
from sessionlog.core.errors import SessionLogError, ValidationError, WriterHeld
from sessionlog.core.validate import check_session_id
from sessionlog_server.tokens import config_line, new_token
from tests.support.events import note, user
from tests.support.servers import ServerThread
from tests.support.tenants import ALICE, MALLORY


def test_an_id_taken_in_another_namespace_can_be_created_in_ones_own(tenants: ServerThread, sid: str) -> None:
    with (
        SessionLogClient(tenants.target, token=ALICE) as alice,
        SessionLogClient(tenants.target, token=MALLORY) as mallory,
    ):
        alice.create_session(sid)
        mallory.create_session(sid)  # not ALREADY_EXISTS: that would tell mallory the id is in use
        assert mallory.get_session(sid).id == sid
        assert alice.get_session(sid).id == sid
        with alice.writer(sid) as writer:  # two sessions, not one: writes stay in their namespace
            writer.append([user("alice only")]).result()
        assert [m["content"] for m in alice.model_history(sid)] == ["alice only"]
        assert mallory.model_history(sid) == []
        assert [s.id for s in mallory.list_sessions()] == [sid]
        child = f"{sid}-fork"
        alice.fork(sid, 1, child)
        with mallory.writer(sid) as writer:
            writer.append([user("mallory only")]).result()
        forked = mallory.fork(sid, 1, child)  # the same child id again, in the other namespace
        assert forked.id == child and forked.parent_session_id == sid
        assert [m["content"] for m in alice.model_history(child)] == ["alice only"]
        assert [m["content"] for m in mallory.model_history(child)] == ["mallory only"]


def test_an_id_too_long_for_its_namespace_is_refused_with_the_room_left(tenants: ServerThread) -> None:
    with SessionLogClient(tenants.target, token=ALICE) as alice, pytest.raises(ValidationError, match="at most 122"):
        alice.create_session("x" * 128)  # "alice:" takes 6 of the 128


def test_errors_name_the_session_by_the_callers_id_not_by_its_namespaced_key(tenants: ServerThread, sid: str) -> None:
    # They named it `alice:<id>` (the service's key) in the message and in the ErrorInfo
    # `session_id`, which is not an id the caller could use or had sent.
    with SessionLogClient(tenants.target, token=ALICE) as alice:
        alice.create_session(sid)
        lease = alice.acquire_lease(sid, writer_id="alice:w")  # a label: it stays as it was given
        attempts: dict[str, Callable[[], object]] = {
            "SESSION_EXISTS": lambda: alice.create_session(sid),
            "WRITER_HELD": lambda: alice.acquire_lease(sid),
            "EXPECTED_SEQ_MISMATCH": lambda: alice.append(sid, lease, [note(0)], expected_next_seq=7),
            "FROM_SEQ_PAST_HEAD": lambda: next(iter(alice.subscribe(sid, from_seq=50))),
        }
        for reason, attempt in attempts.items():
            with pytest.raises(SessionLogError) as refused:
                attempt()
            assert refused.value.reason == reason
            assert refused.value.metadata["session_id"] == sid, reason
            assert f"session {sid!r}" in refused.value.message and f"alice:{sid}" not in refused.value.message, reason
        with pytest.raises(WriterHeld) as held:  # the streaming writer's refusal too
            alice.writer(sid, reconnect_attempts=0)
        assert held.value.metadata["session_id"] == sid and f"session {sid!r}" in held.value.message
        assert held.value.metadata["holder"] == "alice:w" and "writer 'alice:w'" in held.value.message


def test_the_longest_namespace_still_takes_generated_session_ids(db_url: str) -> None:
    token = new_token()
    namespace = "n" * 91
    server = ServerThread(db_url, tokens=f"[{config_line(token, namespace, read_only=False, name='long')}]")
    try:
        with SessionLogClient(server.target, token=token) as client:
            created = client.create_session()  # a UUID: the key is 91 + 1 + 36 = 128 characters
            assert [s.id for s in client.list_sessions()] == [created.id]
    finally:
        server.stop()


def test_an_id_with_a_trailing_line_break_is_refused_not_a_look_alike(tenants: ServerThread, sid: str) -> None:
    # `s1\n` passed the id pattern (`$` also matches before a final line break): it made a second
    # session beside `s1`, which a listing, a log line or a page title shows as `s1`.
    with SessionLogClient(tenants.target, token=ALICE) as alice:
        alice.create_session(sid)
        with pytest.raises(ValidationError, match="not URL-safe") as refused:
            alice.create_session(sid + "\n")
        assert refused.value.reason == "BAD_SESSION_ID"
        with pytest.raises(ValidationError, match="not URL-safe"):
            alice.get_session(sid + "\n")
        assert sid + "\n" not in [s.id for s in alice.list_sessions()]


@pytest.mark.parametrize("session_id", ["~a", ".", "..", "-x", "_x"])
def test_an_id_that_does_not_start_with_a_letter_or_digit_is_told_so(session_id: str) -> None:
    # The message listed '.', '_', '~' and '-' as allowed, and `~a` was refused for no rule it said.
    with pytest.raises(ValidationError, match="a letter or digit, then") as refused:
        check_session_id(session_id)
    assert refused.value.reason == "BAD_SESSION_ID"
