"""structlog set-up: one JSON object per line on stderr, never payloads."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error")
"""The levels `configure` takes (any case)."""


def configure(level: str = "info", *, worker: int | None = None) -> None:
    """JSON logs at `level` (debug, info, warning, error); a `serve` worker's lines, from any of
    its threads, name it (`worker`).

    Each line goes out in one write: `serve --workers N` shares one stderr among N processes, and
    under `PYTHONUNBUFFERED` structlog's `PrintLogger` wrote a line and its newline in two writes,
    so two workers' lines could run together on one line."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    process = _ProcessFields({"worker": worker} if worker is not None else {})
    logging.basicConfig(level=numeric, handlers=[_stdlib_handler(process)])
    structlog.configure(
        processors=[*_fields(process), structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def _fields(process: _ProcessFields) -> list[Any]:
    """What every line carries, structlog's own and the standard library's alike: the call's
    context, the process's fields, the level, the time and any exception."""
    return [
        structlog.contextvars.merge_contextvars,
        process,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]


class _ProcessFields:
    """A processor adding fields that hold for the whole process (which worker it is). Bound as
    context variables they reached only the main thread's lines: the writer, change-feed and
    checkpoint threads start with a context of their own."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in self.fields.items():
            event.setdefault(key, value)
        return event


def _stdlib_handler(process: _ProcessFields) -> logging.Handler:
    """Where the standard library's loggers go (Alembic's migration lines at start-up, gRPC's,
    psycopg's): one JSON object per line like structlog's own, with the logger's name, so a log
    collector reading stderr as JSON Lines meets no line of plain text. (`StreamHandler` writes
    a line and its newline in one write.)"""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_without_alembic_chatter)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(),
            foreign_pre_chain=[*_fields(process), structlog.stdlib.add_logger_name],
        )
    )
    return handler


ALEMBIC_CHATTER = ("Context impl ", "Will assume ")
"""How Alembic's migration context describes itself (and its guess "Will assume non-transactional
DDL", which each step's own transaction in migrations/env.py makes wrong on SQLite)."""


def _without_alembic_chatter(record: logging.LogRecord) -> bool:
    """Keep Alembic's `Running upgrade` lines and its warnings; drop its INFO chatter (seven
    "setup plugin" lines and the context's self-description each time migrations ran)."""
    if record.levelno >= logging.WARNING or not record.name.startswith("alembic."):
        return True
    if record.name == "alembic.runtime.plugins":
        return False
    return not record.getMessage().startswith(ALEMBIC_CHATTER)
