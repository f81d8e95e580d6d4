"""Offline commands: `replay` one session file, `recompute` the metrics of recorded runs (seed 000).

Neither needs a server: both fold session files with the pure core (`sessionlog.core.formats`).
`cli/main.py` adds them with `offline.register(app)`. What the metrics mean and what a run record
looks like: docs/formats.md (and `sessionlog recompute --help`).

`recompute` reports, per run, the recorded metrics whose recomputed value differs, each compared
at the precision it was recorded with; metrics the records lack are listed once at the end, not
as changes, and so are the runs whose cost is a lower bound (`unpricedEvents` not 0; both
commands mark such a cost `≥`, as `costs` does). `--write` replaces the `metrics` of changed
runs only (and, with `--add-new`, adds the missing metrics to every run), keeps every other
line byte for byte, and swaps the file in atomically (a temporary file in the same directory,
fsync, `os.replace`: `write_atomically`, as `export -o` writes).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from sessionlog.cli.common import (
    cost_cell,
    describe,
    fail,
    lower_bound,
    os_error,
    printable,
    table_cell,
    warn,
    write_atomically,
    write_stdout,
)
from sessionlog.cli.progress import progress
from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog.core.formats.jsonl import JsonlReader
from sessionlog.core.formats.replay import (
    LABELS,
    Change,
    Replay,
    apply_changes,
    canonical_key,
    compare_recorded,
    missing_metrics,
    replay_file,
    unknown_metrics,
)
from sessionlog.core.jsonvalue import dumps, loads

RUN_ID_FIELDS = ("run_id", "id", "run")
SESSION_FIELDS = ("session_file", "session", "session_path")


def register(app: typer.Typer) -> None:
    """Add the `replay` and `recompute` commands to `app`."""
    app.command("replay")(replay_command)
    app.command("recompute")(recompute_command)


def _stdout() -> Console:
    return Console(soft_wrap=True, highlight=False)


def _stderr() -> Console:
    return Console(stderr=True, soft_wrap=True, highlight=False)


def render(value: Any) -> str:
    """A metric value as JSON text (null, numbers, quoted strings)."""
    return dumps(value)


def render_new(change: Change, computed: dict[str, Any]) -> str:
    """A changed metric's new value as a report prints it: a cost that leaves out unpriced events
    marked as the lower bound it is (`lower_bound`)."""
    text = render(change.new)
    return lower_bound(text, computed["unpricedEvents"]) if canonical_key(change.key) == "costUsd" else text


# --- replay --------------------------------------------------------------------------------


def replay_command(
    file: Path = typer.Argument(..., help="A Pi session file or a sessionlog JSONL export."),
    at: str | None = typer.Option(
        None, "--at", metavar="ENTRY", help="Entry id (Pi) or seq (sessionlog) to fold up to."
    ),
    check: Path | None = typer.Option(
        None,
        "--check",
        metavar="FILE",
        help="A run record (JSON) whose `metrics` to compare with; exit 1 on a difference.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object."),
    lenient: bool = typer.Option(False, "--lenient", help="Drop a truncated last line with a warning."),
) -> None:
    """Fold a session file without a server and print its metrics (docs/formats.md says what each means)."""
    try:
        with progress(f"reading {file.name}", file.stat().st_size, unit="bytes") as advance:
            result = replay_file(file, at=at, lenient=lenient, on_read=advance)
        recorded = _load_recorded(check) if check is not None else None
    except SessionLogError as exc:
        raise fail(describe(exc), 2) from None
    except OSError as exc:
        raise fail(os_error(exc), 2) from None
    for warning in result.warnings:
        warn(warning.message)
    changes = compare_recorded(recorded, result.metrics) if recorded is not None else []
    if as_json:
        _print_json(result, recorded, changes)
    else:
        _print_table(result)
        if recorded is not None:
            _print_check(recorded, changes, result.metrics)
    if recorded is not None and (changes or not _recognised(recorded)):
        raise typer.Exit(1)


def _load_recorded(path: Path) -> dict[str, Any]:
    record = loads(path.read_bytes(), what=str(path))
    if not isinstance(record, dict):
        raise ValidationError("BAD_RUN_RECORD", f"{path}: a run record must be a JSON object")
    metrics = record.get("metrics", record)
    if not isinstance(metrics, dict):
        raise ValidationError("BAD_RUN_RECORD", f"{path}: metrics must be a JSON object")
    return metrics


def _recognised(recorded: dict[str, Any]) -> int:
    return sum(1 for key in recorded if canonical_key(key) is not None)


def _print_table(result: Replay) -> None:
    """One `label  value` line per metric, labels padded to one column. Plain text, never cut
    to a width: a rich table fitted a pipe's 80 columns and cut a long model name with `…`,
    which a script reading the value got as the value."""
    metrics = result.table_metrics()
    cells = {key: cost_cell(metrics) if key == "costUsd" else table_cell(key, value) for key, value in metrics.items()}
    rows = [(LABELS[key], cell) for key, cell in cells.items()]
    width = max(len(label) for label, _ in rows)
    write_stdout(f"{label:<{width}}  {printable(value)}\n".encode() for label, value in rows)


def _print_check(recorded: dict[str, Any], changes: list[Change], computed: dict[str, Any]) -> None:
    console = _stdout()
    count = _recognised(recorded)
    if count == 0:
        console.print("check: the record holds no metric this replay computes", markup=False)
    elif not changes:
        console.print(f"check: all {count} recorded metrics match", markup=False)
    else:
        console.print(f"check: {len(changes)} of {count} recorded metrics differ (recorded -> replayed)", markup=False)
        for change in changes:
            console.print(f"  {change.key}: {render(change.old)} -> {render_new(change, computed)}", markup=False)


def _print_json(result: Replay, recorded: dict[str, Any] | None, changes: list[Change]) -> None:
    if recorded is None:
        typer.echo(dumps(result.table_metrics()))
        return
    differences = [{"key": c.key, "recorded": c.old, "replayed": c.new} for c in changes]
    typer.echo(dumps({"metrics": result.table_metrics(), "check": {"differences": differences}}))


# --- recompute -----------------------------------------------------------------------------


@dataclass(slots=True)
class RunOutcome:
    """One run record and what recomputing it found."""

    line: int
    record: dict[str, Any]
    run_id: str
    experiment: str | None
    changes: list[Change] = field(default_factory=list)
    """Recorded metrics whose recomputed value differs."""
    missing: list[Change] = field(default_factory=list)
    """Metrics the record lacks, as additions (`--add-new`)."""
    unknown: list[str] = field(default_factory=list)
    """Recorded keys that name no metric recompute computes (`unknown_metrics`)."""
    computed: dict[str, Any] = field(default_factory=dict)
    """The recomputed metrics (empty when the run could not be recomputed)."""
    error: str | None = None


def recompute_command(
    runs: Path = typer.Argument(..., help="Run records, one JSON object per line."),
    sessions: Path = typer.Option(
        ..., "--sessions", metavar="DIR", help="Directory the records' session files are in."
    ),
    write: bool = typer.Option(
        False, "--write", help="Rewrite the changed runs' recorded metrics in RUNS (atomically)."
    ),
    add_new: bool = typer.Option(
        False, "--add-new", help="With --write: also add the metrics the records lack, to every run."
    ),
    lenient: bool = typer.Option(
        False, "--lenient", help="Drop truncated last lines of session files, each with a warning."
    ),
) -> None:
    """Recompute every run's metrics from its session file and report what changed.

    RUNS holds one run record per line, for example:

        {"run_id": "r17", "experiment": "e22", "session_file": "r17.jsonl",
         "metrics": {"turns": 12, "model_calls": 30, "cost_usd": 0.636157}}

    `session_file` is under --sessions DIR (default `DIR/<run_id>.jsonl`); `at` (optional) is the
    entry id or seq the metrics were taken at; metric keys are those of `sessionlog replay --json`,
    camelCase or snake_case. A run changed when a recorded metric differs, compared at the
    precision it was recorded with; metrics no record has are listed once. See docs/formats.md.
    """
    if add_new and not write:
        raise fail("--add-new only says what --write adds: give --write too", 2)
    try:
        data = runs.read_bytes()
        reader = JsonlReader()
        numbered = _feed_all(reader, data) + reader.close()
    except SessionLogError as exc:
        raise fail(describe(exc), 2) from None
    except OSError as exc:
        raise fail(os_error(exc), 2) from None

    started = time.perf_counter()
    outcomes: list[RunOutcome] = []
    total_bytes = 0
    cache: dict[tuple[Path, str | None], dict[str, Any]] = {}
    with progress("recomputing", len(numbered), minimum=1) as advance:
        for line, record in numbered:
            outcome, size = _recompute_one(line, record, sessions, lenient, cache)
            outcomes.append(outcome)
            total_bytes += size
            advance(1)
    elapsed = time.perf_counter() - started

    _report(outcomes)
    _report_missing(outcomes)
    _report_unknown(outcomes)
    _report_lower_bounds(outcomes)
    changed = [o for o in outcomes if o.changes]
    failed = [o for o in outcomes if o.error]
    console = _stdout()
    console.print(f"{len(outcomes) - len(changed) - len(failed)} run(s) unchanged", markup=False)
    console.print(f"{len(changed)} run(s) differ from the recorded metrics", markup=False)
    if failed:
        console.print(f"{len(failed)} run(s) could not be recomputed", markup=False)
    rate = total_bytes / 1e6 / elapsed if elapsed > 0 else float("inf")
    _stderr().print(
        f"recomputed {len(outcomes)} run(s) from {total_bytes / 1e6:.1f} MB in {elapsed:.2f} s ({rate:.1f} MB/s)",
        markup=False,
    )
    rewrite = [o for o in outcomes if o.changes or (add_new and o.missing)]
    if write and rewrite:
        _rewrite(runs, data, rewrite, add_new=add_new)
        console.print(f"wrote the new metrics of {len(rewrite)} run(s) to {runs}", markup=False)
    if failed:
        raise typer.Exit(1)


def _feed_all(reader: JsonlReader, data: bytes) -> list[tuple[int, dict[str, Any]]]:
    step = reader.max_chunk_bytes
    out: list[tuple[int, dict[str, Any]]] = []
    for start in range(0, len(data), step):
        out.extend(reader.feed_numbered(data[start : start + step]))
    return out


def _first_str(record: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = record.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _recompute_one(
    line: int,
    record: dict[str, Any],
    sessions: Path,
    lenient: bool,
    cache: dict[tuple[Path, str | None], dict[str, Any]],
) -> tuple[RunOutcome, int]:
    named_run = _first_str(record, RUN_ID_FIELDS)
    experiment = record.get("experiment") if isinstance(record.get("experiment"), str) else None
    outcome = RunOutcome(line, record, named_run or f"line {line}", experiment)
    name = _first_str(record, SESSION_FIELDS) or (f"{named_run}.jsonl" if named_run else None)
    if name is None:  # it looked for `line N.jsonl`, a file no run is named
        outcome.error = f"names no run ({', '.join(RUN_ID_FIELDS)}) nor session file ({', '.join(SESSION_FIELDS)})"
        return outcome, 0
    path = Path(name) if os.path.isabs(name) else sessions / name
    at = record.get("at")
    at_key = str(at) if isinstance(at, (str, int)) and not isinstance(at, bool) else None
    recorded = record.get("metrics", {})
    if not isinstance(recorded, dict):
        outcome.error = "metrics must be a JSON object"
        return outcome, 0
    size = 0
    try:
        computed = cache.get((path, at_key))
        if computed is None:
            size = path.stat().st_size
            replayed = replay_file(path, at=at_key, lenient=lenient)
            for warning in replayed.warnings:  # what --lenient dropped, as `replay` says it
                warn(f"{path}: {warning.message}")
            computed = cache[(path, at_key)] = replayed.metrics
    except SessionLogError as exc:
        outcome.error = describe(exc, str(path))
        return outcome, size
    except OSError as exc:
        outcome.error = f"{path}: {exc.strerror or exc}"
        return outcome, size
    outcome.computed = computed
    outcome.changes = compare_recorded(recorded, computed)
    outcome.missing = missing_metrics(recorded, computed)
    outcome.unknown = unknown_metrics(recorded)
    return outcome, size


def _report(outcomes: list[RunOutcome]) -> None:
    console = _stdout()
    groups: dict[str | None, list[RunOutcome]] = {}
    for outcome in outcomes:
        if outcome.changes or outcome.error:
            groups.setdefault(outcome.experiment, []).append(outcome)
    for experiment, members in groups.items():
        changed = sum(1 for m in members if m.changes)
        if experiment is not None:
            console.print(f"{experiment}: {changed} run(s) changed", markup=False)
        for member in members:
            if member.error:
                console.print(f"  {member.run_id}  error: {member.error}", markup=False)
                continue
            console.print(f"  {member.run_id}", markup=False)
            for change in member.changes:
                text = f"    {change.key}: {render(change.old)} -> {render_new(change, member.computed)}"
                console.print(text, markup=False)


def _report_missing(outcomes: list[RunOutcome]) -> None:
    """Metrics some records lack, once for the whole file: a metric added to the code since the
    runs were recorded is news about the code, not a change of every run."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        for addition in outcome.missing:
            metric = canonical_key(addition.key) or addition.key
            counts[metric] = counts.get(metric, 0) + 1
    if counts:
        listed = ", ".join(f"{metric} ({count} run(s))" for metric, count in counts.items())
        _stdout().print(f"not recorded, not compared (--write --add-new adds them): {listed}", markup=False)


