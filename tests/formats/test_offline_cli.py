"""`sessionlog replay` and `sessionlog recompute` (seed 000), run on a fresh Typer app."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sessionlog.cli.common import table_cell
from sessionlog.cli.offline import register
from sessionlog.core.formats.pi.importer import branch_events
from sessionlog.core.formats.pi.load import load_pi_file
from sessionlog.core.formats.replay import METRIC_KEYS, Change, missing_metrics, replay_file, values_equal
from sessionlog.core.formats.sessionlog_file import sessionlog_lines
from tests.support.fixtures import RESUMED_SESSION, fixture, pi_generated_sessions
from tests.support.fixtures import oracle as pi_oracle

RESUMED = fixture(RESUMED_SESSION)
GENERATED = pi_generated_sessions()
BRANCHY = next(p for p in GENERATED if p.name.startswith("2025-10-04"))


@pytest.fixture()
def app() -> typer.Typer:
    application = typer.Typer()
    register(application)
    return application


def run(app: typer.Typer, *args: str) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


# --- replay --------------------------------------------------------------------------------


def test_replay_prints_the_spec_table(app: typer.Typer) -> None:
    result = run(app, "replay", RESUMED)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    table = {" ".join(r[:-1]): r[-1] for r in rows if r}
    assert table == {
        "session format": "v3",
        "events in file": "7",
        "events on branch": "6",
        "events off branch": "0",
        "model": "gpt-5.5",
        "provider": "openai-codex",
        "thinking": "medium",
        "messages": "4",
        "turns": "2",
        "model calls": "2",
        "tool calls": "0",
        "compactions": "0",
        "input tokens": "3012",
        "cache read tokens": "0",
        "cache write tokens": "0",
        "output tokens": "15",
        "cost usd": "0.015510",
        "unpriced events": "0",
    }


def test_replay_marks_a_cost_that_leaves_unpriced_usage_out(app: typer.Typer, tmp_path: Path) -> None:
    """A file whose model had no pricing (usage with tokens, no cost) replays with its
    `unpricedEvents` and its cost marked `≥` in the table, as `sessionlog costs` marks it: the
    cost is a lower bound. Replay printed `cost usd 0.000000`, a free model's figure."""
    lines = [json.loads(line) for line in RESUMED.read_text().splitlines()]
    for line in lines:
        if line.get("type") == "message" and line["message"]["role"] == "assistant":
            del line["message"]["usage"]["cost"]
    path = tmp_path / "unpriced.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = json.loads(run(app, "replay", path, "--json").output)
    assert (data["costUsd"], data["unpricedEvents"]) == (0.0, 2)
    rows = [line.split() for line in run(app, "replay", path).output.splitlines()]
    table = {" ".join(r[:-1]): r[-1] for r in rows if r}
    assert (table["cost usd"], table["unpriced events"]) == ("≥0.000000", "2")


