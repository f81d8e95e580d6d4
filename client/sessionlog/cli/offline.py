"""Offline commands: `replay` one session file, `recompute` the metrics of recorded runs (seed 000).

Neither needs a server: both fold session files with the pure core (`sessionlog.core.formats`).
`cli/main.py` adds them with `offline.register(app)`.

**Run records** (`recompute RUNS.jsonl`): one JSON object per line, as a benchmark runner writes
them. The fields read are

| field | meaning |
|---|---|
| `run_id` (or `id`, `run`) | the run's name, used in the report |
| `experiment` (optional) | groups the report ("e22_compaction: 5 run(s) changed") |
| `session_file` (or `session`, `session_path`) | the session file, under `--sessions DIR` unless absolute |
| `at` (optional) | the entry id (Pi) or seq (sessionlog) the metrics were taken at |
| `metrics` | the recorded metrics: the replay keys in camelCase (`costUsd`) or snake_case (`cost_usd`) |

Without a session field the file is `<DIR>/<run_id>.jsonl`. Every other field is kept as is.
`--write` replaces only the `metrics` of runs that changed (keys keep the record's spelling; new
ones follow it), leaves every other line byte for byte, and rewrites the file atomically (a
temporary file in the same directory, fsync, `os.replace`). Recompute compares every metric it
computes: one the record lacks counts as recorded null, so a newly added metric shows up.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog.core.formats.jsonl import JsonlReader
from sessionlog.core.formats.replay import (
    LABELS,
    Change,
    Replay,
    apply_changes,
    canonical_key,
    compare_recorded,
    recompute_changes,
    replay_file,
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


def _fail(error: SessionLogError, what: str = "error") -> typer.Exit:
    _stderr().print(f"{what}: {error.message} [{error.reason}]", markup=False)
    return typer.Exit(2)


def render(value: Any) -> str:
    """A metric value as JSON text (null, numbers, quoted strings)."""
    return dumps(value)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("Usd") and isinstance(value, (int, float)):
        return f"{value:.6f}"
    return str(value)


# --- replay --------------------------------------------------------------------------------


def replay_command(
    file: Path = typer.Argument(..., help="A Pi session file or a sessionlog JSONL export."),
    at: str | None = typer.Option(None, "--at", help="Entry id (Pi) or seq (sessionlog) to fold up to."),
    check: Path | None = typer.Option(
        None, "--check", help="A run record (JSON) whose `metrics` to compare with; exit 1 on a difference."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the metrics as one JSON object."),
    lenient: bool = typer.Option(False, "--lenient", help="Drop a truncated last line with a warning."),
) -> None:
    """Fold a session file without a server and print its metrics (SPEC §11)."""
    try:
        result = replay_file(file, at=at, lenient=lenient)
        recorded = _load_recorded(check) if check is not None else None
    except SessionLogError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        _stderr().print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    for warning in result.warnings:
        _stderr().print(f"warning: {warning.message}", markup=False)
    changes = compare_recorded(recorded, result.metrics) if recorded is not None else []
    if as_json:
        _print_json(result, recorded, changes)
    else:
        _print_table(result)
        if recorded is not None:
            _print_check(recorded, changes)
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
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("metric")
    table.add_column("value")
    for key, value in result.table_metrics().items():
        table.add_row(Text(LABELS[key]), Text(_cell(key, value)))
    _stdout().print(table)


def _print_check(recorded: dict[str, Any], changes: list[Change]) -> None:
    console = _stdout()
    count = _recognised(recorded)
    if count == 0:
        console.print("check: the record holds no metric this replay computes", markup=False)
    elif not changes:
        console.print(f"check: all {count} recorded metrics match", markup=False)
    else:
        console.print(f"check: {len(changes)} of {count} recorded metrics differ (recorded -> replayed)", markup=False)
        for change in changes:
            console.print(f"  {change.key}: {render(change.old)} -> {render(change.new)}", markup=False)


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
    error: str | None = None


def recompute_command(
    runs: Path = typer.Argument(..., help="Run records, one JSON object per line."),
    sessions: Path = typer.Option(..., "--sessions", help="Directory the records' session files are in."),
    write: bool = typer.Option(False, "--write", help="Rewrite RUNS with the new metrics (atomically)."),
    lenient: bool = typer.Option(False, "--lenient", help="Drop truncated last lines of session files."),
) -> None:
    """Recompute every run's metrics from its session file and report what changed."""
    try:
        data = runs.read_bytes()
        reader = JsonlReader()
        numbered = _feed_all(reader, data)
        reader.close()
    except SessionLogError as exc:
        raise _fail(exc) from None
    except OSError as exc:
        _stderr().print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None

    started = time.perf_counter()
    outcomes: list[RunOutcome] = []
    total_bytes = 0
    cache: dict[tuple[Path, str | None], dict[str, Any]] = {}
    with _progress(len(numbered)) as advance:
        for line, record in numbered:
            outcome, size = _recompute_one(line, record, sessions, lenient, cache)
            outcomes.append(outcome)
            total_bytes += size
            advance()
    elapsed = time.perf_counter() - started

    _report(outcomes)
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
    if write and changed:
        _rewrite(runs, data, changed)
        console.print(f"wrote the new metrics of {len(changed)} run(s) to {runs}", markup=False)
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
    run_id = _first_str(record, RUN_ID_FIELDS) or f"line {line}"
    experiment = record.get("experiment") if isinstance(record.get("experiment"), str) else None
    outcome = RunOutcome(line, record, run_id, experiment)
    name = _first_str(record, SESSION_FIELDS) or f"{run_id}.jsonl"
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
            computed = replay_file(path, at=at_key, lenient=lenient).metrics
            cache[(path, at_key)] = computed
    except SessionLogError as exc:
        outcome.error = f"{path}: {exc.message} [{exc.reason}]"
        return outcome, size
    except OSError as exc:
        outcome.error = f"{path}: {exc.strerror or exc}"
        return outcome, size
    outcome.changes = recompute_changes(recorded, computed)
    return outcome, size


@contextmanager
def _progress(total: int) -> Iterator[Any]:
    """A rich progress bar on a terminal; nothing when stdout is a pipe or a file."""
    if not (sys.stdout.isatty() and _stdout().is_terminal):
        yield lambda: None
        return
    columns = (TextColumn("recomputing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True, console=_stdout()) as progress:
        task = progress.add_task("runs", total=total)
        yield lambda: progress.advance(task)


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
                console.print(f"    {change.key}: {render(change.old)} -> {render(change.new)}", markup=False)


def _rewrite(runs: Path, data: bytes, changed: list[RunOutcome]) -> None:
    """Replace the changed records' lines, keep every other byte, swap the file in atomically."""
    lines = data.split(b"\n")
    for outcome in changed:
        record = dict(outcome.record)
        record["metrics"] = apply_changes(record.get("metrics") or {}, outcome.changes)
        old = lines[outcome.line - 1]
        ending = b"\r" if old.endswith(b"\r") else b""
        lines[outcome.line - 1] = dumps(record).encode("utf-8") + ending
    payload = b"\n".join(lines)
    directory = runs.resolve().parent
    mode = runs.stat().st_mode & 0o7777
    handle, temp = tempfile.mkstemp(prefix=f".{runs.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, mode)
        os.replace(temp, runs)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise
    with suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
