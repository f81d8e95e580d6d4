"""Learning of other processes' commits: what lets a subscriber on one instance (or worker) see
events another one appended, without polling the log per subscriber.

- PostgreSQL: every group commit sends `NOTIFY sessionlog_events, '<instance>:<session id>'`
  per session in its transaction (delivered only if it commits), and each recorder LISTENs on
  one connection of its own while its process has subscribers. A recorder ignores its own
  notifications (its service publishes its commits itself); the instance is a random id per
  recorder, not the pid, so two instances in one process are told apart too.
- SQLite (one file shared by `serve --workers` processes): `PRAGMA data_version` changes when
  another connection commits; one connection polls it while this process has subscribers, and
  on a change the sessions that have subscribers here are compared with the log (`next_seq`),
  so only those that moved are told.

Both run on a daemon thread and call `on_change(session_id)` on the event loop. PostgreSQL's is
in postgres_changes.py, with the driver it listens through, which a SQLite server never loads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

import structlog
from sqlalchemy import Engine

from sessionlog_server.storage import queries

log = structlog.get_logger("sessionlog.changes")

CHANNEL = "sessionlog_events"
"""The PostgreSQL notification channel of committed appends."""
SQLITE_POLL_S = 0.01
"""How often a SQLite process looks at `PRAGMA data_version` (10 ms: a cheap read)."""
FOLLOW_WAIT_S = 0.5
"""How long a feed waits at a time for a subscriber (or, listening, for a notice) before it
looks whether it should stop."""

OnChange = Callable[[str], None]
Watched = Callable[[], dict[str, int]]
"""The sessions with subscribers in this process, each with the next seq already published."""
Following = threading.Event
"""Set while this process has any subscriber (the feed waits on it from its own thread). A
process nobody subscribes to has nothing to learn from the feed."""


class ChangeFeed(Protocol):
    def start(
        self, loop: asyncio.AbstractEventLoop, on_change: OnChange, watched: Watched, following: Following
    ) -> None: ...

    def stop(self) -> None: ...


def notify_payload(instance: str, session_id: str) -> str:
    """What a commit of recorder `instance` sends for `session_id`."""
    return f"{instance}:{session_id}"


class SQLiteChangeFeed:
    """Polls `PRAGMA data_version`; on a change, tells the watched sessions whose log moved."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._stop = threading.Event()

    def start(
        self, loop: asyncio.AbstractEventLoop, on_change: OnChange, watched: Watched, following: Following
    ) -> None:
        def changed_sessions(conn: Any) -> list[str]:
            known = asyncio.run_coroutine_threadsafe(_call(watched), loop).result(timeout=5)
            if not known:
                return []
            rows = conn.execute(queries.SESSION_NEXT_SEQS, {"session_ids": list(known)})
            return [sid for sid, next_seq in rows if next_seq > known[sid]]

        def run() -> None:
            version = None
            while not self._stop.wait(SQLITE_POLL_S):
                try:
                    with self.engine.connect() as conn:
                        while not self._stop.wait(SQLITE_POLL_S):
                            if not following.is_set():
                                # No one to tell: no poll (each costs ~0.4 ms of CPU; 100 a
                                # second made an idle worker use 5 % of a core). The first poll
                                # after a subscriber arrives compares its sessions with the log.
                                version = None
                                following.wait(FOLLOW_WAIT_S)
                                continue
                            now = conn.exec_driver_sql("PRAGMA data_version").scalar()
                            conn.rollback()  # end the read so the next PRAGMA sees new commits
                            if now != version:
                                version = now
                                for sid in changed_sessions(conn):
                                    loop.call_soon_threadsafe(on_change, sid)
                                conn.rollback()
                except RuntimeError:
                    return  # the event loop closed: the service is gone
                except Exception as exc:
                    log.warning("change feed retrying", error=str(exc))

        threading.Thread(target=run, daemon=True, name="sessionlog-data-version").start()

    def stop(self) -> None:
        self._stop.set()


async def _call(watched: Watched) -> dict[str, int]:
    return watched()


__all__ = ["CHANNEL", "ChangeFeed", "SQLiteChangeFeed", "notify_payload"]