def test_replay_json_has_exactly_the_spec_keys(app: typer.Typer) -> None:
    result = run(app, "replay", BRANCHY, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == list(METRIC_KEYS)
    assert data == replay_file(BRANCHY).table_metrics()


def _with_an_unpriced_call(path: Path) -> Path:
    """RESUMED and one more model call whose usage has tokens but no cost (a model without
    pricing), at `path`."""
    lines = RESUMED.read_text("utf-8").splitlines()
    leaf = json.loads(lines[-1])["id"]
    usage = {"input": 100, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 105}
    message = {"role": "assistant", "content": [{"type": "text", "text": "43"}], "provider": "local",
               "model": "m", "usage": usage, "stopReason": "stop", "timestamp": 1780065900000}  # fmt: skip
    call = {"type": "message", "id": "unpr1ced", "parentId": leaf, "timestamp": "2026-05-29T14:45:00.000Z",
            "message": message}  # fmt: skip
    path.write_text("\n".join([*lines, json.dumps(call)]) + "\n", "utf-8")
    return path


def test_replay_says_a_cost_that_leaves_unpriced_calls_out_is_a_lower_bound(app: typer.Typer, tmp_path: Path) -> None:
    """Replay printed the priced calls' sum as the file's cost, with nothing to tell it from the
    whole; `stats` and `costs` count the calls left out (`unpricedEvents`) and mark the cost `≥`."""
    path = _with_an_unpriced_call(tmp_path / "unpriced.jsonl")
    table = run(app, "replay", path)
    assert table.exit_code == 0, table.output
    rows = {" ".join(r[:-1]): r[-1] for r in (line.split() for line in table.output.splitlines()) if r}
    assert (rows["cost usd"], rows["unpriced events"]) == ("≥0.015510", "1")
    data = json.loads(run(app, "replay", path, "--json").output)
    assert (data["costUsd"], data["unpricedEvents"]) == (0.01551, 1)  # the number stays a number


def test_replay_at_an_entry(app: typer.Typer) -> None:
    oracle = pi_oracle(BRANCHY)
    other = oracle["otherLeaves"][0]
    data = json.loads(run(app, "replay", BRANCHY, "--json", "--at", other["leafId"]).output)
    assert data["eventsOnBranch"] == len(other["path"])
    assert data["messages"] == len(other["context"]["messages"])


def test_replay_unknown_entry_is_an_error(app: typer.Typer) -> None:
    result = run(app, "replay", RESUMED, "--at", "deadbeef")
    assert result.exit_code == 2
    assert "UNKNOWN_ENTRY" in result.output


def test_replay_missing_file(app: typer.Typer, tmp_path: Path) -> None:
    result = run(app, "replay", tmp_path / "none.jsonl")
    assert result.exit_code == 2
    # It printed Python's "[Errno 2] No such file or directory: '...'".
    assert result.output.replace("\n", "") == f"sessionlog: error: {tmp_path / 'none.jsonl'}: No such file or directory"


def test_replay_of_an_empty_or_unrecognised_file_says_what_it_holds(app: typer.Typer, tmp_path: Path) -> None:
    empty, typeless = tmp_path / "empty.jsonl", tmp_path / "typeless.jsonl"
    empty.write_bytes(b"")
    typeless.write_bytes(b'{"a":1}\n')
    assert run(app, "replay", empty).output.strip() == (
        "sessionlog: error: EMPTY_SESSION_FILE: the file holds no JSON line"
    )
    said = run(app, "replay", typeless).output.replace("\n", "")
    assert said.endswith(": its first line has no type")  # it said "but type None"


def test_replay_truncated_file_strict_then_lenient(app: typer.Typer, tmp_path: Path) -> None:
    path = tmp_path / "crashed.jsonl"
    path.write_bytes(RESUMED.read_bytes() + b'{"type":"message","id":"ab')
    strict = run(app, "replay", path)
    assert strict.exit_code == 2
    assert "TRUNCATED_LAST_LINE" in strict.output
    lenient = run(app, "replay", path, "--lenient", "--json")
    assert lenient.exit_code == 0
    assert "dropped a truncated last line of 26 bytes" in lenient.output
    assert json.loads(lenient.output.splitlines()[-1])["eventsInFile"] == 7


def test_replay_refuses_what_an_append_refuses(app: typer.Typer, tmp_path: Path) -> None:
    """An unknown type without `ignorable` is refused at its own line, as the service refuses it
    (UNKNOWN_TYPE), not folded past; as are a writer's `interrupted` turn end and an oversized
    eventId: the envelope rules of an append (`validate.validate_proposal`)."""
    header = {"type": "sessionlog", "version": 1, "session": {"id": "s"}}
    start = {"seq": 0, "time": 1, "type": "turn/start", "data": {"turn": 1}}
    step = {"seq": 2, "time": 1, "type": "step/start", "data": {"turn": 1, "step": 1}}
    cases = {
        "UNKNOWN_TYPE": {"seq": 1, "time": 1, "type": "bogus/x", "data": {"turn": 1, "step": 1}},
        "RESERVED_TURN_END_KIND": {
            "seq": 1,
            "time": 1,
            "type": "turn/end",
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        },
        "BAD_EVENT_ID": {"seq": 1, "time": 1, "type": "test/x", "ignorable": True, "data": {}, "eventId": "e" * 129},
    }
    for reason, bad in cases.items():
        path = tmp_path / f"{reason}.jsonl"
        path.write_text("".join(json.dumps(obj) + "\n" for obj in [header, start, bad, step]))
        result = run(app, "replay", path)
        assert result.exit_code == 2
        assert f"{reason}: line 3 (seq 1)" in result.output, result.output


def _with_a_negative_cost(path: Path) -> Path:
    """RESUMED with its first model call's `cost.total` at -5, at `path`: it lowered the
    replayed cost to -4.992245, where an import of the file is refused (NEGATIVE_USAGE)."""
    lines = RESUMED.read_text("utf-8").splitlines()
    call = json.loads(lines[4])
    call["message"]["usage"]["cost"]["total"] = -5
    lines[4] = json.dumps(call)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


NEGATIVE_COST = (
    "sessionlog: error: NEGATIVE_USAGE: line 5: Pi entry a07999e9: "
    "message.usage.cost.total is -5: token counts and costs cannot be negative\n"
)


def test_replay_refuses_a_negative_usage_number_strict_or_lenient(app: typer.Typer, tmp_path: Path) -> None:
    """A negative cost in a Pi file is refused as the door refuses it, naming the line, the
    entry and the field, and no figure is printed: replay summed it, and printed a cost of
    -4.992245. `--lenient` drops a crashed writer's cut-off last line, nothing that is in the
    file and wrong: the refusal stands, as every other one does."""
    path = _with_a_negative_cost(tmp_path / "negative.jsonl")
    for flags in ([], ["--json"], ["--lenient"], ["--lenient", "--json"]):
        result = run(app, "replay", path, *flags)
        assert (result.exit_code, result.output) == (2, NEGATIVE_COST), flags


def test_replay_refuses_an_export_with_a_negative_usage_number(app: typer.Typer, tmp_path: Path) -> None:
    """The same session as a sessionlog export: the event is refused by the rules of an append,
    with its line and seq, `--lenient` or not."""
    pi_file = load_pi_file(_with_a_negative_cost(tmp_path / "negative.jsonl"))
    events = [e.committed(seq, 1000 + seq) for seq, e in enumerate(branch_events(pi_file))]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(sessionlog_lines({"id": "s"}, events)), "utf-8")
    seq = next(e.seq for e in events if e.data.get("pi", {}).get("id") == "a07999e9")
    for flags in ([], ["--lenient", "--json"]):
        result = run(app, "replay", export, *flags)
        assert (result.exit_code, result.output) == (
            2,
            f"sessionlog: error: NEGATIVE_USAGE: line {seq + 2} (seq {seq}): "
            "data.message.usage.cost.total is -5: token counts and costs cannot be negative\n",
        ), flags


