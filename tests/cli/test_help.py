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
