"""Learning of other processes' commits: what lets a subscriber on one instance (or worker) see
events another one appended, without polling the log per subscriber.

- PostgreSQL: every group commit sends `NOTIFY sessionlog_events, '<instance>:<session id>'`
  per session in its transaction (delivered only if it commits), and each recorder LISTENs on
  one connection of its own. A recorder ignores its own notifications (its service publishes
  its commits itself); the instance is a random id per recorder, not the pid, so two instances
  in one process are told apart too.
- SQLite (one file shared by `serve --workers` processes): `PRAGMA data_version` changes when
  another connection commits; one connection polls it while this process has subscribers, and
  on a change the sessions that have subscribers here are compared with the log (`next_seq`),
  so only those that moved are told.

Both run on a daemon thread and call `on_change(session_id)` on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Protocol

import psycopg
import structlog
from sqlalchemy import Engine, select

from sessionlog_server.storage.models import SessionRow

log = structlog.get_logger("sessionlog.changes")

CHANNEL = "sessionlog_events"
"""The PostgreSQL notification channel of committed appends."""
SQLITE_POLL_S = 0.01
"""How often a SQLite process looks at `PRAGMA data_version` (10 ms: a cheap read)."""

OnChange = Callable[[str], None]
Watched = Callable[[], dict[str, int]]
"""The sessions with subscribers in this process, each with the next seq already published."""
Following = Callable[[], bool]
"""Whether this process has any subscriber; called on the feed's own thread, so it must be safe
there. A process nobody subscribes to has nothing to learn from the feed."""


class ChangeFeed(Protocol):
    def start(
        self, loop: asyncio.AbstractEventLoop, on_change: OnChange, watched: Watched, following: Following
    ) -> None: ...

    def stop(self) -> None: ...


def notify_payload(instance: str, session_id: str) -> str:
    """What a commit of recorder `instance` sends for `session_id`."""
    return f"{instance}:{session_id}"


class PostgresChangeFeed:
    """LISTEN on one autocommit connection; other instances' notifications become calls."""

    def __init__(self, dsn: str, instance: str) -> None:
        self.dsn = dsn
        self.instance = instance
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(
        self, loop: asyncio.AbstractEventLoop, on_change: OnChange, watched: Watched, following: Following
    ) -> None:
        own = f"{self.instance}:"

        def run() -> None:
            while not self._stop.is_set():
                try:
                    with psycopg.connect(self.dsn, autocommit=True) as conn:
                        conn.execute(f"LISTEN {CHANNEL}")
                        while not self._stop.is_set():
                            for note in conn.notifies(timeout=0.5):
                                if following() and not note.payload.startswith(own):
                                    loop.call_soon_threadsafe(on_change, note.payload.split(":", 1)[1])
                except (psycopg.Error, OSError) as exc:
                    log.warning("change feed reconnecting", error=str(exc))
                    self._stop.wait(1.0)
                except RuntimeError:
                    return  # the event loop closed: the service is gone

        self._thread = threading.Thread(target=run, daemon=True, name="sessionlog-listen")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


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
            rows = conn.execute(select(SessionRow.id, SessionRow.next_seq).where(SessionRow.id.in_(list(known))))
            return [sid for sid, next_seq in rows if next_seq > known[sid]]

        def run() -> None:
            version = None
            while not self._stop.wait(SQLITE_POLL_S):
                try:
                    with self.engine.connect() as conn:
                        while not self._stop.wait(SQLITE_POLL_S):
                            if not following():
                                # No one to tell: no poll (each costs ~0.4 ms of CPU; 100 a
                                # second made an idle worker use 5 % of a core). The next poll
                                # after a subscriber arrives compares its sessions with the log.
                                version = None
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


__all__ = ["CHANNEL", "ChangeFeed", "PostgresChangeFeed", "SQLiteChangeFeed", "notify_payload"]