def _write_run(tmp_path: Path, metrics: dict[str, Any]) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"run_id": "r1", "metrics": metrics}))
    return path


def test_replay_check_matches(app: typer.Typer, tmp_path: Path) -> None:
    run_file = _write_run(tmp_path, {"cost_usd": 0.01551, "tool_calls": 0, "turns": 2, "wall_seconds": 3})
    result = run(app, "replay", RESUMED, "--check", run_file)
    assert result.exit_code == 0, result.output
    assert "check: all 3 recorded metrics match" in result.output


def test_replay_check_reports_differences_and_fails(app: typer.Typer, tmp_path: Path) -> None:
    run_file = _write_run(tmp_path, {"costUsd": 0.0154, "input_tokens": 3012, "messages": 5})
    result = run(app, "replay", RESUMED, "--check", run_file)
    assert result.exit_code == 1
    assert "costUsd: 0.0154 -> 0.01551" in result.output  # 0.0155 would match: four decimals recorded
    assert "messages: 5 -> 4" in result.output
    assert "input_tokens" not in result.output
    as_json = run(app, "replay", RESUMED, "--check", run_file, "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["check"]["differences"] == [
        {"key": "costUsd", "recorded": 0.0154, "replayed": 0.01551},
        {"key": "messages", "recorded": 5, "replayed": 4},
    ]


