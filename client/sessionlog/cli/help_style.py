"""How `--help` writes what goes where: the conventions of click and argparse, one rule for the app.

Typer 0.29 (it carries its own click) writes a parameter's Python type in angle brackets: a
flag showed `<bool>` as if it wanted a value, every value `<str>` or `<int range>` where a name
saying what goes there reads better, and the usage line wrote a required argument as
`{session_id}` (0.28 wrote the same but for the flags; 0.24, the last on click, wrote `TEXT` and
`SESSION_ID`, but going back five versions for the help's looks was not worth it). Here instead:

- a flag (`--takeover`, `--release/--keep`, `--help`) shows no value at all;
- an option shows its metavar (`--server HOST:PORT`), given where the option is declared;
  without one, click's name for its type: `TEXT`, `INTEGER`, `PATH`, `[json|table]`;
- an argument is its metavar, or its name in capitals, in the usage line and in the list of
  arguments (`sessionlog append [OPTIONS] SESSION_ID`; `[FILE]` when optional, `FILE...` when
  repeated), with no type beside it.

`ConventionalTyper` applies this to every command and group made from it: `main.py` builds the
app, and its sub-apps (`db`, `token`), with it. Typer makes its own parameter classes and its
`--help` option with no hook for others, so each command puts its parameters into the classes
below as it is made (and its `--help` option as it is first asked for), keeping their state.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

import typer
from typer._click.core import Command as ClickCommand  # Typer 0.29's own click: its classes' base
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import CommandFunctionType

CLICK_TYPE_NAMES: dict[Any, str] = {int: "INTEGER", float: "FLOAT", bool: "BOOLEAN", datetime: "DATETIME"}
"""click's metavar of a value type; any other (str above all) is `TEXT`."""


class ConventionalOption(TyperOption):
    """An option whose help shows its metavar, or nothing for a flag."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        metavar = self.metavar if self.metavar is not None else type_metavar(self)
        return metavar if self.nargs == 1 else f"{metavar}..."


class ConventionalArgument(TyperArgument):
    """An argument named by its metavar (its name in capitals by default), typeless in help."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw if self.nargs == 1 else f"{self.display_name_raw}..."
        return [name if self.required else f"[{name}]"]


def type_metavar(option: TyperOption) -> str:
    """click's metavar for what `option` takes: its choices, `PATH`, `INTEGER`, `FLOAT`, `TEXT`."""
    described = option.type_descriptor
    if described.choices is not None:
        return "[" + "|".join(str(getattr(choice, "value", choice)) for choice in described.choices) + "]"
    if described.is_path:
        return "PATH"
    annotation = get_args(described.annotation)[0] if described.is_list else described.annotation
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "PATH"
    return CLICK_TYPE_NAMES.get(annotation, "TEXT")


def conform(param: Any) -> None:
    """Put `param`, one of Typer's parameters, into the class above that writes its help (the
    subclasses add methods only, so the parameter's state serves them as it is)."""
    if type(param) is TyperOption:
        param.__class__ = ConventionalOption
    elif type(param) is TyperArgument:
        param.__class__ = ConventionalArgument


class _Conforming(ClickCommand):
    """What `ConventionalCommand` and `ConventionalGroup` add to Typer's classes: their
    parameters, and their `--help` when it is first asked for, write their help by the rule
    above (first in their bases, so that `super()` is Typer's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            conform(param)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        conform(option)
        return option


class ConventionalCommand(_Conforming, TyperCommand):
    """A command whose parameters and `--help` write their help by the rule above."""


class ConventionalGroup(_Conforming, TyperGroup):
    """A group whose own options and `--help` write their help by the rule above (its commands
    are `ConventionalTyper`'s)."""


class ConventionalTyper(typer.Typer):
    """A `typer.Typer` whose group and commands write their help by the rule above. A `cls`
    given should subclass `ConventionalGroup` (the app) or `ConventionalCommand` (a command):
    another keeps Typer's way (tests/cli/test_help.py walks every command and would say so)."""

    def __init__(self, *, cls: type[TyperGroup] | None = None, **settings: Any) -> None:
        super().__init__(cls=cls or ConventionalGroup, **settings)

    def command(
        self, name: str | None = None, *, cls: type[TyperCommand] | None = None, **settings: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        return super().command(name, cls=cls or ConventionalCommand, **settings)
