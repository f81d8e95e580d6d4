"""sessionlog events → a Pi v3 session file (SPEC §11): the inverse of `importer`.

A session is one branch, so the file is a header and the branch's entries, root first; Pi opens it
at its last entry, the leaf, and builds the same context the session's model history shows.

- **Imported entries** come back exactly: each is rebuilt from the one event that carries its
  `data.pi` (`layout.rebuild_entry`): id, parentId, timestamp and unknown fields included, keys in
  the order Pi writes them. Compaction landings and model-only copies carry no `data.pi` and are
  skipped, as are turn and step brackets, fork seeds and repair closers: Pi has no entry for them.
- **The header** is the `data.pi` of the first `pi/session` event. A session that was not imported
  from Pi gets a fresh v3 header (the session id, its creation time, the cwd if known): Pi
  stamps a header when it creates the session, and an empty session has no event to take a
  time from (it got 1970-01-01). Without the creation time, the first event's time stands in.
- **Events written by other harnesses** (no `data.pi`): every appended surface event with a model
  message becomes a `message` entry (the message as it is, plus the event's `data.usage` as the
  message's `usage` when it has none, where Pi keeps a call's usage), with an id derived from the
  session id and seq, chained to the entry before it, timestamped with the event's commit time. Their
  compactions, prompt replaces and `assistant/attempt` events have no Pi form and are left out (so
  is the usage they carry: the file's cost can be lower than the session's); the model history of
  such a session is then only approximated by the exported file.

Lines are written as Pi's `JSON.stringify` writes them (`jsjson`: compact, non-ASCII and U+2028
raw, numbers laid out the JavaScript way), each ending in LF: an imported entry whose nested
objects kept their key order (pure folds, SQLite) comes back as the very bytes Pi wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sessionlog.core.events import Event, JsonObject
from sessionlog.core.formats.pi.context import ms_to_iso
from sessionlog.core.formats.pi.entries import CURRENT_VERSION, HEADER_TYPE, MESSAGE
from sessionlog.core.formats.pi.jsjson import stringify
from sessionlog.core.formats.pi.layout import (
    PI_KEY,
    PI_SESSION,
    entry_of,
    order_entry,
    order_header,
    rebuild_entry,
)
from sessionlog.core.messages import is_copy, is_replace, project_message


@dataclass(frozen=True, slots=True)
class PiExport:
    """The header and the entries of the branch, root first."""

    header: JsonObject
    entries: list[JsonObject]

    def lines(self) -> Iterator[str]:
        """The file's lines, each ending in LF."""
        yield stringify(self.header) + "\n"
        for entry in self.entries:
            yield stringify(entry) + "\n"

    def text(self) -> str:
        """The whole file as text."""
        return "".join(self.lines())


def _derived_id(session_id: str, seq: int, taken: set[str]) -> str:
    """An 8-hex entry id for the event at `seq`, unique in the file."""
    attempt = 0
    while True:
        digest = hashlib.sha256(f"{session_id}\x00{seq}\x00{attempt}".encode()).hexdigest()
        candidate = digest[:8] if attempt < 100 else digest[:32]
        if candidate not in taken:
            return candidate
        attempt += 1


def export_pi(
    events: Iterable[Event],
    *,
    session_id: str | None = None,
    cwd: str | None = None,
    create_time: int | None = None,
) -> PiExport:
    """Rebuild the Pi file of a session from its events (seq order); `create_time` (Unix ms,
    the session's) stamps a fresh header."""
    header: JsonObject | None = None
    entries: list[JsonObject] = []
    taken: set[str] = set()
    pending: list[tuple[int, JsonObject, Event]] = []  # placeholders: (index in entries, message, event)
    first_time: int | None = None
    for event in events:
        if first_time is None:
            first_time = event.time
        if event.type == PI_SESSION:
            pi = event.data.get(PI_KEY)
            if header is None and isinstance(pi, dict):
                header = order_header(pi)
            continue
        if is_copy(event) or is_replace(event):
            continue
        if entry_of(event.data) is not None:
            entry = rebuild_entry(event.data)
            entries.append(entry)
            if isinstance(entry.get("id"), str):
                taken.add(entry["id"])
            continue
        message = project_message(event)
        if message is not None:
            usage = event.data.get("usage")
            if isinstance(usage, dict) and "usage" not in message:
                message = {**message, "usage": usage}  # Pi keeps a call's usage in its message
            pending.append((len(entries), message, event))
            entries.append({})
    sid = session_id or (str(header["id"]) if header and isinstance(header.get("id"), str) else "sessionlog")
    _name_synthesized(entries, pending, sid, taken)
    if header is None:
        header = {
            "type": HEADER_TYPE,
            "version": CURRENT_VERSION,
            "id": sid,
            "timestamp": ms_to_iso(create_time if create_time is not None else first_time or 0),
            "cwd": cwd or "",
        }
    return PiExport(header, entries)


def _name_synthesized(
    entries: list[JsonObject],
    pending: list[tuple[int, JsonObject, Event]],
    session_id: str,
    taken: set[str],
) -> None:
    """Fill the placeholders of synthesized `message` entries, in file order (so each one's parent
    is the entry before it): a derived id, the parent, the event's commit time."""
    if not pending:
        return
    slots = {index: (message, event) for index, message, event in pending}
    previous: str | None = None
    for index, entry in enumerate(entries):
        if index in slots:
            message, event = slots[index]
            new_id = _derived_id(session_id, event.seq, taken)
            taken.add(new_id)
            entries[index] = order_entry(
                {
                    "type": MESSAGE,
                    "id": new_id,
                    "parentId": previous,
                    "timestamp": ms_to_iso(event.time),
                    "message": message,
                }
            )
            previous = new_id
        else:
            entry_id = entry.get("id")
            previous = entry_id if isinstance(entry_id, str) else previous


__all__ = ["PiExport", "export_pi"]