def test_replay_check_reads_records_written_before_provider_was_apart(app: typer.Typer, tmp_path: Path) -> None:
    """Replay printed `model` as `provider/model` and the thinking level as `thinking`; it now
    prints the stats' `model`, `provider` and `thinkingLevel`. A record of either kind is read
    as it was written: the earlier one's `model` against `provider/model`, and rewritten so."""
    legacy = {"model": "openai-codex/gpt-5.5", "thinking": "medium", "model_calls": 2}
    current = {"model": "gpt-5.5", "provider": "openai-codex", "thinkingLevel": "medium"}
    for record in (legacy, current):
        result = run(app, "replay", RESUMED, "--check", _write_run(tmp_path, record))
        assert result.exit_code == 0, result.output
        assert f"check: all {len(record)} recorded metrics match" in result.output
    stale = run(app, "replay", RESUMED, "--check", _write_run(tmp_path, {"model": "openai/gpt-4", "thinking": "low"}))
    assert stale.exit_code == 1
    assert 'model: "openai/gpt-4" -> "openai-codex/gpt-5.5"' in stale.output
    assert 'thinking: "low" -> "medium"' in stale.output
    computed = replay_file(RESUMED).metrics
    assert "provider" not in {change.key for change in missing_metrics(legacy, computed)}
    assert missing_metrics({"costUsd": 1}, computed)[4:7] == [
        Change("model", None, "gpt-5.5"),
        Change("provider", None, "openai-codex"),
        Change("thinkingLevel", None, "medium"),
    ]


def test_replay_check_with_no_known_metric_fails(app: typer.Typer, tmp_path: Path) -> None:
    result = run(app, "replay", RESUMED, "--check", _write_run(tmp_path, {"wall_seconds": 3}))
    assert result.exit_code == 1
    assert "holds no metric" in result.output


# --- recompute -----------------------------------------------------------------------------


def _runs(tmp_path: Path) -> tuple[Path, Path, list[bytes]]:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copy(RESUMED, sessions / "resumed.jsonl")
    shutil.copy(BRANCHY, sessions / "branchy.jsonl")
    good = replay_file(RESUMED).metrics
    snake = {
        "cost_usd": good["costUsd"],
        "input_tokens": good["inputTokens"],
        "tool_calls": good["toolCalls"],
    }
    full = {k: good[k] for k in good if good[k] is not None}
    lines = [
        # unchanged: every computed metric recorded, camelCase, null compaction cost omitted
        json.dumps({"run_id": "ok", "experiment": "e1", "session_file": "resumed.jsonl", "metrics": full}),
        "",
        # stale: an old cost that missed compaction usage, snake_case, fewer keys
        json.dumps(
            {
                "run_id": "stale",
                "experiment": "e1",
                "session_file": "branchy.jsonl",
                "metrics": {**snake, "cost_usd": 0.001},
                "notes": "中文 ✓",
            },
            ensure_ascii=False,
        ),
        # missing session file
        json.dumps({"run_id": "lost", "experiment": "e2", "session_file": "gone.jsonl", "metrics": {}}),
    ]
    runs = tmp_path / "runs.jsonl"
    raw = [line.encode() for line in lines]
    runs.write_bytes(b"\n".join(raw) + b"\n")
    return runs, sessions, raw


