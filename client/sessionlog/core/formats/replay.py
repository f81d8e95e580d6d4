"""Offline replay (SPEC §11, seed 000): fold a session file into its metrics, compare with records.

A file is recognised by its first line: a Pi header (`{"type":"session",…}`) or a sessionlog
export header (`{"type":"sessionlog","version":1,"session":{…}}`, SPEC §10). Both give the same
metric keys (`METRIC_KEYS`, in table order, then `EXTRA_KEYS`); see `pi.metrics` for what each
means. Recorded metrics may spell keys in camelCase (`costUsd`) or snake_case (`cost_usd`), or
by the names replay printed before it took the stats' (`thinking`; `model` as `provider/model`);
the comparison maps each to the canonical camelCase key and keeps the record's own spelling on
write.
A recorded number is compared at the precision it was written with (`values_equal`).
"""

from __future__ import annotations

import decimal
import itertools
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sessionlog.core import jsonvalue
from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.jsonl import (
    DEFAULT_MAX_LINE_BYTES,
    JsonlReader,
    JsonlWarning,
    read_file_numbered,
)
from sessionlog.core.formats.pi.entries import HEADER_TYPE, JsonObject, parse_pi_objects
from sessionlog.core.formats.pi.metrics import branch_metrics
from sessionlog.core.formats.pi.migrate import migrate
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.projections.stats import figure_label

SESSIONLOG_HEADER_TYPE = "sessionlog"

METRIC_KEYS: tuple[str, ...] = (
    "sessionFormat",
    "eventsInFile",
    "eventsOnBranch",
    "eventsOffBranch",
    "model",
    "provider",
    "thinkingLevel",
    "messages",
    "turns",
    "modelCalls",
    "toolCalls",
    "compactions",
    "inputTokens",
    "cacheReadTokens",
    "cacheWriteTokens",
    "outputTokens",
    "costUsd",
    "unpricedEvents",
)
"""The replay table (docs/formats.md), in order: exactly the keys of `replay --json`.

A figure the stats projection reports too has its stats key and meaning (`STATS_KEYS`): `model`
is the model id alone and `provider` its provider, as in `sessionlog stats`. `turns` are runs of
the agent loop and `modelCalls` assistant messages, in every output: seed 000's table called
model calls "turns"; here each has its own name (docs/projections.md). `unpricedEvents` not 0
says `costUsd` leaves out the usage of a model with no pricing (a lower bound), as in stats."""

EXTRA_KEYS: tuple[str, ...] = ("totalTokens", "compactionCostUsd")
"""Also computed and compared by `recompute` (a run record may hold them)."""

ALL_KEYS: tuple[str, ...] = METRIC_KEYS + EXTRA_KEYS

LABELS: dict[str, str] = {key: figure_label(key) for key in ALL_KEYS}
"""Table labels, the stats' own (`figure_label`): `costUsd` → "cost usd", `thinkingLevel` → "thinking"."""

RECORDED_ALIASES: dict[str, str] = {"thinking": "thinkingLevel"}
"""Keys run records were written with before replay took the stats' names: `thinking` is the
thinking level. (A record's `model` is `provider/model` when it holds no `provider`:
`recorded_value`.)"""