def _report_unknown(outcomes: list[RunOutcome]) -> None:
    """Recorded keys recompute has no metric for, once for the whole file: a run reported
    unchanged was not checked on them (a misspelt key, or a figure only `stats` has)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        for key in outcome.unknown:
            counts[key] = counts.get(key, 0) + 1
    if counts:
        listed = ", ".join(f"{key} ({count} run(s))" for key, count in counts.items())
        text = f"recorded, not recomputed (no such metric; `sessionlog replay --json` lists them): {listed}"
        _stdout().print(text, markup=False)


LOWER_BOUNDS_NAMED = 10
"""How many runs whose cost is a lower bound the report names (then counts the rest)."""


def _report_lower_bounds(outcomes: list[RunOutcome]) -> None:
    """The runs whose recomputed `costUsd` leaves out the cost of unpriced events, changed or
    not, once for the file: their recorded cost is a lower bound too, which no change line says
    of an unchanged run."""
    named = [(o.run_id, o.computed["unpricedEvents"]) for o in outcomes if o.computed.get("unpricedEvents")]
    if not named:
        return
    listed = ", ".join(f"{run_id} ({count})" for run_id, count in named[:LOWER_BOUNDS_NAMED])
    if len(named) > LOWER_BOUNDS_NAMED:
        listed += f", and {len(named) - LOWER_BOUNDS_NAMED} more"
    text = f"costUsd is a lower bound (unpricedEvents not 0) in {len(named)} run(s): {listed}"
    _stdout().print(text, markup=False)


def _rewrite(runs: Path, data: bytes, outcomes: list[RunOutcome], *, add_new: bool) -> None:
    """Replace the given records' lines, keep every other byte, swap the file in atomically."""
    lines = data.split(b"\n")
    for outcome in outcomes:
        record = dict(outcome.record)
        edits = outcome.changes + (outcome.missing if add_new else [])
        record["metrics"] = apply_changes(record.get("metrics") or {}, edits)
        old = lines[outcome.line - 1]
        ending = b"\r" if old.endswith(b"\r") else b""
        lines[outcome.line - 1] = dumps(record).encode("utf-8") + ending
    write_atomically(runs, [b"\n".join(lines)])
