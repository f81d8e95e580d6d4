"""The global options (`--server`, `--token`, `--ca-file`) after the command too.

Click takes a group's options only before the subcommand, so `sessionlog events X --server
HOST:PORT` said "No such option: --server", where people put options at the end. Each command
that talks to a server takes a copy of the group's options: the same names, help and checks,
no value passed to the command's function (each sets `State` as it is parsed), and no
environment variable (the group reads those; read again here, a variable would override an
option given before the command). Given on both sides, the one after the command counts.
"""

from __future__ import annotations

import copy
from typing import Any

from typer.core import TyperGroup

from sessionlog.cli.common import State
from sessionlog.cli.lazy_commands import LazyCommandGroup

LOCAL_COMMANDS = frozenset({"serve", "db", "token", "replay", "recompute"})
"""Commands that talk to no server (they serve, or work on files): no global option is theirs."""

PANEL = "Global options (before or after the command)"


class GlobalOptionsAnywhere(LazyCommandGroup):
    """The `sessionlog` group: hands its options to each command that talks to a server."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None or cmd_name in LOCAL_COMMANDS or isinstance(command, TyperGroup):
            return command
        taken = {param.name for param in command.params}
        for option in self.params:
            if option.name not in taken and option.name != "help" and not getattr(option, "is_eager", False):
                command.params.append(_after_command(option))
        return command


def _after_command(option: Any) -> Any:
    """A copy of the group's `option` for a command: sets `State` when given, passes nothing."""
    copied = copy.copy(option)
    copied.expose_value = False
    copied.envvar = None
    copied.show_envvar = False
    copied.default = None
    copied.callback = lambda _ctx, param, value: State.set(param.name, value)
    copied.rich_help_panel = PANEL
    return copied