def test_recompute_reports_changes_and_counts_unchanged(app: typer.Typer, tmp_path: Path) -> None:
    runs, sessions, _ = _runs(tmp_path)
    before = runs.read_bytes()
    result = run(app, "recompute", runs, "--sessions", sessions)
    assert result.exit_code == 1, result.output  # one run could not be recomputed
    out = result.output
    assert "e1: 1 run(s) changed" in out
    assert "  stale" in out
    branchy = replay_file(BRANCHY).metrics
    assert f"    cost_usd: 0.001 -> {json.dumps(branchy['costUsd'])}" in out
    assert "session_format" not in out  # not recorded: not a change of the run
    assert "not recorded, not compared (--write --add-new adds them): sessionFormat (1 run(s))" in out
    assert "compactionCostUsd" not in out  # null, and not recorded
    assert "lost  error:" in out and "gone.jsonl" in out
    assert "1 run(s) unchanged" in out
    assert "1 run(s) differ from the recorded metrics" in out
    assert "1 run(s) could not be recomputed" in out
    assert "MB/s" in out
    assert runs.read_bytes() == before  # no --write, no change
    assert "recomputing" not in out  # no progress bar off a terminal


def test_recompute_lenient_says_what_it_dropped(app: typer.Typer, tmp_path: Path) -> None:
    """`recompute --lenient` dropped a session file's truncated last line without a word, where
    `replay --lenient` warns: it now says which file lost how much, as `replay` does."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "crashed.jsonl").write_bytes(RESUMED.read_bytes() + b'{"type":"message","id":"ab')
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "crashed", "metrics": {}}) + "\n")
    strict = run(app, "recompute", runs, "--sessions", sessions)
    assert strict.exit_code == 1 and "TRUNCATED_LAST_LINE" in strict.output
    lenient = run(app, "recompute", runs, "--sessions", sessions, "--lenient")
    assert lenient.exit_code == 0, lenient.output
    said = lenient.output.replace("\n", "")  # rich wraps a long line at the console's width
    assert (
        f"sessionlog: warning: {sessions / 'crashed.jsonl'}: line 8: dropped a truncated last line of 26 bytes" in said
    )


def test_recompute_reports_a_cost_recorded_as_zero(app: typer.Typer, tmp_path: Path) -> None:
    """A run whose compaction usage was dropped recorded `compactionCostUsd: 0.0`. Compared "at
    the precision it was recorded with" (one decimal), every cost under 0.05 matched it: the
    fixed figure was reported unchanged, and --write left the zero in place."""
    session = tmp_path / "compacted.jsonl"
    lines = RESUMED.read_text("utf-8").splitlines()
    leaf = json.loads(lines[-1])["id"]
    usage = {"input": 900, "output": 100, "cost": {"total": 0.0015}}
    compaction = {"type": "compaction", "id": "c0mpact1", "parentId": leaf, "timestamp": "2025-01-01T00:00:00.000Z",
                  "summary": "so far", "firstKeptEntryId": leaf, "tokensBefore": 2000, "usage": usage}  # fmt: skip
    session.write_text("\n".join([*lines, json.dumps(compaction)]) + "\n", "utf-8")
    assert replay_file(session).metrics["compactionCostUsd"] == 0.0015
    runs = tmp_path / "runs.jsonl"
    record = {"run_id": "r1", "session_file": session.name, "metrics": {"compactionCostUsd": 0.0}}
    runs.write_text(json.dumps(record) + "\n")
    result = run(app, "recompute", runs, "--sessions", tmp_path)
    assert "    compactionCostUsd: 0.0 -> 0.0015" in result.output
    assert "1 run(s) differ from the recorded metrics" in result.output
    assert values_equal(0.0, 0.0) and values_equal(0.0, 0) and values_equal(0.0, 1e-12)  # float noise only


def test_recompute_names_the_recorded_keys_it_does_not_recompute(app: typer.Typer, tmp_path: Path) -> None:
    """A record's key that names no metric recompute computes (a stats figure `replay` has not,
    or a misspelt one) was passed over without a word, and a run whose every such figure was
    wrong was reported unchanged."""
    shutil.copy(RESUMED, tmp_path / "resumed.jsonl")
    turns = replay_file(RESUMED).metrics["turns"]
    metrics = {"turns": turns, "toolErrors": 99, "cost": 5}
    records = [{"run_id": f"r{i}", "session_file": "resumed.jsonl", "metrics": metrics} for i in (1, 2)]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(record) + "\n" for record in records))
    out = run(app, "recompute", runs, "--sessions", tmp_path).output
    assert "2 run(s) unchanged" in out
    listed = "recorded, not recomputed (no such metric; `sessionlog replay --json` lists them): "
    assert listed + "toolErrors (2 run(s)), cost (2 run(s))" in out


def test_a_cost_cell_rounds_a_half_up_as_the_session_page_does() -> None:
    """The tables wrote a cost with Python's `:.6f`, which rounds a half to even, and the page
    with JavaScript's `toFixed(6)`, which rounds it up: 0.0078125 read 0.007812 and $0.007813."""
    assert table_cell("costUsd", 0.0078125) == "0.007813"
    assert table_cell("costUsd", 0.63615675) == "0.636157" and table_cell("costUsd", 0.0000004) == "0.000000"
    assert table_cell("costUsd", 0) == "0.000000" and table_cell("costUsd", -0.0) == "0.000000"
    assert table_cell("costUsd", 12.5) == "12.500000" and table_cell("turns", 3) == "3"