def snake_case(key: str) -> str:
    """`cacheReadTokens` → `cache_read_tokens`."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


_CANONICAL: dict[str, str] = {
    **{k: k for k in ALL_KEYS},
    **{snake_case(k): k for k in ALL_KEYS},
    **RECORDED_ALIASES,
}


def canonical_key(key: str) -> str | None:
    """The camelCase metric key a recorded key stands for, or None if it is not a metric."""
    return _CANONICAL.get(key)


def joins_provider(recorded: JsonObject) -> bool:
    """Whether the record spells `model` as replay did before it printed `provider` apart:
    `provider/model` in one value. A record that holds `model` and no `provider` is such a record."""
    metrics = {canonical_key(key) for key in recorded}
    return "model" in metrics and "provider" not in metrics


def recorded_value(metric: str, computed: dict[str, Any], *, joined: bool) -> Any:
    """The computed value of `metric` as a record spells it: with `joined`, `model` is
    `provider/model` (the parts that are known; None when neither is)."""
    if metric == "model" and joined:
        parts = [str(computed[k]) for k in ("provider", "model") if computed.get(k) is not None]
        return "/".join(parts) or None
    return computed[metric]


@dataclass(slots=True)
class Replay:
    """The result of folding one file: its format, metrics, and any lenient-read warnings."""

    format: str
    metrics: dict[str, Any]
    warnings: list[JsonlWarning] = field(default_factory=list)

    def table_metrics(self) -> dict[str, Any]:
        """Exactly the SPEC §11 keys, in table order."""
        return {key: self.metrics.get(key) for key in METRIC_KEYS}


def replay_file(
    path: str | os.PathLike[str],
    *,
    at: str | None = None,
    lenient: bool = False,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    on_read: Callable[[int], object] | None = None,
) -> Replay:
    """Fold the file at `path` (Pi or sessionlog format) at `at` (an entry id or a seq);
    `on_read(n)` is told the size of each chunk read (a progress bar's hook)."""
    reader = JsonlReader(lenient=lenient, max_line_bytes=max_line_bytes)
    records = read_file_numbered(path, reader, on_read=on_read)
    first = _first_record(path, records)
    rest: Iterator[tuple[int, JsonObject]] = itertools.chain([first], records)
    if session_format(first) == "pi":
        pi_file = migrate(parse_pi_objects(rest))
        pi_file.warnings = list(reader.warnings)
        metrics = branch_metrics(pi_file, PiTree(pi_file.entries), at)
        return Replay("pi", metrics, pi_file.warnings)
    from sessionlog.core.formats.sessionlog_file import parse_sessionlog_objects, sessionlog_metrics

    export = parse_sessionlog_objects(rest)
    return Replay("sessionlog", sessionlog_metrics(export, at), list(reader.warnings))


def file_format(path: str | os.PathLike[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> str:
    """The format of the session file at `path`, read off its first line (`session_format`)."""
    records = read_file_numbered(path, JsonlReader(max_line_bytes=max_line_bytes))
    try:
        return session_format(_first_record(path, records))
    finally:
        records.close()  # closes the file


def session_format(first: tuple[int, JsonObject]) -> str:
    """THE recognition of a session file by its first line `(number, object)`: "pi" for a Pi
    header, "sessionlog" for a sessionlog export's; anything else is UNKNOWN_SESSION_FORMAT."""
    number, header = first
    kind = header.get("type")
    if kind == HEADER_TYPE:
        return "pi"
    if kind == SESSIONLOG_HEADER_TYPE:
        return "sessionlog"
    found = "has no type" if kind is None else f"has type {jsonvalue.dumps(kind)}"  # it said "but type None"
    raise ValidationError(
        "UNKNOWN_SESSION_FORMAT",
        f'line {number}: not a Pi session ("type":"session") nor a sessionlog export '
        f'("type":"sessionlog"): its first line {found}',
        line=number,
    )


def _first_record(path: str | os.PathLike[str], records: Iterator[tuple[int, JsonObject]]) -> tuple[int, JsonObject]:
    first = next(records, None)
    if first is None:
        # Without the path: the commands say which file (`import` said "empty.jsonl: empty.jsonl: ...").
        raise ValidationError("EMPTY_SESSION_FILE", "the file holds no JSON line")
    return first


@dataclass(frozen=True, slots=True)
class Change:
    """One metric whose recorded value differs from the recomputed one."""

    key: str
    """The key as the record spells it (an addition is spelled like the record's other keys)."""
    old: Any
    new: Any


def values_equal(old: Any, new: Any) -> bool:
    """Equal as metrics: a recorded number matches at the precision it was recorded with.

    `0.636157` (recorded to six decimals) matches a recomputed `0.63615675`; float noise
    (`0.1 + 0.2` against `0.3`, `20070` against `20070.0`) is no difference either. A recorded
    zero has no digits to tell a precision by (`0.0` is how a JSON writer spells a float zero,
    such as a cost that missed its usage): it matches only zero. Other values compare exactly,
    and a bool is never a number.
    """
    numbers = (int, float)
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    if isinstance(old, numbers) and isinstance(new, numbers):
        if math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-9):
            return True
        return isinstance(old, float) and _rounds_to(new, old)
    return bool(old == new)


def _rounds_to(value: int | float, recorded: float) -> bool:
    """Whether `value` rounds to `recorded` at the digits `recorded` was written with
    (`0.636157`: six decimals), a half either way included: `0.0078125` matches `0.007812` (a
    writer that rounds halves to even, Python's) and `0.007813` (one that rounds them up, the
    session page's and `costs`'), computed exactly, where floats made a tie fall either side. A
    zero shows no precision: it matches nothing here (only zero, above)."""
    if not math.isfinite(recorded) or recorded == 0 or not math.isfinite(value):
        return False
    written = decimal.Decimal(repr(recorded))
    exponent = written.as_tuple().exponent
    if not isinstance(exponent, int):
        return False
    half = decimal.Decimal(5).scaleb(exponent - 1)
    with decimal.localcontext() as exact:
        exact.prec = 1000  # every float's exact value fits: nothing here is rounded
        return abs(decimal.Decimal(value) - written) <= half


def compare_recorded(recorded: JsonObject, computed: dict[str, Any]) -> list[Change]:
    """Every recorded metric (either spelling, or an earlier name: `RECORDED_ALIASES`) whose
    recomputed value (`recorded_value`) differs (`values_equal`).

    Only what was recorded is compared: a metric the record lacks is not a change
    (`missing_metrics` lists those). Keys keep the record's spelling.
    """
    joined = joins_provider(recorded)
    changes: list[Change] = []
    for key, old in recorded.items():
        metric = canonical_key(key)
        if metric is None or metric not in computed:
            continue
        new = recorded_value(metric, computed, joined=joined)
        if not values_equal(old, new):
            changes.append(Change(key, old, new))
    return changes


def unknown_metrics(recorded: JsonObject) -> list[str]:
    """The recorded keys that name no metric recompute computes (`canonical_key` None), as the
    record spells them: left as recorded and compared with nothing, which a run reported
    unchanged would not say (a misspelt `cost`, or a stats figure `replay` has not, such as
    `toolErrors`)."""
    return [key for key in recorded if canonical_key(key) is None]


def missing_metrics(recorded: JsonObject, computed: dict[str, Any]) -> list[Change]:
    """The computed metrics (not null) that the record does not hold, as additions spelled like
    the record's other keys (snake_case if any key has `_`), in table order. A record whose
    `model` joins the provider gets no `provider` (it holds it, and would then read `model` as
    the model id alone)."""
    present = {canonical_key(k) for k in recorded}
    snake = any("_" in k for k in recorded)
    joined = joins_provider(recorded)
    if joined:
        present.add("provider")
    return [
        Change(snake_case(metric) if snake else metric, None, recorded_value(metric, computed, joined=joined))
        for metric in ALL_KEYS
        if metric not in present and computed.get(metric) is not None
    ]


def apply_changes(recorded: JsonObject, changes: list[Change]) -> JsonObject:
    """A copy of the recorded metrics with the changes applied (existing key order kept)."""
    out = dict(recorded)
    for change in changes:
        out[change.key] = change.new
    return out
