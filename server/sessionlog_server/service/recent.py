"""Bounded memories of the latest sessions looked up: the lease tokens proven here
(`LeaseManager`) and the sessions' origins (`EventReader`). Both are kept per session for
speed, so each must be bounded, or a long-running service grows by an entry per session ever
served."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(entries: OrderedDict[K, V], key: K, value: V, capacity: int) -> None:
    """Keep `value` under `key` as the most recently used entry, dropping the least recently
    used ones past `capacity` (one is always kept)."""
    entries[key] = value
    entries.move_to_end(key)
    while len(entries) > max(capacity, 1):
        entries.popitem(last=False)
