"""Projected messages for model histories and requests, read from the log and cached by bytes.

A live fold keeps only the seqs of its surface nodes (see `SessionFold(keep_messages=False)`),
so a session's memory does not grow with its messages. The messages themselves are read from
the stored events when a projection needs them, resolved (blobs included) and kept as their
JSON bytes in one LRU cache shared by every session and bounded in bytes
(`message_cache_bytes`). A history response is then the cached bytes joined, with no decode and
re-encode per read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from sessionlog.core import jsonvalue
from sessionlog.core.errors import Unavailable
from sessionlog.core.events import JsonObject
from sessionlog.core.messages import project_message
from sessionlog_server.service.reader import EventReader
from sessionlog_server.storage.records import SessionRecord

_ENTRY_OVERHEAD = 100
"""Bytes an entry costs beyond its JSON (key tuple, node, bytes header)."""


class MessageCache:
    """Message JSON bytes by (session id, seq); least recently used dropped past `max_bytes`."""

    def __init__(self, reader: EventReader, max_bytes: int) -> None:
        self.reader = reader
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        """Bytes the cache holds now (estimated with a per-entry overhead)."""
        return self._bytes

    async def message_bytes(
        self, record: SessionRecord, seqs: Sequence[int], extra: Mapping[int, JsonObject] | None = None
    ) -> list[bytes]:
        """The JSON of the messages at `seqs`, in the order given.

        `extra` supplies messages of events that exist only in memory (a crash repair shown to
        a read-only reader without being written)."""
        found: dict[int, bytes] = {}
        missing: list[int] = []
        for seq in seqs:
            if extra is not None and seq in extra:
                found[seq] = jsonvalue.dumps_bytes_fast(extra[seq])
                continue
            cached = self._entries.get((record.id, seq))
            if cached is None:
                missing.append(seq)
            else:
                self._entries.move_to_end((record.id, seq))
                found[seq] = cached
        if missing:
            for event in await self.reader.read_at(record, missing):
                message = project_message(event)
                if message is None:
                    continue
                body = jsonvalue.dumps_bytes_fast(message)
                found[event.seq] = body
                self._put((record.id, event.seq), body)
        absent = [seq for seq in seqs if seq not in found]
        if absent:
            raise Unavailable(
                "STORAGE_UNAVAILABLE",
                f"session {record.id!r}: surface events {absent[:5]} could not be read; retry",
            )
        return [found[seq] for seq in seqs]

    async def messages(
        self, record: SessionRecord, seqs: Sequence[int], extra: Mapping[int, JsonObject] | None = None
    ) -> list[JsonObject]:
        """The messages at `seqs`, decoded (for the request view, which hashes them)."""
        return [jsonvalue.loads(body) for body in await self.message_bytes(record, seqs, extra)]

    def _put(self, key: tuple[str, int], body: bytes) -> None:
        cost = len(body) + _ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return  # larger than the whole cache: serve it, do not keep it
        previous = self._entries.pop(key, None)
        if previous is not None:
            self._bytes -= len(previous) + _ENTRY_OVERHEAD
        self._entries[key] = body
        self._bytes += cost
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= len(dropped) + _ENTRY_OVERHEAD


__all__ = ["MessageCache"]
