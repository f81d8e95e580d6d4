"""sessionlog's own JSONL export (SPEC §10): a header line, then one committed event per line.

`{"type":"sessionlog","version":1,"session":{…}}` comes first; every following line is an event
envelope with `seq` and `time` (`Event.from_json`), seqs 0, 1, 2, … without gaps. The replay
metrics of such a file come from folding it with the core's `SessionFold` (`fold_export` checks
every event as the service would at append, envelope rules and unique eventIds included, so a
damaged export is refused with the line and seq that break it, and `import` refuses it before
creating anything) and reading its SPEC §5 stats, mapped onto the same keys as a Pi replay:

- `sessionFormat` is `"sessionlog-v1"`; `eventsInFile` counts lines, header included;
- `--at SEQ` folds the prefix `0..SEQ`: `eventsOnBranch` is its length, `eventsOffBranch` the
  events after it (a sessionlog log has no branches: forks are separate sessions);
- `model`, `provider`, `thinkingLevel` and the rest (`turns`, `modelCalls`, tokens, cost, ...)
  are the stats' figures under the stats' keys (`sessionlog stats` of the imported session says
  the same);
- `totalTokens` sums each usage's `totalTokens` (or its four counts when missing), and
  `compactionCostUsd` the cost on `compaction/summary` events (None when there is none).

Writing (`sessionlog_lines`, `write_sessionlog`) is the inverse of `parse_sessionlog_objects`:
the header, then each event's SPEC §2 envelope as compact lossless JSON (non-ASCII written raw),
one per LF-terminated line. Seqs must run 0, 1, 2, … so that the reader accepts what was written.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from sessionlog.core import jsonvalue, validate
from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog.core.events import Event, JsonObject
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.jsonl import JsonlReader, read_file_numbered
from sessionlog.core.limits import DEFAULT_LIMITS, Limits
from sessionlog.core.projections.stats import usage_of
from sessionlog.core.usage import CostSum, usage_cost, usage_total_tokens
from sessionlog.core.vocabulary import COMPACTION_SUMMARY

HEADER_TYPE = "sessionlog"
FORMAT_VERSION = 1


@dataclass(slots=True)
class SessionlogExport:
    """A parsed export: the `session` object of the header and the events in seq order."""

    session: JsonObject
    events: list[Event]
    lines: int
    """JSON lines in the file, header included."""
    event_lines: list[int]
    """The physical line number of each event (parallel to `events`)."""


def parse_sessionlog_objects(records: Iterable[tuple[int, JsonObject]]) -> SessionlogExport:
    """Check the header and parse every following line as a committed event, seqs contiguous."""
    session: JsonObject | None = None
    events: list[Event] = []
    event_lines: list[int] = []
    lines = 0
    for number, obj in records:
        lines += 1
        if session is None:
            session = _header(obj, number)
            continue
        try:
            event = Event.from_json(obj)
        except ValidationError as exc:
            raise ValidationError(exc.reason, f"line {number}: {exc.message}", line=number) from None
        if event.seq != len(events):
            raise ValidationError(
                "SEQ_GAP", f"line {number}: expected seq {len(events)}, found {event.seq}", line=number
            )
        events.append(event)
        event_lines.append(number)
    if session is None:
        raise ValidationError(
            "EMPTY_SESSION_FILE", "the file holds no JSON line: a sessionlog export starts with a header"
        )
    return SessionlogExport(session, events, lines, event_lines)


def _header(obj: JsonObject, number: int) -> JsonObject:
    if obj.get("type") != HEADER_TYPE:
        raise ValidationError(
            "BAD_SESSIONLOG_HEADER",
            f'line {number}: the first line must be {{"type":"sessionlog",…}}',
            line=number,
        )
    if obj.get("version") != FORMAT_VERSION:
        raise ValidationError(
            "BAD_SESSIONLOG_HEADER",
            f"line {number}: unsupported sessionlog export version {obj.get('version')!r}",
            line=number,
        )
    session = obj.get("session")
    if not isinstance(session, dict):
        raise ValidationError("BAD_SESSIONLOG_HEADER", f"line {number}: session must be an object", line=number)
    return session


def exported_parent(session: JsonObject) -> tuple[str, int] | None:
    """The session an export's header says its session forks, and the seq it was cut after
    (`session.parent`, `{"sessionId", "forkSeq"}` as the export writes it); None for a session
    that is no fork."""
    parent = session.get("parent")
    if parent is None:
        return None
    if isinstance(parent, dict):
        source, seq = parent.get("sessionId"), parent.get("forkSeq")
        if isinstance(source, str) and source and type(seq) is int and seq >= 0:
            return source, seq
    raise ValidationError(
        "BAD_SESSIONLOG_HEADER",
        'line 1: the header\'s session.parent must be {"sessionId": ID, "forkSeq": SEQ}, as an export writes it',
        line=1,
    )


def read_sessionlog_session(path: str | os.PathLike[str]) -> JsonObject:
    """The `session` of the export at `path`, read off its header line alone (an import orders
    its FILEs by what their headers name before it reads any whole)."""
    records = read_file_numbered(path, JsonlReader())
    try:
        return parse_sessionlog_objects(itertools.islice(records, 1)).session
    finally:
        records.close()  # closes the file


def sessionlog_header(session: JsonObject) -> JsonObject:
    """Line 1 of an export: `{"type":"sessionlog","version":1,"session":{…}}`."""
    return {"type": HEADER_TYPE, "version": FORMAT_VERSION, "session": session}


def sessionlog_lines(session: JsonObject, events: Iterable[Event]) -> Iterator[str]:
    """The lines of an export of `events` (seq order, from 0, no gaps), each ending in LF."""
    yield jsonvalue.dumps(sessionlog_header(session)) + "\n"
    for expected, event in enumerate(events):
        if event.seq != expected:
            raise ValidationError("SEQ_GAP", f"cannot export: expected seq {expected}, got {event.seq}", seq=event.seq)
        yield jsonvalue.dumps(event.to_json()) + "\n"


def write_sessionlog(out: TextIO, session: JsonObject, events: Iterable[Event]) -> int:
    """Write an export to `out`; returns the number of lines written (header included)."""
    count = 0
    for line in sessionlog_lines(session, events):
        out.write(line)
        count += 1
    return count


def sessionlog_metrics(export: SessionlogExport, at: str | int | None = None) -> dict[str, Any]:
    """The replay metrics of the prefix `0..at` (default: the whole log)."""
    events = export.events
    if at is not None:
        seq = _seq(at)
        if not 0 <= seq < len(events):
            raise ValidationError("UNKNOWN_ENTRY", f"no event with seq {seq} in this export ({len(events)} events)")
        events = events[: seq + 1]
    folded = fold_export(export, len(events)).stats()
    total_tokens: int | float = 0
    compaction_cost: CostSum | None = None
    for event in events:
        usage = usage_of(event)
        if usage is None:
            continue
        total_tokens += usage_total_tokens(usage)
        if event.type == COMPACTION_SUMMARY:
            compaction_cost = compaction_cost or CostSum()
            compaction_cost.add(usage_cost(usage))
    return {
        "sessionFormat": f"sessionlog-v{FORMAT_VERSION}",
        "eventsInFile": export.lines,
        "eventsOnBranch": len(events),
        "eventsOffBranch": len(export.events) - len(events),
        "model": folded.get("model"),
        "provider": folded.get("provider"),
        "thinkingLevel": folded.get("thinkingLevel"),
        "messages": folded.get("messages"),
        "turns": folded.get("turns"),
        "modelCalls": folded.get("modelCalls"),
        "toolCalls": folded.get("toolCalls"),
        "compactions": folded.get("compactions"),
        "inputTokens": folded.get("inputTokens"),
        "cacheReadTokens": folded.get("cacheReadTokens"),
        "cacheWriteTokens": folded.get("cacheWriteTokens"),
        "outputTokens": folded.get("outputTokens"),
        "costUsd": folded.get("costUsd"),
        "unpricedEvents": folded.get("unpricedEvents"),
        "totalTokens": total_tokens,
        "compactionCostUsd": compaction_cost.value() if compaction_cost is not None else None,
    }


def fold_export(export: SessionlogExport, count: int | None = None, limits: Limits = DEFAULT_LIMITS) -> SessionFold:
    """Fold the first `count` events (default: all) checking each as the service checks an
    append: `validate.validate_proposal` (envelope rules, `limits`), then the fold's seq,
    surface and structure rules. A refusal names the file's line and the event's seq."""
    fold = SessionFold()
    seq_of_id: dict[str, int] = {}
    for event in export.events[:count]:
        number = export.event_lines[event.seq]
        try:
            validate.validate_proposal(event.as_new(), limits=limits)
            _check_event_id_unique(export, event, seq_of_id)
            fold.apply(event)
        except SessionLogError as exc:
            raise exc.located(f"line {number} (seq {event.seq})", line=number, seq=event.seq) from None
    return fold


def _check_event_id_unique(export: SessionlogExport, event: Event, seq_of_id: dict[str, int]) -> None:
    """An eventId is unique within a session (docs/events.md): the service answers an event whose
    id it holds with that event's seq instead of appending it, so an import would drop the second
    and shift every later seq. `seq_of_id` holds the ids of the events before `event`."""
    if event.event_id is None:
        return
    first = seq_of_id.setdefault(event.event_id, event.seq)
    if first != event.seq:
        raise ValidationError(
            "DUPLICATE_ENTRY_ID",
            f"eventId {event.event_id!r} is already the eventId of seq {first} (line {export.event_lines[first]}): "
            "the service would take this event for a re-send of that one and not append it",
            field="eventId",
        )


def _seq(at: str | int) -> int:
    if isinstance(at, int):
        return at
    if not at.isdigit():
        raise ValidationError("BAD_AT", f"--at for a sessionlog export is a seq number, not {at!r}")
    return int(at)
