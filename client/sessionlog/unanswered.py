"""The request ids of writers' first opens whose outcome is unknown, kept for the next open.

A writer's first open carries a request id (`WriterCore.request_id`), so a retry of it takes the
lease an attempt whose answer was lost got, under the same token. Its retries end with the
open's budget, though: an open given up at the client's timeout while the service hung reached
the service with its cancel once the service was back, and the lease it was granted held the
session (WRITER_HELD) against the caller's next `writer()`, its own try again, until it lapsed.
The service gives such a lease back once it sees the cancel, but a new open may come first.

So a client keeps, per session, the id of a first open that failed UNAVAILABLE (its outcome
unknown), and its next writer on the session sends that id again: the open is that one's retry,
and takes that lease if it was granted. It may be another kind of open (a resume after a plain
open): the service decides a resume by the log, not by the id (an open turn is completed, a seed
boundary written unless the log ends with one), so either takes the lease the other got. Shared
by a sync client's threads.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

UNANSWERED_OPENS = 1024
"""Sessions `UnansweredOpens` remembers at most (the oldest go first): a client that gives up
opens on more sessions than this, and never opens them again, keeps no more."""


class UnansweredOpens:
    """Per session, the request id of the last first open on it that failed UNAVAILABLE."""

    def __init__(self, capacity: int = UNANSWERED_OPENS) -> None:
        self._capacity = capacity
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def request_id(self, session_id: str) -> str:
        """The id a new writer's first open on the session sends: an unanswered one's, taken
        (it is sent once more), else a fresh random UUID."""
        with self._lock:
            kept = self._ids.pop(session_id, None)
        return kept if kept is not None else str(uuid.uuid4())

    def unanswered(self, session_id: str, request_id: str) -> None:
        """The first open that sent `request_id` failed UNAVAILABLE: it may hold a lease."""
        with self._lock:
            self._ids[session_id] = request_id
            self._ids.move_to_end(session_id)
            while len(self._ids) > self._capacity:
                self._ids.popitem(last=False)


__all__ = ["UNANSWERED_OPENS", "UnansweredOpens"]
