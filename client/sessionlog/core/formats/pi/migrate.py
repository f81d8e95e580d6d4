"""Pi's session format upgrades, v1 → v2 → v3 (pi-format.md §4), on a parsed file.

- **v1 → v2**: the header gets `version: 2`; every entry, in file order, gets a fresh 8-hex `id`
  and `parentId` = the previous entry's id (`null` for the first), a linear chain. A compaction's
  `firstKeptEntryIndex` indexes the whole file array with the header at 0: if it names an entry
  (not the header), `firstKeptEntryId` becomes that entry's new id; the index is removed either way.
- **v2 → v3**: `version: 3`; messages with role `hookMessage` are renamed to role `custom`.

Fields Pi does not touch stay (v1 header extras such as `provider`, `modelId`, `thinkingLevel`,
`branchedFrom`). Pi draws the new ids at random; here the default is deterministic (a hash of the
session id and the entry's position), so that importing the same v1 file twice, or `replay --at`
with an id printed earlier, gives the same ids. Pass `new_id` to choose ids yourself.

The input is not modified: changed entries are copies, unchanged ones are shared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.pi.entries import (
    COMPACTION,
    CURRENT_VERSION,
    MESSAGE,
    JsonObject,
    PiFile,
)

IdFactory = Callable[[int, set[str]], str]
"""`new_id(position, taken)` returns an id not in `taken` for the entry at `position` (0-based)."""


def deterministic_ids(session_id: str) -> IdFactory:
    """8-hex ids derived from the session id and position, re-drawn on a collision."""

    def new_id(position: int, taken: set[str]) -> str:
        attempt = 0
        while True:
            digest = hashlib.sha256(f"{session_id}\x00{position}\x00{attempt}".encode()).hexdigest()
            candidate = digest[:8] if attempt < 100 else digest[:32]
            if candidate not in taken:
                return candidate
            attempt += 1

    return new_id


def migrate(pi_file: PiFile, new_id: IdFactory | None = None) -> PiFile:
    """Upgrade a parsed file to the current version (3); a v3 file is returned unchanged."""
    version = pi_file.version
    if version >= CURRENT_VERSION:
        return pi_file  # current, or newer than we know: read as is, feature-detected by field
    header, entries = pi_file.header, pi_file.entries
    if version < 2:
        header, entries = migrate_v1_to_v2(header, entries, new_id)
    if version < 3:
        header, entries = migrate_v2_to_v3(header, entries)
    return replace(pi_file, header=header, entries=entries)


def migrate_v1_to_v2(
    header: JsonObject, entries: list[JsonObject], new_id: IdFactory | None = None
) -> tuple[JsonObject, list[JsonObject]]:
    """Chain the entries in file order and resolve `firstKeptEntryIndex` to `firstKeptEntryId`."""
    session_id = header.get("id")
    factory = new_id or deterministic_ids(session_id if isinstance(session_id, str) else "")
    taken: set[str] = set()
    chained: list[JsonObject] = []
    previous: str | None = None
    for position, entry in enumerate(entries):
        entry_id = factory(position, taken)
        if entry_id in taken:
            raise ValidationError("DUPLICATE_ENTRY_ID", f"migration produced the id {entry_id!r} twice")
        taken.add(entry_id)
        chained.append({**entry, "id": entry_id, "parentId": previous})
        previous = entry_id
    for entry in chained:
        if entry.get("type") != COMPACTION or "firstKeptEntryIndex" not in entry:
            continue
        index = entry.pop("firstKeptEntryIndex")
        # the index counts the header as 0, so entry k of the file array is chained[k - 1]
        if isinstance(index, int) and not isinstance(index, bool) and 1 <= index <= len(chained):
            entry["firstKeptEntryId"] = chained[index - 1]["id"]
    return {**header, "version": 2}, chained


def migrate_v2_to_v3(header: JsonObject, entries: list[JsonObject]) -> tuple[JsonObject, list[JsonObject]]:
    """Rename the message role `hookMessage` to `custom`."""
    out: list[JsonObject] = []
    for entry in entries:
        message = entry.get("message")
        is_hook = isinstance(message, dict) and message.get("role") == "hookMessage"
        if entry.get("type") == MESSAGE and is_hook:
            assert isinstance(message, dict)
            entry = {**entry, "message": {**message, "role": "custom"}}
        out.append(entry)
    return {**header, "version": 3}, out
