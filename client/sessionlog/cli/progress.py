"""Progress bars for long CLI work: on a terminal only, never in a pipe or a log file.

The bar goes to stderr and only when stderr is a terminal, so the output a script reads
(stdout, or a file) is never mixed with it, and a command run from a script or a test prints
nothing extra. Work on small inputs shows no bar: it would only flicker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

LARGE_BYTES = 8 * 1024 * 1024
"""Reading fewer bytes than this shows no bar."""
LARGE_ITEMS = 5_000
"""Fewer events or runs than this show no bar."""

Advance = Callable[[int], None]


def on_terminal() -> bool:
    """Whether a bar may be drawn: stderr is an interactive terminal."""
    return sys.stderr.isatty() and Console(stderr=True).is_terminal


@contextmanager
def progress(
    description: str, total: int | None, *, unit: str = "items", minimum: int | None = None
) -> Iterator[Advance]:
    """Yield `advance(n)`; it draws a transient bar on a terminal for large work, else does nothing.

    `unit` is "bytes" (sizes, speed) or "items" (a count); `minimum` overrides what counts as
    large (`LARGE_BYTES`, `LARGE_ITEMS`), e.g. 1 when each item is a whole file to read.
    """
    threshold = minimum if minimum is not None else LARGE_BYTES if unit == "bytes" else LARGE_ITEMS
    large = total is None or total >= threshold
    if not (large and on_terminal()):
        yield _ignore
        return
    counter: ProgressColumn = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    columns: list[ProgressColumn] = [TextColumn(description), BarColumn(), counter]
    if unit == "bytes":
        columns.append(TransferSpeedColumn())
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance


def _ignore(n: int = 1) -> None:
    """What `advance` is when no bar is drawn."""