def test_recompute_says_which_costs_leave_unpriced_calls_out(app: typer.Typer, tmp_path: Path) -> None:
    """A recomputed cost that leaves out unpriced model calls is a lower bound: recompute marks
    it `≥` where it reports it changed, names every run whose cost is one (changed or not), and
    compares a recorded `unpricedEvents` like any metric. It reported the priced sum as the cost."""
    _with_an_unpriced_call(tmp_path / "unpriced.jsonl")
    shutil.copy(RESUMED, tmp_path / "priced.jsonl")
    records = [
        {"run_id": "stale", "session_file": "unpriced.jsonl", "metrics": {"cost_usd": 0.01}},
        {"run_id": "same", "session_file": "unpriced.jsonl", "metrics": {"costUsd": 0.01551, "unpricedEvents": 1}},
        {"run_id": "counted", "session_file": "unpriced.jsonl", "metrics": {"unpriced_events": 0}},
        {"run_id": "priced", "session_file": "priced.jsonl", "metrics": {"costUsd": 0.01551}},
    ]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(record) + "\n" for record in records))
    out = run(app, "recompute", runs, "--sessions", tmp_path).output
    assert "    cost_usd: 0.01 -> ≥0.01551" in out
    assert "    unpriced_events: 0 -> 1" in out
    assert "costUsd is a lower bound (unpricedEvents not 0) in 3 run(s): stale (1), same (1), counted (1)" in out
    assert "2 run(s) unchanged" in out and "2 run(s) differ from the recorded metrics" in out
    record = json.loads(
        next(line for line in runs.read_text().splitlines() if '"stale"' in line)
    )  # the report marks the cost; a rewrite writes the number
    assert record["metrics"] == {"cost_usd": 0.01}
    run(app, "recompute", runs, "--sessions", tmp_path, "--write")
    rewritten = [json.loads(line)["metrics"] for line in runs.read_text().splitlines()]
    assert rewritten[0] == {"cost_usd": 0.01551} and rewritten[2] == {"unpriced_events": 1}


def test_recompute_write_rewrites_only_changed_lines_atomically(app: typer.Typer, tmp_path: Path) -> None:
    runs, sessions, raw = _runs(tmp_path)
    result = run(app, "recompute", runs, "--sessions", sessions, "--write")
    assert "wrote the new metrics of 1 run(s)" in result.output
    lines = runs.read_bytes().split(b"\n")
    assert lines[0] == raw[0] and lines[1] == b"" and lines[3] == raw[3] and lines[4] == b""
    record = json.loads(lines[2])
    assert record["notes"] == "中文 ✓"
    assert record["metrics"]["cost_usd"] == replay_file(BRANCHY).metrics["costUsd"]
    assert set(record["metrics"]) == {"cost_usd", "input_tokens", "tool_calls"}  # what was recorded
    assert list(tmp_path.glob(".runs.jsonl.*")) == []  # no temp file left behind
    again = run(app, "recompute", runs, "--sessions", sessions)
    assert "0 run(s) differ" in again.output
    assert "2 run(s) unchanged" in again.output


