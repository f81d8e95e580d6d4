"""A subscriber on one instance sees another instance's appends at once (storage/changes.py):
PostgreSQL LISTEN/NOTIFY, and on SQLite the `data_version` feed of worker processes. The
subscribers' own poll of the log is set to a minute, so only the feed can deliver in time.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sessionlog.client import CaughtUp, SessionLogClient
from tests.support import events as ev
from tests.support.fresh_interpreter import loaded
from tests.support.servers import ServerThread

POLL_NEVER_MS = 60_000


def test_a_subscriber_on_another_instance_gets_appends_from_the_feed(fresh_db: str, sid: str) -> None:
    # workers=2 tells a SQLite instance that other processes share its file (the PostgreSQL
    # feed is always on); two in-process instances stand for two workers or two machines.
    settings: dict[str, Any] = {"workers": 2, "subscription_poll_ms": POLL_NEVER_MS, "lease_ttl_ms": 5_000}
    writer_side, reader_side = ServerThread(fresh_db, **settings), ServerThread(fresh_db, **settings)
    try:
        with SessionLogClient(writer_side.target) as writer, SessionLogClient(reader_side.target) as reader:
            writer.create_session(sid)
            subscription = reader.subscribe(sid)
            seen: list[int] = []
            caught_up = threading.Event()
            done = threading.Event()

            def follow() -> None:
                for item in subscription:
                    if isinstance(item, CaughtUp):
                        caught_up.set()
                        continue
                    seen.append(item.seq)
                    if len(seen) == 5:
                        done.set()
                        return

            thread = threading.Thread(target=follow, daemon=True)
            thread.start()
            assert caught_up.wait(10)
            lease = writer.acquire_lease(sid)
            for n in range(5):
                writer.append(sid, lease, [ev.note(n)])
            assert done.wait(15), f"only {seen} arrived: the feed did not wake the subscriber"
            subscription.cancel()
            assert seen == [0, 1, 2, 3, 4]
    finally:
        writer_side.stop(grace=0.5)
        reader_side.stop(grace=0.5)


def test_an_instance_listens_on_postgresql_only_while_someone_there_follows(fresh_db: str, sid: str) -> None:
    # Not listening, an instance is told nothing: each notice of its own commits cost its feed
    # thread CPU for nothing. The feed's connection shows what it last ran.
    if not fresh_db.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's feed")
    server = ServerThread(fresh_db, subscription_poll_ms=POLL_NEVER_MS)
    feed_name = f"sessionlog-listen {server.service.recorder.instance}"

    def feed_ran() -> str | None:
        with psycopg.connect(fresh_db.replace("+psycopg", ""), autocommit=True) as conn:
            activity = "SELECT query FROM pg_stat_activity WHERE application_name = %s"
            row = conn.execute(activity, (feed_name,)).fetchone()
        return None if row is None else str(row[0])

    def settles_on(expected: str | None) -> bool:
        deadline = time.monotonic() + 10
        while feed_ran() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return feed_ran() == expected

    try:
        with SessionLogClient(server.target) as client:
            client.create_session(sid)
            lease = client.acquire_lease(sid)
            client.append(sid, lease, [ev.note(0)])
            assert settles_on("")  # connected, never listened: nobody follows here
            subscription = client.subscribe(sid)
            items = iter(subscription)
            assert next(items).seq == 0  # the replay, then the live tail
            assert isinstance(next(items), CaughtUp)
            assert settles_on("LISTEN sessionlog_events")
            subscription.cancel()
            assert settles_on("UNLISTEN sessionlog_events")
    finally:
        server.stop(grace=0.5)


def test_a_caught_up_subscriber_is_not_woken_by_appends_to_other_sessions(fresh_db: str, sid: str) -> None:
    # A dashboard replays a session from seq 0 and then waits. Another worker's appends to some
    # other session must not make it read its log again: on SQLite the feed compares each
    # followed session's log with the seq its subscribers expect next, and a subscriber that
    # was still said to expect its `from_seq` after the replay was woken by every such commit.
    settings: dict[str, Any] = {"workers": 2, "subscription_poll_ms": POLL_NEVER_MS, "lease_ttl_ms": 5_000}
    writer_side, reader_side = ServerThread(fresh_db, **settings), ServerThread(fresh_db, **settings)
    reads: list[int] = []
    reader_of = reader_side.service.reader
    plain_read = reader_of.read

    async def counted_read(record: Any, *args: Any, **kwargs: Any) -> Any:
        if record.id == sid:
            reads.append(args[0])
        return await plain_read(record, *args, **kwargs)

    reader_of.read = counted_read
    try:
        with SessionLogClient(writer_side.target) as writer, SessionLogClient(reader_side.target) as reader:
            writer.create_session(sid)
            writer.create_session(f"{sid}-busy")
            lease = writer.acquire_lease(sid)
            writer.append(sid, lease, [ev.note(n) for n in range(3)])
            subscription = reader.subscribe(sid)
            items = iter(subscription)
            assert [next(items).seq for _ in range(3)] == [0, 1, 2]
            assert next(items) == CaughtUp(3)
            replay_reads = len(reads)
            busy = writer.acquire_lease(f"{sid}-busy")
            for n in range(10):
                writer.append(f"{sid}-busy", busy, [ev.note(n)])
                time.sleep(0.05)  # each commit its own `data_version` change
            woken = reads[replay_reads:]
            writer.append(sid, lease, [ev.note(3)])
            assert next(items).seq == 3  # the feed still wakes it for its own session
            subscription.cancel()
            # At most one look: PostgreSQL's feed, once its LISTEN takes effect (up to half a second after
            # the first subscriber), has every follower look at its log once, for the appends made
            # before it could hear them. Woken by each commit, it read ten times.
            assert len(woken) <= 1, f"read its log {len(woken)} times for appends to another session"
    finally:
        writer_side.stop(grace=0.5)
        reader_side.stop(grace=0.5)


def test_a_sqlite_server_loads_no_postgresql_driver(tmp_path: Path) -> None:
    """PostgreSQL's feed is a module of its own (storage/postgres_changes.py) with the driver it
    listens through: a SQLite server, its recorder open and its feed started, never imports
    psycopg (some 50 ms of every SQLite worker's start-up)."""
    db = f"sqlite:///{tmp_path / 'feed.db'}"
    steps = (
        "import asyncio, threading\n"
        "from sessionlog_server.storage.factory import open_recorder\n"
        "from sessionlog_server.storage.schema import prepare\n"
        "from sessionlog_server.transport import server\n"
        f"prepare({db!r}, True)\n"
        f"recorder = open_recorder({db!r})\n"
        "feed = recorder.change_feed()\n"
        "loop = asyncio.new_event_loop()\n"
        "feed.start(loop, lambda sid: None, dict, threading.Event())\n"
        "feed.stop()\n"
        "recorder.close()\n"
    )
    assert loaded(steps, ["psycopg", "psycopg_binary"]) == []
