"""When a fold is worth snapshotting again: after `snapshot_every_events` events, or an eighth
of the surface's nodes when that is more (a snapshot costs O(surface), so on a large surface
they are spaced out to keep the stored bytes proportional to the log), or after
`snapshot_every_bytes` of payload.

Asked for every batch an append plans (`AppendPipeline`) and on a long load's way
(`loader.SnapshotStore`), so it lives in a module of its own that the compiled build compiles
(the loader, an async generator's module, stays interpreted).
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionlog.core.fold import SessionFold
from sessionlog.core.snapshot import FOLD_VERSION, encode_snapshot
from sessionlog_server.storage.records import StoredSnapshot


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a fold is worth snapshotting again (see the module docstring)."""

    every_events: int
    every_bytes: int

    def due(self, events_since: int, bytes_since: int, surface_nodes: int) -> bool:
        """Whether `events_since` events (`bytes_since` payload bytes) call for a new snapshot."""
        spacing = surface_nodes // 8
        if events_since >= max(self.every_events, spacing):
            return True
        return bytes_since >= self.every_bytes and events_since >= spacing

    @staticmethod
    def stored(session_id: str, fold: SessionFold) -> StoredSnapshot:
        """The snapshot of `fold` as stored under `session_id` (at the fold's last seq)."""
        return StoredSnapshot(session_id, fold.next_seq - 1, FOLD_VERSION, encode_snapshot(fold.snapshot()))


__all__ = ["SnapshotPolicy"]
