"""Pi's `buildSessionContext` (0.58.3 to 0.73.1; pi-format.md §5.1), restated for Python.

Given the path from the root to a leaf, Pi computes `{messages, thinkingLevel, model}`:

- **Settings over the whole path**, compactions included: the last `thinking_level_change` sets
  `thinkingLevel` (default `"off"`); the last `model_change` *or assistant message* sets `model`
  (`{provider, modelId}`, from the message's `provider` and `model`).
- **Only the latest compaction on the path counts.** If there is one, the messages are its summary
  (role `compactionSummary`), then the path entries before it starting at `firstKeptEntryId`
  (none if that id is not before it, even when it lies before an earlier compaction's cut), then
  every entry after it. Without one, every entry of the path.
- **Entry → message**: `message` gives its stored message as is (aborted and errored assistant
  messages included); `custom_message` gives role `custom` (whether or not it is displayed);
  `branch_summary` with a non-empty summary gives role `branchSummary`; other types give nothing.
  Entry timestamps (ISO strings) become epoch milliseconds as JavaScript's `Date` parses them.

The result is the JSON Pi would serialise: a field whose source is missing (JavaScript
`undefined`) is left out rather than written as null, and an unparseable timestamp (NaN) is null.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from sessionlog.core.formats.pi.entries import (
    BRANCH_SUMMARY,
    COMPACTION,
    CUSTOM_MESSAGE,
    MESSAGE,
    MODEL_CHANGE,
    THINKING_LEVEL_CHANGE,
    JsonObject,
)
from sessionlog.core.formats.pi.tree import PiTree

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_SUFFIX = "</summary>"


def empty_context() -> JsonObject:
    """What Pi returns for an explicit null leaf or an empty session."""
    return {"messages": [], "thinkingLevel": "off", "model": None}


def session_context(tree: PiTree, leaf_id: str | None = None) -> JsonObject:
    """The context Pi builds for `leaf_id` (default: the last entry in file order)."""
    leaf = leaf_id if leaf_id is not None else tree.default_leaf()
    if leaf is None:
        return empty_context()
    return build_context(tree.path(leaf))


def build_context(path: list[JsonObject]) -> JsonObject:
    """`{messages, thinkingLevel, model}` for a root → leaf path of entries."""
    if not path:
        return empty_context()
    thinking: Any = "off"
    model: JsonObject | None = None
    compaction_at = -1
    for index, entry in enumerate(path):
        kind = entry.get("type")
        if kind == THINKING_LEVEL_CHANGE:
            thinking = entry.get("thinkingLevel", _MISSING)
        elif kind == MODEL_CHANGE:
            model = _defined(provider=entry.get("provider", _MISSING), modelId=entry.get("modelId", _MISSING))
        elif kind == MESSAGE and entry["message"].get("role") == "assistant":
            message = entry["message"]
            model = _defined(provider=message.get("provider", _MISSING), modelId=message.get("model", _MISSING))
        elif kind == COMPACTION:
            compaction_at = index

    messages: list[Any] = []
    if compaction_at >= 0:
        compaction = path[compaction_at]
        messages.append(compaction_summary_message(compaction))
        first_kept = compaction.get("firstKeptEntryId", _MISSING)
        keeping = False
        for entry in path[:compaction_at]:
            if not keeping and first_kept is not _MISSING and entry.get("id") == first_kept:
                keeping = True
            if keeping:
                _append_message(messages, entry)
        for entry in path[compaction_at + 1 :]:
            _append_message(messages, entry)
    else:
        for entry in path:
            _append_message(messages, entry)
    return _defined(messages=messages, thinkingLevel=thinking, model=model)


def entry_message(entry: JsonObject) -> Any | None:
    """The message an entry contributes to the context, or None (compactions are handled apart)."""
    kind = entry.get("type")
    if kind == MESSAGE:
        return entry["message"]
    if kind == CUSTOM_MESSAGE:
        return _defined(
            role="custom",
            customType=entry.get("customType", _MISSING),
            content=entry.get("content", _MISSING),
            display=entry.get("display", _MISSING),
            details=entry.get("details", _MISSING),
            timestamp=js_date_ms(entry.get("timestamp", _MISSING)),
        )
    if kind == BRANCH_SUMMARY and _truthy(entry.get("summary")):
        return _defined(
            role="branchSummary",
            summary=entry["summary"],
            fromId=entry.get("fromId", _MISSING),
            timestamp=js_date_ms(entry.get("timestamp", _MISSING)),
        )
    return None


def compaction_summary_message(entry: JsonObject) -> JsonObject:
    """The `compactionSummary` message that stands for everything a compaction replaced."""
    return _defined(
        role="compactionSummary",
        summary=entry.get("summary", _MISSING),
        tokensBefore=entry.get("tokensBefore", _MISSING),
        timestamp=js_date_ms(entry.get("timestamp", _MISSING)),
    )


def _append_message(messages: list[Any], entry: JsonObject) -> None:
    message = entry_message(entry)
    if message is not None:
        messages.append(message)


class _Missing:
    """JavaScript's `undefined`: a field that JSON.stringify leaves out."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


