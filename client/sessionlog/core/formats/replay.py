"""Offline replay (SPEC §11, seed 000): fold a session file into its metrics, compare with records.

A file is recognised by its first line: a Pi header (`{"type":"session",…}`) or a sessionlog
export header (`{"type":"sessionlog","version":1,"session":{…}}`, SPEC §10). Both give the same
metric keys (`METRIC_KEYS`, in table order, then `EXTRA_KEYS`); see `pi.metrics` for what each
means. Recorded metrics may spell keys in camelCase (`costUsd`) or snake_case (`cost_usd`); the
comparison maps both to the canonical camelCase key and keeps the record's own spelling on write.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

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

SESSIONLOG_HEADER_TYPE = "sessionlog"

METRIC_KEYS: tuple[str, ...] = (
    "sessionFormat",
    "eventsInFile",
    "eventsOnBranch",
    "eventsOffBranch",
    "model",
    "thinking",
    "messages",
    "turns",
    "toolCalls",
    "compactions",
    "inputTokens",
    "cacheReadTokens",
    "outputTokens",
    "costUsd",
)
"""The SPEC §11 table, in order: exactly the keys of `replay --json`."""

EXTRA_KEYS: tuple[str, ...] = ("cacheWriteTokens", "totalTokens", "compactionCostUsd")
"""Also computed and compared by `recompute` (a run record may hold them)."""

ALL_KEYS: tuple[str, ...] = METRIC_KEYS + EXTRA_KEYS

LABELS: dict[str, str] = {key: re.sub(r"(?<!^)([A-Z])", r" \1", key).lower() for key in ALL_KEYS}
"""Table labels: `costUsd` → "cost usd", `eventsInFile` → "events in file"."""


def snake_case(key: str) -> str:
    """`cacheReadTokens` → `cache_read_tokens`."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


_CANONICAL: dict[str, str] = {**{k: k for k in ALL_KEYS}, **{snake_case(k): k for k in ALL_KEYS}}


def canonical_key(key: str) -> str | None:
    """The camelCase metric key a recorded key stands for, or None if it is not a metric."""
    return _CANONICAL.get(key)


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
) -> Replay:
    """Fold the file at `path` (Pi or sessionlog format) at `at` (an entry id or a seq)."""
    reader = JsonlReader(lenient=lenient, max_line_bytes=max_line_bytes)
    records = read_file_numbered(path, reader)
    first = next(records, None)
    if first is None:
        raise ValidationError("EMPTY_SESSION_FILE", f"{os.fspath(path)}: the file holds no JSON line")
    kind = first[1].get("type")
    rest: Iterator[tuple[int, JsonObject]] = itertools.chain([first], records)
    if kind == HEADER_TYPE:
        pi_file = migrate(parse_pi_objects(rest))
        pi_file.warnings = list(reader.warnings)
        metrics = branch_metrics(pi_file, PiTree(pi_file.entries), at)
        return Replay("pi", metrics, pi_file.warnings)
    if kind == SESSIONLOG_HEADER_TYPE:
        from sessionlog.core.formats.sessionlog_file import parse_sessionlog_objects, sessionlog_metrics

        export = parse_sessionlog_objects(rest)
        return Replay("sessionlog", sessionlog_metrics(export, at), list(reader.warnings))
    raise ValidationError(
        "UNKNOWN_SESSION_FORMAT",
        f'line {first[0]}: not a Pi session ("type":"session") nor a sessionlog export '
        f'("type":"sessionlog"), but type {kind!r}',
        line=first[0],
    )


@dataclass(frozen=True, slots=True)
class Change:
    """One metric whose recorded value differs from the recomputed one."""

    key: str
    """The key as the record spells it (or camelCase for a metric the record lacks)."""
    old: Any
    new: Any


def values_equal(old: Any, new: Any) -> bool:
    """Equal as metrics: numbers within 1e-9 (absolute or relative), others exactly."""
    numbers = (int, float)
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    if isinstance(old, numbers) and isinstance(new, numbers):
        return math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-9)
    return bool(old == new)


def compare_recorded(recorded: JsonObject, computed: dict[str, Any]) -> list[Change]:
    """`--check`: every recorded metric (either spelling) that the replay disagrees with."""
    changes: list[Change] = []
    for key, old in recorded.items():
        metric = canonical_key(key)
        if metric is None or metric not in computed:
            continue
        new = computed[metric]
        if not values_equal(old, new):
            changes.append(Change(key, old, new))
    return changes


def recompute_changes(recorded: JsonObject, computed: dict[str, Any]) -> list[Change]:
    """`recompute`: every computed metric whose recorded value differs.

    A metric the record lacks counts as recorded null, so a metric added to the code shows up
    (`compaction_cost_usd: null -> 0.0016`) unless it is null anyway. Keys follow the record's
    spelling; a new key is spelled like the record's other keys (snake_case if any has `_`).
    """
    spelled = {canonical_key(k): k for k in recorded if canonical_key(k) is not None}
    snake = any("_" in k for k in recorded)
    changes: list[Change] = []
    for metric in ALL_KEYS:
        if metric not in computed:
            continue
        key = spelled.get(metric) or (snake_case(metric) if snake else metric)
        old = recorded.get(key)
        new = computed[metric]
        if key not in recorded and new is None:
            continue
        if key not in recorded or not values_equal(old, new):
            changes.append(Change(key, old, new))
    return changes


def apply_changes(recorded: JsonObject, changes: list[Change]) -> JsonObject:
    """A copy of the recorded metrics with the changes applied (existing key order kept)."""
    out = dict(recorded)
    for change in changes:
        out[change.key] = change.new
    return out