def test_recompute_add_new_adds_the_missing_metrics_in_the_records_spelling(app: typer.Typer, tmp_path: Path) -> None:
    runs, sessions, raw = _runs(tmp_path)
    refused = run(app, "recompute", runs, "--sessions", sessions, "--add-new")
    assert refused.exit_code == 2 and "--write" in refused.output
    result = run(app, "recompute", runs, "--sessions", sessions, "--write", "--add-new")
    assert "wrote the new metrics of 1 run(s)" in result.output  # "ok" recorded everything already
    lines = runs.read_bytes().split(b"\n")
    assert lines[0] == raw[0]
    metrics = json.loads(lines[2])["metrics"]
    assert metrics["session_format"] == "v3" and "sessionFormat" not in metrics
    assert "not recorded" not in run(app, "recompute", runs, "--sessions", sessions).output


def test_recompute_of_seed_000_style_records_changes_nothing(app: typer.Typer, tmp_path: Path) -> None:
    """Four metrics recorded, cost to six decimals: unchanged, and the other metrics listed once."""
    shutil.copy(BRANCHY, tmp_path / "b.jsonl")
    good = replay_file(BRANCHY).metrics
    recorded = {"turns": good["turns"], "model_calls": good["modelCalls"], "cost_usd": round(good["costUsd"], 6)}
    recorded["input_tokens"] = good["inputTokens"]
    runs = tmp_path / "runs.jsonl"
    lines = [json.dumps({"run_id": f"b{i}", "session": "b.jsonl", "metrics": recorded}) for i in range(3)]
    runs.write_text("\n".join(lines) + "\n")
    result = run(app, "recompute", runs, "--sessions", tmp_path)
    assert result.exit_code == 0, result.output
    assert "3 run(s) unchanged" in result.output and "0 run(s) differ" in result.output
    assert result.output.count("not recorded, not compared") == 1
    assert "messages (3 run(s))" in result.output


def test_recompute_reports_a_run_whose_file_holds_a_negative_usage_number(app: typer.Typer, tmp_path: Path) -> None:
    """Recompute replays each run's file as `replay` does: a run whose file holds a negative cost
    could not be recomputed (the refusal, naming the file and line, is its error), and `--write`
    leaves its record as it is. Recompute wrote the lowered cost (-4.992245) into the record."""
    _with_a_negative_cost(tmp_path / "negative.jsonl")
    shutil.copy(RESUMED, tmp_path / "good.jsonl")
    records = [
        {"run_id": "lowered", "session_file": "negative.jsonl", "metrics": {"costUsd": 0.01551}},
        {"run_id": "good", "session_file": "good.jsonl", "metrics": {"costUsd": 0.01}},
    ]
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = run(app, "recompute", runs, "--sessions", tmp_path, "--write")
    assert result.exit_code == 1, result.output
    negative = tmp_path / "negative.jsonl"
    assert f"  lowered  error: NEGATIVE_USAGE: {negative}: line 5: Pi entry a07999e9: " in result.output
    assert "1 run(s) could not be recomputed" in result.output
    assert "-4.992245" not in result.output
    rewritten = [json.loads(line)["metrics"] for line in runs.read_text().splitlines()]
    assert rewritten == [{"costUsd": 0.01551}, {"costUsd": 0.01551}]  # the good run's cost rewritten only


