"""Commands whose module loads when one of them is run or listed, not with every command.

`sessionlog events X` and `sessionlog serve` loaded the modules of every command: the Pi
importer and exporter, the replay fold, the OTLP export, the session page, a quarter of
`sessionlog events X`'s CPU, for commands that read or write files and were not run. A
`LazyCommandGroup` names those commands and their modules; the first time one is asked for
(run, `--help`, the list of commands), its module's `register(app)` adds it and its siblings to
an app made like the group's own, and the group keeps them.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup

from sessionlog.cli.help_style import ConventionalGroup


class LazyCommandGroup(ConventionalGroup):
    """A group some of whose commands come from `modules` (command name -> module), each
    registered on an app `make_app` makes, when first asked for."""

    modules: ClassVar[dict[str, str]] = {}

    @staticmethod
    def make_app() -> typer.Typer:
        """An app to register a module's commands on, made as the group's own app is."""
        raise NotImplementedError

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()

    def list_commands(self, ctx: Any) -> list[str]:
        """The commands in the order they were registered, those of `modules` after the app's
        own and before its groups (`db`, `token`), where the list showed them when every
        module was loaded up front."""
        names: list[str] = super().list_commands(ctx)
        groups = [name for name in names if isinstance(self.commands[name], TyperGroup)]
        own = [name for name in names if name not in groups and name not in self.modules]
        return own + list(self.modules) + groups

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in self.modules:
            self._load(self.modules[cmd_name])
        command = super().get_command(ctx, cmd_name)
        if command is None:  # not a command: click suggests one of those loaded, so load them all
            for module in self.modules.values():
                self._load(module)
        return command

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        self._loaded.add(module)
        app = self.make_app()
        importlib.import_module(module).register(app)
        for name, command in typer.main.get_group(app).commands.items():
            self.commands.setdefault(name, command)
