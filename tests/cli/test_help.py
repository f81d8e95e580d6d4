"""`sessionlog COMMAND --help` reads as prose: a docstring's paragraphs flow to the terminal's
width, whatever width their source lines were wrapped at."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.servers import ROOT


def help_text(*command: str, columns: int) -> str:
    """What `sessionlog COMMAND --help` prints on a terminal `columns` wide."""
    result = subprocess.run(
        [sys.executable, "-m", "sessionlog", *command, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_paragraph_flows_past_the_line_breaks_of_its_source() -> None:
    # The docstring breaks after "arrive"; the help kept that break, so on an 80-column
    # terminal every source line was wrapped and then cut again, a few words to a line.
    wide = help_text("append", columns=200)
    assert "lines are sent as they arrive (whatever is available is sent at once" in wide
    narrow = help_text("append", columns=80)
    lines = [line.strip() for line in narrow.splitlines()]
    assert "arrive" not in lines  # no line of one word, left over from the source's wrapping
    # A command's summary in the list of commands flows too.
    assert "the exact request of that prefix" in help_text(columns=200)


def test_the_recompute_example_keeps_its_lines() -> None:
    text = help_text("recompute", columns=120)
    assert '{"run_id": "r17", "experiment": "e22", "session_file": "r17.jsonl",' in text
    assert "DIR/<run_id>.jsonl" in text


def test_placeholders_in_angle_brackets_are_shown() -> None:
    assert "ID.<leafId>" in help_text("import", columns=200)


COMMANDS = [
    *[
        "serve",
        "create",
        "append",
        "events",
        "sessions",
        "tail",
        "history",
        "transcript",
        "request",
        "stats",
        "surface",
        "costs",
        "resume",
        "fork",
    ],
    *["import", "export", "ingest", "replay", "recompute", "view", "otlp", "diff"],
]


def test_nothing_is_cut_at_80_columns() -> None:
    # `export --format`'s choices took the type column's width: they broke mid-word
    # ("otlp-jso" / "n>") and `--with-content`'s help was cut at "gen_ai.input/output.mes…".
    for command in COMMANDS:
        text = help_text(command, columns=80)
        assert "…" not in text, (command, text)
    assert "<pi|sessionlog|otlp-json>" not in help_text("export", columns=80)


def test_every_summary_in_the_list_of_commands_is_short() -> None:
    # `costs`' summary took seven lines of the list at 80 columns: the list is for finding a
    # command, its help for the details.
    listing = help_text(columns=80)
    rows = [line for line in listing.splitlines() if line.startswith("│ ")]
    summaries: dict[str, int] = {}
    name = ""
    for row in rows:
        first = row[2:].split(" ", 1)[0]
        if first:  # a command's first line (`db` and `token` are groups: not counted)
            name = first if first in COMMANDS else ""
            summaries.setdefault(name, 0)
        if name:
            summaries[name] += 1
    summaries.pop("", None)
    assert set(summaries) == set(COMMANDS)
    assert {command: lines for command, lines in summaries.items() if lines > 3} == {}