_MISSING: Any = _Missing()


def _defined(**fields: Any) -> JsonObject:
    return {k: v for k, v in fields.items() if v is not _MISSING}


def _truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON value."""
    if value is None or value is _MISSING or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, str):
        return value != ""
    return True


# --- JavaScript Date parsing ---------------------------------------------------------------

_ISO = re.compile(
    r"^(?P<year>[+-]\d{6}|\d{4})"
    r"(?:-(?P<month>\d{2})(?:-(?P<day>\d{2}))?)?"
    r"(?:T(?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:\.(?P<frac>\d+))?)?"
    r"(?P<tz>Z|[+-]\d{2}:\d{2})?)?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_TIME = 8.64e15


def js_date_ms(value: Any) -> Any:
    """`new Date(value).getTime()` for what Pi stores: an ISO string (or a number of ms).

    Follows the ECMAScript date-time string format: date-only forms are UTC, fractions beyond
    milliseconds are truncated, out-of-range parts give NaN (returned as None, which is how
    JSON.stringify writes NaN; so is a missing value). One deliberate difference: a date-time
    without an offset is read as UTC, where JavaScript would use the machine's local zone.
    """
    if value is _MISSING:
        return None  # new Date(undefined) is NaN
    if value is None or isinstance(value, bool):
        return 0 if value is None else int(value)  # new Date(null) is the epoch
    if isinstance(value, (int, float)):
        if value != value or abs(value) > _MAX_TIME:
            return None
        return int(value)
    if not isinstance(value, str):
        return None
    match = _ISO.match(value)
    if match is None:
        return None
    parts = match.groupdict()
    year = int(parts["year"])
    if parts["year"] == "-000000":
        return None
    month = int(parts["month"] or 1)
    day = int(parts["day"] or 1)
    hour = int(parts["hour"] or 0)
    minute = int(parts["minute"] or 0)
    second = int(parts["second"] or 0)
    millis = int((parts["frac"] or "0")[:3].ljust(3, "0"))
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)):
        return None
    if hour == 24 and (minute, second, millis) == (0, 0, 0):
        hour, day_shift = 0, 1
    else:
        day_shift = 0
    if hour > 23 or minute > 59 or second > 59:
        return None
    days = _days_from_civil(year, month, day) + day_shift
    ms = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
    tz = parts["tz"]
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        offset_h, offset_m = int(tz[1:3]), int(tz[4:6])
        if offset_h > 23 or offset_m > 59:
            return None
        ms -= sign * (offset_h * 60 + offset_m) * 60_000
    if abs(ms) > _MAX_TIME:
        return None
    return ms


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any year)."""
    y = year - (1 if month <= 2 else 0)
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def ms_to_iso(ms: int) -> str:
    """`new Date(ms).toISOString()` for years 1 to 9999 (used by tests and exporters)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
