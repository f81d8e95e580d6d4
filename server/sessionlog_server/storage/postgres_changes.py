"""PostgreSQL's change feed (storage/changes.py says how the feeds work): LISTEN for the
notifications other instances' group commits send, on a connection of its own."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import structlog

from sessionlog_server.storage.changes import CHANNEL, FOLLOW_WAIT_S, Following, OnChange, Watched

log = structlog.get_logger("sessionlog.changes")


class PostgresChangeFeed:
    """LISTEN on one autocommit connection; other instances' notifications become calls."""

    def __init__(self, dsn: str, instance: str) -> None:
        self.dsn = dsn
        self.instance = instance
        self.application_name = f"sessionlog-listen {instance}"
        """How its connection shows in `pg_stat_activity`."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(
        self, loop: asyncio.AbstractEventLoop, on_change: OnChange, watched: Watched, following: Following
    ) -> None:
        own = f"{self.instance}:"

        def look_again() -> None:
            """On the loop: every followed session looks at the log once (its appends made
            before LISTEN took effect were announced to no one here)."""
            for session_id in watched():
                on_change(session_id)

        def run() -> None:
            while not self._stop.is_set():
                try:
                    with psycopg.connect(self.dsn, autocommit=True, application_name=self.application_name) as conn:
                        listening = False
                        while not self._stop.is_set():
                            if following.is_set() != listening:
                                listening = not listening
                                conn.execute(f"LISTEN {CHANNEL}" if listening else f"UNLISTEN {CHANNEL}")
                                if listening:
                                    loop.call_soon_threadsafe(look_again)
                            if not listening:
                                # Nobody to tell: not listening at all. Each notice cost this
                                # thread ~40 µs of CPU (and a turn at the GIL) per commit of
                                # its own process, at one commit per event on a quiet server.
                                following.wait(FOLLOW_WAIT_S)
                                continue
                            for note in conn.notifies(timeout=FOLLOW_WAIT_S):
                                if not note.payload.startswith(own):
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