def test_recompute_default_session_path_and_bad_runs_file(app: typer.Typer, tmp_path: Path) -> None:
    shutil.copy(RESUMED, tmp_path / "r9.jsonl")
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "r9", "metrics": {"turns": 2}}) + "\n")
    result = run(app, "recompute", runs, "--sessions", tmp_path)
    assert result.exit_code == 0, result.output
    # only `turns` was recorded, and is right: the run is unchanged, the other metrics are listed
    assert "r9" not in result.output
    assert "1 run(s) unchanged" in result.output and "0 run(s) differ" in result.output
    assert "sessionFormat (1 run(s))" in result.output
    runs.write_text('{"run_id": "r9"\n')
    bad = run(app, "recompute", runs, "--sessions", tmp_path)
    assert bad.exit_code == 2
    assert bad.output.startswith("sessionlog: error: MALFORMED_JSON: ")  # the one CLI error format


def test_recompute_names_a_record_that_names_no_run_nor_session_file(app: typer.Typer, tmp_path: Path) -> None:
    # It was reported as run `line 2`, missing `line 2.jsonl`: a file no record named.
    shutil.copy(RESUMED, tmp_path / "r9.jsonl")
    runs = tmp_path / "runs.jsonl"
    records = [{"run_id": "r9", "metrics": {"turns": 2}}, {"metrics": {"turns": 2}}]
    runs.write_text("".join(json.dumps(record) + "\n" for record in records))
    result = run(app, "recompute", runs, "--sessions", tmp_path)
    assert "line 2  error: names no run (run_id, id, run) nor session file (session_file" in result.output
    assert "line 2.jsonl" not in result.output
    runs.write_text(json.dumps({"session_file": "r9.jsonl", "metrics": {"turns": 2}}) + "\n")  # a file, no id
    named = run(app, "recompute", runs, "--sessions", tmp_path)
    assert named.exit_code == 0 and "1 run(s) unchanged" in named.output, named.output


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other end of the terminal closed
            return out
        if not chunk:
            return out
        out += chunk


def test_replay_of_a_large_file_shows_a_bar_on_a_terminal_and_nothing_in_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "large.jsonl"
    header = {"type": "session", "version": 3, "id": "large", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"}
    with path.open("w") as out:
        out.write(json.dumps(header) + "\n")
        for i in range(10_000):  # ~10 MB, over the size that earns a bar
            message = {"role": "user", "content": "x" * 900, "timestamp": 1}
            parent = f"e{i - 1}" if i else None
            entry = {"type": "message", "id": f"e{i}", "parentId": parent, "timestamp": header["timestamp"]}
            out.write(json.dumps({**entry, "message": message}) + "\n")
    command = [sys.executable, "-m", "sessionlog", "replay", str(path), "--json"]
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    controller, terminal = pty.openpty()
    try:
        shown = subprocess.run(command, stdout=subprocess.PIPE, stderr=terminal, env=env, timeout=120)
    finally:
        os.close(terminal)
    drawn = _read_all(controller)
    os.close(controller)
    assert shown.returncode == 0
    assert b"reading large.jsonl" in drawn and b"MB" in drawn
    assert json.loads(shown.stdout)["messages"] == 10_000  # stdout holds the result alone
    piped = subprocess.run(command, capture_output=True, env=env, timeout=120)
    assert piped.returncode == 0 and piped.stderr == b""


def test_replay_table_prints_each_value_whole_in_a_pipe(app: typer.Typer, tmp_path: Path) -> None:
    """A long model name reaches a script whole (the table was cut to 80 columns with `…`), no
    line ends in padding, and a control character in a value is escaped, not sent to the terminal."""
    model = "a-long-model-" + "x" * 100 + "-中文-\x1b[31mred"
    text = RESUMED.read_text(encoding="utf-8").replace("gpt-5.5", json.dumps(model)[1:-1])
    session = tmp_path / "long.jsonl"
    session.write_text(text, encoding="utf-8")
    result = run(app, "replay", session)
    assert result.exit_code == 0, result.output
    rows = result.output.splitlines()
    shown = model.replace("\x1b", "\\u001b")
    assert f"model               {shown}" in rows
    assert all(row == row.rstrip() for row in rows) and "\x1b" not in result.output
