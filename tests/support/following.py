"""Following a sync subscription from a thread of its own, as a dashboard does."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any


def follow_in_thread(items: Iterable[Any]) -> tuple[threading.Thread, list[Any]]:
    """Iterate `items` (a subscription) on a started daemon thread; the list collects what it
    yields and, last, the exception that ended it, if one did."""
    seen: list[Any] = []

    def follow() -> None:
        try:
            seen.extend(items)
        except Exception as exc:
            seen.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread, seen
