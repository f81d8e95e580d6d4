"""The header and entries of a Pi session file (pi-format.md §2), as parsed JSON objects.

Entries stay the JSON objects Pi wrote: unknown fields and unknown entry types are kept (a newer
Pi adds both, and an export must give back what was read), so the only checks here are the ones
the tree and the context builder rely on. Each check has its own reason and names the line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.jsonl import JsonlWarning
from sessionlog.core.formats.pi.stream import STREAM_EVENT_TYPES

JsonObject = dict[str, Any]

HEADER_TYPE = "session"
CURRENT_VERSION = 3

MESSAGE = "message"
MODEL_CHANGE = "model_change"
THINKING_LEVEL_CHANGE = "thinking_level_change"
COMPACTION = "compaction"
BRANCH_SUMMARY = "branch_summary"
CUSTOM = "custom"
CUSTOM_MESSAGE = "custom_message"
LABEL = "label"
SESSION_INFO = "session_info"
USAGE = "usage"
CONTEXT_EDIT = "context_edit"

KNOWN_ENTRY_TYPES: frozenset[str] = frozenset(
    {
        MESSAGE,
        MODEL_CHANGE,
        THINKING_LEVEL_CHANGE,
        COMPACTION,
        BRANCH_SUMMARY,
        CUSTOM,
        CUSTOM_MESSAGE,
        LABEL,
        SESSION_INFO,
        USAGE,
        CONTEXT_EDIT,
    }
)
"""The nine 0.58.3 types plus the 1.x `usage` and `context_edit`; others are kept as unknown."""


@dataclass(slots=True)
class PiFile:
    """A parsed session file: the header, then the entries in file order.

    `source_version` is the version the file was written in (a missing `version` is 1), even after
    `migrate` has upgraded `header` and `entries` to the current version.
    """

    header: JsonObject
    entries: list[JsonObject]
    entry_lines: list[int]
    """The physical line number of each entry (parallel to `entries`)."""
    source_version: int
    objects_in_file: int
    """JSON objects in the file, header included (blank lines are not objects)."""
    extra_headers: list[tuple[int, JsonObject]] = field(default_factory=list)
    """Further `session` lines (old Pi bugs wrote duplicates); Pi ignores them, so do we."""
    warnings: list[JsonlWarning] = field(default_factory=list)
    """Warnings of a lenient read (a dropped truncated last line)."""

    @property
    def version(self) -> int:
        """The version the header declares now (3 after migration)."""
        return header_version(self.header)


def header_version(header: JsonObject) -> int:
    """The header's `version`; missing means 1 (pi-format.md §4)."""
    version = header.get("version")
    if version is None:
        return 1
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValidationError(
            "BAD_PI_VERSION", f"session header version must be a positive integer, not {version!r}", line=1
        )
    return version


def is_pi_header(obj: JsonObject) -> bool:
    """True for a valid Pi header line: `type` "session" with a string `id`."""
    return obj.get("type") == HEADER_TYPE and isinstance(obj.get("id"), str)


def parse_pi_objects(records: Iterable[tuple[int, JsonObject]], warnings: list[JsonlWarning] | None = None) -> PiFile:
    """Split numbered JSON objects into the header and the entries, checking their shape.

    The first object must be a Pi header, and no later one an event of a `pi --mode json` stream
    (which starts with the same header: NOT_A_PI_SESSION, pointing at `sessionlog ingest`, where it
    failed as an entry without an id). Entries need a string `type`, and from v2 on a string `id`
    (unique in the file) and a `parentId` that is a string or null. A `message` entry needs a
    `message` object with a string `role`, since everything that folds messages reads it.
    """
    header: JsonObject | None = None
    version = 1
    entries: list[JsonObject] = []
    lines: list[int] = []
    extra: list[tuple[int, JsonObject]] = []
    seen: set[str] = set()
    count = 0
    for number, obj in records:
        count += 1
        if header is None:
            if not is_pi_header(obj):
                raise ValidationError(
                    "NOT_A_PI_SESSION",
                    f'line {number}: the first line must be a Pi header {{"type":"session","id":…}}',
                    line=number,
                )
            header = obj
            version = header_version(obj)
            continue
        kind = obj.get("type")
        if kind == HEADER_TYPE:
            extra.append((number, obj))
            continue
        if isinstance(kind, str) and kind in STREAM_EVENT_TYPES:  # any JSON value may stand here
            raise ValidationError(
                "NOT_A_PI_SESSION",
                f"line {number}: {kind} is an event of a `pi --mode json` stream, not a session file entry: "
                "a stream is appended to a session with `sessionlog ingest SESSION_ID --format pi-events < FILE`",
                line=number,
            )
        _check_entry(obj, number, version, seen)
        entries.append(obj)
        lines.append(number)
    if header is None:
        raise ValidationError("EMPTY_SESSION_FILE", "the file holds no JSON line: a Pi session starts with a header")
    return PiFile(header, entries, lines, version, count, extra, list(warnings or []))


def _check_entry(obj: JsonObject, number: int, version: int, seen: set[str]) -> None:
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValidationError("BAD_PI_ENTRY", f"line {number}: entry type must be a non-empty string", line=number)
    if version >= 2:
        entry_id = obj.get("id")
        if not isinstance(entry_id, str) or not entry_id:
            raise ValidationError(
                "BAD_PI_ENTRY", f"line {number}: {kind} entry needs a string id", line=number, field="id"
            )
        parent = obj.get("parentId")
        if parent is not None and not isinstance(parent, str):
            raise ValidationError(
                "BAD_PI_ENTRY",
                f"line {number}: parentId must be a string or null",
                line=number,
                field="parentId",
            )
        if entry_id in seen:
            raise ValidationError(
                "DUPLICATE_ENTRY_ID", f"line {number}: entry id {entry_id!r} appears twice", line=number
            )
        seen.add(entry_id)
    if kind == MESSAGE:
        message = obj.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValidationError(
                "BAD_PI_ENTRY",
                f"line {number}: a message entry needs a message object with a string role",
                line=number,
                field="message",
            )
