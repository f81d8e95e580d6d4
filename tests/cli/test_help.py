"""`sessionlog COMMAND --help` reads as prose: a docstring's paragraphs flow to the terminal's
width, whatever width their source lines were wrapped at; and it names what goes where as click
does (`SESSION_ID`, `--server HOST:PORT`, a flag with no value)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import typer
from typer.testing import CliRunner

from sessionlog.cli.main import app
from tests.support.fresh_interpreter import loaded
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


TYPE_NAME = re.compile(r"<(?:str|int|float|bool|path|list|tuple|datetime)\b[^>]*>")
"""Typer's own words for a value's type (`<str>`, `<int range>`, `<bool>`), which the help said
in place of what goes there (help texts' own `<leafId>`, `<run_id>` are no type names)."""


def commands() -> list[tuple[tuple[str, ...], Any, Any]]:
    """Every command of the app, groups and the app itself included: the words that name it, the
    command, and a context for it."""
    root = typer.main.get_command(app)
    found: list[tuple[tuple[str, ...], Any, Any]] = []

    def walk(command: Any, ctx: Any, path: tuple[str, ...]) -> None:
        found.append((path, command, ctx))
        for name in getattr(command, "list_commands", lambda _ctx: [])(ctx):
            sub = command.get_command(ctx, name)
            walk(sub, type(ctx)(sub, info_name=name, parent=ctx), (*path, name))

    walk(root, typer.Context(root, info_name="sessionlog"), ())
    return found


def help_in_process(*command: str) -> str:
    """`sessionlog COMMAND --help` as the app prints it, 200 columns wide (no row wraps)."""
    result = CliRunner().invoke(
        app, [*command, "--help"], prog_name="sessionlog", env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def row(text: str, option: str) -> list[str]:
    """The words of the first line of `option`'s row in a help panel, the required mark dropped."""
    for line in text.splitlines():
        words = [word for word in line.strip("│ ").split() if word != "*"]
        if words and words[0] == option:
            return words
    raise AssertionError(f"no row for {option}:\n{text}")


def test_every_command_names_what_goes_where() -> None:
    # Typer 0.29 wrote `{session_id}` in the usage line, `<bool>` beside a flag that takes no
    # value, and `<str>`/`<int range>` for every value: cli/help_style.py writes them as click does.
    found = commands()
    assert {("append",), ("db", "upgrade"), ("token", "new"), ("import",)} <= {path for path, _, _ in found}
    for path, command, ctx in found:
        text = help_in_process(*path)
        usage = next(line for line in text.splitlines() if "Usage:" in line)
        assert "{" not in usage and "}" not in usage, (path, usage)
        assert not TYPE_NAME.search(text), (path, TYPE_NAME.search(text), text)
        for param in command.get_params(ctx):
            if getattr(param, "is_flag", False) and not param.hidden:
                # A flag's row is its names, then its help: no value between them.
                names = [*param.opts, *param.secondary_opts]
                words = row(text, param.opts[0])
                assert words[: len(names)] == names, (path, words)
                assert words[len(names)] == (param.help or "").split()[0], (path, words)


def test_options_and_arguments_show_their_metavar() -> None:
    assert "sessionlog append [OPTIONS] SESSION_ID " in help_in_process("append")
    assert "sessionlog import [OPTIONS] FILE... " in help_in_process("import")
    assert "sessionlog replay [OPTIONS] FILE " in help_in_process("replay")
    assert row(help_in_process("append"), "--server")[1] == "HOST:PORT"  # a global option, after the command
    assert row(help_in_process(), "--server")[1] == "HOST:PORT"
    # The address it talks to unless told (it was in the README only), after the command too.
    for command in ((), ("events",)):
        assert "(default 127.0.0.1:50051)" in " ".join(help_in_process(*command).split()), command
    assert row(help_in_process("events"), "--from")[1:3] == ["SEQ", "[x>=0]"]
    assert row(help_in_process("serve"), "--workers")[1] == "N"
    assert row(help_in_process("export"), "--output")[1:3] == ["-o", "FILE"]
    assert row(help_in_process("costs"), "--format")[1] == "[json|table]"  # choices, as click lists them
    assert row(help_in_process("append"), "SESSION_ID")[1:3] == ["The", "session"]  # no type beside it


FILE_COMMAND_MODULES = (
    "sessionlog.cli.transfer_commands",
    "sessionlog.cli.offline",
    "sessionlog.cli.view_commands",
    "sessionlog.cli.otlp_commands",
)


def test_a_command_loads_no_module_of_the_file_commands() -> None:
    """`sessionlog events ...` (and `serve`) loaded the modules of every command, the Pi
    importer, the replay fold, the OTLP export and the session page among them: a quarter of
    its CPU. Those commands' modules load when one of them is run or listed (lazy_commands.py);
    running another command in a fresh interpreter loads none of them."""
    steps = (
        "from typer.testing import CliRunner\n"
        "from sessionlog.cli.main import app\n"
        "result = CliRunner().invoke(app, ['events', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
    )
    assert loaded(steps, FILE_COMMAND_MODULES) == []


def test_a_mistyped_command_is_answered_with_one_loaded_when_asked_for() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sessionlog", "imprt"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 2
    assert "No such command 'imprt'. Did you mean 'import'?" in result.stderr
