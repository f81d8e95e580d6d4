"""A subscriber on one instance sees another instance's appends at once (storage/changes.py):
PostgreSQL LISTEN/NOTIFY, and on SQLite the `data_version` feed of worker processes. The
subscribers' own poll of the log is set to a minute, so only the feed can deliver in time.
"""

from __future__ import annotations

import threading
from typing import Any

from sessionlog.client import CaughtUp, SessionLogClient
from tests.support import events as ev
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
