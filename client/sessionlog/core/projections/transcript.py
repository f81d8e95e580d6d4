"""The human transcript (SPEC §5): what was said and done, in seq order, never erased.

It reads raw events, not the surface: the surface shadows summarised ranges, and a transcript
must not erase conversation the user already saw. Row shapes (every row has `seq`, `time`,
`kind`, `type`, `data`, `replacedBy`):

- `kind: "message"`: a surface event that entered with `append`; `type` is the event type,
  `data` the projected message itself (the event's `data.message`). `replacedBy` is the seq of
  the replace event that took it off the surface, or None while it is still on the surface.
- `kind: "event"`: a log-only event (any non-surface type, ignorable ones included); `data` is
  the event data; `replacedBy` is None.
- `kind: "replace"`: the marker where a replacing event landed (a compaction summary, a
  trimmed tool result); `type` is `"surface/replace"`, `eventType` the replacing event's type,
  `replaces` the node seqs it took off the surface (surface order), `startSeq`/`endSeq` its
  declared range, `data` its projected message; `replacedBy` is set if a later replace took the
  replacement itself off the surface.

A row whose event carries the time its source recorded (`data.recordedTime`, which an import
writes: the rows' commit `time` is then one instant for the whole file) has `recordedTime` too.

A message or replace row whose event says `data.interrupted: true` (an answer the user cut
off, or a replace of it by what the user heard) carries `interrupted: true`: the event's flag
sits beside its message, which is all `data` holds.

Not rows: `system/message` events, appended or replacing (model history, not conversation;
the prompt is inspected through the request view, as in dsh), and appended model-only copies
(`data.source.kind == "copy"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sessionlog.core.clock import moment
from sessionlog.core.events import Event, Replace
from sessionlog.core.messages import is_copy, message_of
from sessionlog.core.surface import fold_surface
from sessionlog.core.vocabulary import SURFACE_TYPES, SYSTEM_MESSAGE

REPLACE_MARKER_TYPE = "surface/replace"

TranscriptRow = dict[str, Any]


def replacements(events: Sequence[Event]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """`(replaced_by, replaces)`: node seq -> the replace that took it off the surface, and
    replace seq -> the node seqs it took off (surface order)."""
    replaced_by: dict[int, int] = {}
    replaces: dict[int, list[int]] = {}
    for plan in fold_surface(events, validate=False).replacements:
        replaces[plan.seq] = list(plan.shadowed)
        for seq in plan.shadowed:
            replaced_by.setdefault(seq, plan.seq)
    return replaced_by, replaces


def transcript(events: Sequence[Event]) -> list[TranscriptRow]:
    """The transcript rows of a log prefix (seqs 0..n-1), in seq order."""
    replaced_by, replaces = replacements(events)
    rows: list[TranscriptRow] = []
    for event in events:
        row = transcript_row(event, replaced_by.get(event.seq), replaces.get(event.seq, []))
        if row is not None:
            rows.append(row)
    return rows


def transcript_row(event: Event, replaced: int | None, replaces: list[int]) -> TranscriptRow | None:
    """The row of one event (None when it is not shown), given who replaced it and, for a
    replace, which nodes it replaced."""
    row = _row(event, replaced, replaces)
    if row is not None and (when := moment(event)).recorded:
        row["recordedTime"] = when.ms
    return row


def _row(event: Event, replaced: int | None, replaces: list[int]) -> TranscriptRow | None:
    """`transcript_row` without the recorded time."""
    if event.type not in SURFACE_TYPES:
        return {
            "seq": event.seq,
            "time": event.time,
            "kind": "event",
            "type": event.type,
            "data": event.data,
            "replacedBy": None,
        }
    if event.type == SYSTEM_MESSAGE or is_copy(event):
        return None
    op = event.surface_op
    row: TranscriptRow
    if isinstance(op, Replace):
        row = {
            "seq": event.seq,
            "time": event.time,
            "kind": "replace",
            "type": REPLACE_MARKER_TYPE,
            "eventType": event.type,
            "replaces": replaces,
            "startSeq": op.start_seq,
            "endSeq": op.end_seq,
            "data": message_of(event),
            "replacedBy": replaced,
        }
    else:
        row = {
            "seq": event.seq,
            "time": event.time,
            "kind": "message",
            "type": event.type,
            "data": message_of(event),
            "replacedBy": replaced,
        }
    if event.data.get("interrupted") is True:
        row["interrupted"] = True
    return row
